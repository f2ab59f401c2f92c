"""KvtopApp: the keys, the screens and the engine subscription; the dashboard screen draws itself."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from textual import events, on
from textual.app import App, SystemCommand
from textual.filter import LineFilter
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Input

from kvtop.config import Settings, clamp_interval
from kvtop.config.ui_state import save_theme
from kvtop.engine import Engine, EngineSources, Notice, Step, build_sources
from kvtop.model.gpu import gpu_free_bytes
from kvtop.model.view_order import SORT_KEYS
from kvtop.model.views import AppState
from kvtop.sources.protocols import GpuSourceLike, OllamaSource, ProcSourceLike, SlotsSourceLike
from kvtop.ui.actions import OperatorActions
from kvtop.ui.ascii_mode import with_ascii
from kvtop.ui.commands import TEXTUAL_REPLACED, dead_key_reason, front_is_dashboard, palette_commands, refusal
from kvtop.ui.dashboard_text import ServerOverview, overview_key
from kvtop.ui.engine_views import EngineViews
from kvtop.ui.format import safe
from kvtop.ui.keys import BINDINGS, INTERVAL_STEPS_S
from kvtop.ui.messages import (
    ApplyStepRecorded,
    GpuSampled,
    LogEventsReceived,
    ReplayBurst,
    ReplayMoved,
    ReplayNotice,
    SlotsSampled,
    SnapshotReceived,
)
from kvtop.ui.screens.dashboard import DashboardScreen
from kvtop.ui.server_rounds import ServerSampled, ServerView
from kvtop.ui.server_switcher import ServerSwitcher
from kvtop.ui.textual_fixes import install_textual_fixes
from kvtop.ui.theme_setup import register_themes
from kvtop.ui.themes import DEFAULT_THEME, default_variables
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.models_table import ModelsTable

# Imported where they are first used (a dashboard that never opens them does not pay for them at
# startup; benchmarks/startup.py): the pushed screens (plan, history, model detail, server view,
# help, the write dialogs), the plot widget, the planner, the replay worker, the log parser.
if TYPE_CHECKING:
    from kvtop.sources.recorder import Recorder
    from kvtop.sources.recording import Recording
    from kvtop.sources.tail import LogSource
    from kvtop.ui.replay_worker import ReplayControl

SIGNAL_EXIT_GRACE_S = 5.0
"""After SIGTERM/SIGHUP, the longest a clean shutdown may take before the process just ends."""


class KvtopApp(EngineViews, ServerSwitcher, App[int]):
    """The dashboard.

    Data flows one way: the engine (``kvtop.engine.Engine``, run by one worker) polls every
    source, stages each result for its server and runs one apply step (fold everything staged,
    evaluate the alerts once, record the history once); the app subscribes to it
    (:meth:`_on_engine_step`) and sets ``state``; the dashboard screen (``screens/dashboard.py``)
    watches ``state`` and repaints itself once — at most about once per interval however many
    messages (log batches) arrived. The app keeps the keys, the screens, the recording's
    attachment and replay (whose worker posts recorded messages that are staged in the same
    engine); its parts are ``operator`` (the writes, ``actions.py``) and ``server_view``; the
    dashboard holds the panel layout (``DashboardScreen.panels``, ``layout.py``).
    Its bases: ``engine_views.EngineViews`` (the engine's state) and ``server_switcher.ServerSwitcher``.
    """

    CSS_PATH = "kvtop.tcss"
    TITLE = "kvtop"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = BINDINGS

    # var(): the dashboard screen watches these and updates only the widgets whose content
    # changed; a plain reactive would repaint the whole screen on every poll (benchmarks/cpu_idle.py).
    state: var[AppState | None] = var(None, always_update=True)  # a new state object is a new state: no deep compare
    sort_key: var[str] = var("server")
    sort_reverse: var[bool] = var(False)
    filter_text: var[str] = var("")
    paused: var[bool] = var(False)
    interval_s: var[float] = var(1.0)
    overview: var[tuple[ServerOverview, ...]] = var(())
    """The server switcher's rows (two or more servers), built again when a server's summary changes."""
    recording: var[bool] = var(False)
    """``--record`` is writing (the header's REC)."""
    replay_header: var[str | None] = var(None)
    """``--replay``: the recorded time and speed the header shows (``ReplayControl.header_text``)."""
    replay_status: var[str | None] = var(None, always_update=True)
    """``--replay``: set once the recording has been played to its end (its damage, if any)."""

    def __init__(
        self,
        settings: Settings,
        source: OllamaSource | None,
        *,
        poll: bool = True,
        log_source: LogSource | None = None,
        gpu_source: GpuSourceLike | None = None,
        proc_source: ProcSourceLike | None = None,
        more_sources: Mapping[str, OllamaSource] | None = None,
        replay: Recording | None = None,
        slots_source: SlotsSourceLike | None = None,
    ) -> None:
        install_textual_fixes()  # closed screens must not stay in Textual's caches (flat memory over weeks)
        super().__init__()
        self.operator = OperatorActions(self, repaint=self._repaint_dashboard)
        """The writes (``u``, ``a``, ``k``, an alert's fix) and their log: a part the app owns."""
        self.server_view = ServerView(self)
        """The server view (``i``) and its poller: a part the app owns."""
        self.settings = settings
        self.source = source
        servers: dict[str, OllamaSource] = {settings.host_url: source} if source is not None else {}
        servers.update(more_sources or {})
        self.engine = Engine(
            settings,
            EngineSources(servers=servers, log=log_source, gpu=gpu_source, procs=proc_source, slots=slots_source),
            poll=poll and source is not None,
        )
        """Polls, stages and applies (``kvtop.engine``); the app subscribes to its apply steps."""
        self.engine.interval_s = clamp_interval(settings.interval_s)
        self.engine.scheduled = True  # a live dashboard applies on the engine's timer, polled or not
        self.engine.subscribe(self._on_engine_step)
        self.engine.on_notice(self._on_engine_notice)
        self.engine.on_record_error = self._recording_failed
        self._poll = self.engine.poll
        self._threshold_warnings = list(self.engine.warnings)
        self.current_host = self.hosts[0]
        self.set_reactive(KvtopApp.state, self.states[self.current_host])
        self.set_reactive(KvtopApp.interval_s, clamp_interval(settings.interval_s))
        self.set_reactive(KvtopApp.overview, self._overview_rows())
        self.replay: ReplayControl | None = None
        """Playback of ``--replay`` (None when live)."""
        self.replay_quiet = False
        """True during a replay jump: the states change without a repaint until its end."""
        if replay is not None:
            from kvtop.ui.replay_worker import ReplayControl

            self.replay = ReplayControl(replay)
            self._poll = self.engine.poll = False
            self.engine.replaying = True
            self.engine.apply_each = not replay.header.apply_steps  # a recording without apply records
            self._reset_replay_state(replay)
            self.set_reactive(KvtopApp.replay_header, self.replay.header_text())

    @property
    def recorder(self) -> Recorder | None:
        """Where ``--record`` writes every staged message and apply step (None when not recording)."""
        return self.engine.recorder

    @recorder.setter
    def recorder(self, recorder: Recorder | None) -> None:
        self.engine.recorder = recorder
        self.recording = recorder is not None

    def _reset_replay_state(self, recording: Recording) -> None:
        """Replay's initial state: the recorded servers, alert thresholds and log time zone."""
        header = recording.header
        hosts = header.sources.get("hosts")
        hosts = (
            tuple(h for h in hosts if isinstance(h, str)) if isinstance(hosts, list) and hosts else (header.host_url,)
        )
        self._threshold_warnings = self.engine.reset(hosts, header.alerts, header.naive_tz)
        self.current_host = self.hosts[0]
        self.set_reactive(KvtopApp.state, self.states[self.current_host])

    _variable_defaults: dict[str, str] | None = None

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """kvtop's semantic colours, so any Textual theme can render the dashboard (read once)."""
        if self._variable_defaults is None:
            self._variable_defaults = default_variables()
        return dict(self._variable_defaults)

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's line filters, and in ASCII mode (``--ascii``, no UTF-8 locale) the ASCII one last."""
        return with_ascii(super().get_line_filters(), self.settings)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """kvtop's actions allowed over ``screen`` (the one the palette opened over), each with its
        key (``commands.palette_commands``), then Textual's theme picker, keys panel, screenshot."""
        yield from palette_commands(self, screen)
        yield from (c for c in super().get_system_commands(screen) if c.title not in TEXTUAL_REPLACED)

    def on_key(self, event: events.Key) -> None:
        """A key that nothing will act on says why (``commands.dead_key_reason``), never nothing."""
        reason = dead_key_reason(self, event.key)
        if reason is not None:
            self.notify(reason, timeout=4, markup=False)

    def get_default_screen(self) -> DashboardScreen:
        """The dashboard is the bottom screen; detail and help screens go on top of it."""
        return DashboardScreen()

    @property
    def dashboard(self) -> DashboardScreen:
        """The dashboard screen, whichever screen is in front."""
        screen = self.screen_stack[0]
        assert isinstance(screen, DashboardScreen)
        return screen

    def _repaint_dashboard(self) -> None:
        """The operator part's log changed, or a row counts down: the dashboard repaints."""
        if self.screen_stack:
            self.dashboard.repaint()

    def on_load(self) -> None:
        # the engine polls the servers and this machine and follows the log (kvtop.engine); started
        # before the terminal and the first compose, so the first poll's round trip overlaps them
        if self.replay is None and (self._poll or self.log_source is not None):
            self.run_worker(self.engine.run(), group="engine", exclusive=True, exit_on_error=False, name="engine")

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:  # a closed terminal or `kill` quits cleanly: the terminal is restored
                loop.add_signal_handler(sig, self._exit_on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests) or not supported (Windows)
        self._kvtop_themes, wanted, problems = register_themes(self, self.settings.theme)
        self._theme_loaded = False
        self.theme = wanted
        self._theme_loaded = True
        warnings = [w for w in self.settings.extra.get("warnings", "").splitlines() if w] + problems
        warnings += list(self._threshold_warnings)  # each starts with "[alerts]"
        for warning in warnings:
            self.notify(safe(warning, 300), severity="warning", timeout=10, markup=False)
        if self.replay is not None:
            from kvtop.ui.replay_worker import play

            self.run_worker(play(self, self.replay), group="replay", exclusive=True, exit_on_error=False)

    def _exit_on_signal(self) -> None:
        """SIGTERM / SIGHUP: quit cleanly; if the shutdown hangs (seen once after the terminal
        vanished: Textual's writer thread blocked on the dead terminal), end the process anyway
        after ``SIGNAL_EXIT_GRACE_S`` so nothing is left running without a terminal."""
        self.exit()
        watchdog = threading.Timer(SIGNAL_EXIT_GRACE_S, os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()

    async def on_unmount(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        await self.engine.aclose()  # every source, each once

    @on(LogEventsReceived)
    def on_log_events_received(self, message: LogEventsReceived) -> None:
        """A replayed log batch (parsed by the replay worker's ``LogFeed``): staged for the log's server."""
        self.engine.stage_log(
            message.events,
            source=message.source,
            status=message.status,
            ok=message.ok,
            lines=message.lines,
            dropped_lines=message.dropped_lines,
            raw_lines=message.raw_lines,
        )

    @on(SlotsSampled)
    def on_slots_sampled(self, message: SlotsSampled) -> None:
        """A replayed ``/props`` + ``/slots`` round (the runner rung)."""
        self.engine.stage_slots(message.snapshot)

    @on(GpuSampled)
    def on_gpu_sampled(self, message: GpuSampled) -> None:
        """A replayed GPU + process sample (this machine's: the local server's)."""
        self.engine.stage_gpu(message.gpu, message.procs)

    @on(SnapshotReceived)
    def on_snapshot_received(self, message: SnapshotReceived) -> None:
        """A replayed poll (routed to its server by ``host_url``)."""
        self.engine.stage_snapshot(message.snapshot)

    @on(ApplyStepRecorded)
    def on_apply_step_recorded(self, message: ApplyStepRecorded) -> None:
        """``--replay``: the live dashboard applied here: the engine's apply step runs now."""
        self.engine.apply_step()

    def _on_engine_step(self, step: Step) -> None:
        """After each apply step of the engine: the server on screen's new state becomes ``state``
        (the dashboard watches it and repaints once); the switcher's rows follow a server's summary;
        a poll that changed the loaded models lets the unloads in flight end."""
        if not self.is_running:
            return  # shutting down: a late step must not touch removed widgets
        overview_changed = False
        for host in step.changed:
            old, new = step.previous[host], step.states[host]
            if new.ollama is not old.ollama:
                self.operator.watch_unloads(host)
            if host == self.current_host:
                self.state = new
            overview_changed = overview_changed or overview_key(old) != overview_key(new)
        if overview_changed:
            self.overview = self._overview_rows()

    def _on_engine_notice(self, notice: Notice) -> None:
        """A source that failed (a log parser error, …), said once by the engine; notes are --once's."""
        if notice.error and self.is_running:
            self.notify(safe(notice.text, 300), severity="error", markup=False)

    def _recording_failed(self, recorder: Recorder, exc: Exception) -> None:
        """``--record``: a write failed (disk full, removed disk): the engine stopped recording."""
        self.recording = False
        self.notify(
            safe(f"recording stopped: {recorder.path}: {exc} — kvtop keeps running without recording", 300),
            severity="error",
            timeout=30,
            markup=False,
        )

    # -- replay ------------------------------------------------------------------------------------

    @on(ReplayBurst)
    def _replay_burst(self, message: ReplayBurst) -> None:
        """A replay jump: back to the initial state first when it goes back; one repaint at its end."""
        if message.restart and self.replay is not None:
            self._reset_replay_state(self.replay.recording)
        self.replay_quiet = message.start
        if not message.start:
            self.state = self.states[self.current_host]  # the dashboard repaints once, now

    @on(ReplayNotice)
    def _replay_notice(self, message: ReplayNotice) -> None:
        self.notify(safe(message.text, 300), severity="error", markup=False)

    @on(ReplayMoved)
    def replay_moved(self) -> None:
        """The replay worker applied a record or reached the end: the header follows; the end of a
        damaged recording is said once."""
        control = self.replay
        if control is None or not self.is_running:
            return
        self.replay_header = control.header_text()
        if control.player.at_end and self._pending:
            self.engine.apply_step()  # the last records, if the recording ends without their apply record
        if control.player.at_end and not control.end_reported:
            control.end_reported = True
            damage = control.status_text()
            if damage:
                self.notify(safe(damage, 300), severity="warning", timeout=30, markup=False)
            self.replay_status = damage

    def action_replay_pause(self) -> None:
        self.action_toggle_pause()

    def action_replay_step(self) -> None:
        """``.``: one record forward (pauses first)."""
        if self.replay is not None:
            if not self.paused:
                self.action_toggle_pause()
            self.replay.request(step=True)

    def action_replay_speed(self, factor: float) -> None:
        if self.replay is not None:
            player = self.replay.player
            player.faster() if factor > 1 else player.slower()
            self.replay.wake.set()
            self.replay_header = self.replay.header_text()

    def action_replay_jump(self, where: str) -> None:
        if self.replay is not None:
            from kvtop.ui.replay_worker import jump_request

            self.replay.request(jump=jump_request(where))

    # -- view settings (the dashboard watches them) ------------------------------------------------

    def watch_paused(self) -> None:
        self.engine.paused = self.paused

    def watch_interval_s(self) -> None:
        self.engine.interval_s = self.interval_s

    def watch_theme(self, theme: str) -> None:
        """Remember a theme picked with ``t`` or the command palette for the next start."""
        if getattr(self, "_theme_loaded", False):
            problem = save_theme(theme)  # said once, where t and the palette both land
            level = "warning" if problem else "information"
            self.notify(problem or f"saved: theme {theme}", severity=level, timeout=5 if problem else 1.5, markup=False)

    def action_server_view(self) -> None:
        """Open the server view of the server on screen (``ServerView.open``)."""
        self.server_view.open()

    def on_server_sampled(self, message: ServerSampled) -> None:
        """Stage a server-view sample posted to the app (tests) for the server's next apply step."""
        self.server_view.stage(message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Whether ``action`` exists now (``commands.refusal``: no writes with ``--readonly``, no
        signal in the demo, sorting and filtering on the dashboard only, plain keys typed into the
        filter box …); a refused key's binding leaves the footer."""
        return (
            refusal(self, action, over_dashboard=front_is_dashboard(self), typing=isinstance(self.focused, Input))
            is None
        )

    # -- the keys ----------------------------------------------------------------------------------

    def action_what_if(self) -> None:
        """Open the what-if planner for the selected model."""
        view = self.dashboard.selected_view
        if view is None or view.cloud:
            self.notify("select a local model first (w plans a loaded model's memory)", markup=False)
            return
        from kvtop.ui.screens.plan import PlanScreen

        self.push_screen(
            PlanScreen(
                view.name,
                view.digest,
                gpu_free_bytes=self.gpu_free_bytes(),
                readonly=self.settings.readonly,
                host_url=self.current_host,
                writer=self.sources.get(self.current_host),
                access=self.settings.access_for(self.current_host),
            )
        )

    def gpu_free_bytes(self) -> int | None:
        """Free GPU memory for the planner; None until a GPU source reports it."""
        return gpu_free_bytes(self.state.gpu) if self.state is not None and self.state.gpu is not None else None

    def action_interrupt(self) -> None:
        """Ctrl+C quits, whatever has the focus (it is never typed into the filter box)."""
        self.exit()

    def action_toggle_gpu(self) -> None:
        self.dashboard.toggle_gpu()

    def action_toggle_events(self) -> None:
        """``l``: the events panel (the choice is saved like the other panels')."""
        self.dashboard.panels.toggle_panel("events")

    def action_toggle_map(self) -> None:
        self.dashboard.panels.toggle_panel("map")

    def action_toggle_alerts(self) -> None:
        self.dashboard.panels.toggle_panel("alerts")

    def action_toggle_history_panel(self) -> None:
        self.dashboard.panels.toggle_panel("history")

    def action_toggle_raw(self) -> None:
        self.dashboard.toggle_raw()

    def action_history(self) -> None:
        """Open the history screen (plots) of the server on screen."""
        from kvtop.ui.screens.history import HistoryScreen

        self.push_screen(HistoryScreen(self.histories[self.current_host]))

    def action_cursor_down(self) -> None:
        """``j``: what ``↓`` does where the focus is (the table's next row, a panel's next fix, a scroll)."""
        self.simulate_key("down")

    def action_help(self) -> None:
        from kvtop.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.engine.paused = self.paused
        self.engine.wake()
        if self.replay is not None:
            self.replay.player.paused = self.paused
            self.replay.wake.set()

    def _step_interval(self, direction: int) -> None:
        steps = INTERVAL_STEPS_S
        current = self.interval_s
        if direction > 0:
            nxt = next((s for s in steps if s > current), steps[-1])
        else:
            nxt = next((s for s in reversed(steps) if s < current), steps[0])
        self.interval_s = nxt  # the header shows it
        self.engine.interval_s = nxt

    def action_slower(self) -> None:
        self._step_interval(+1)

    def action_faster(self) -> None:
        self._step_interval(-1)
        self.engine.wake()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse

    def action_cycle_theme(self) -> None:
        names = list(self._kvtop_themes) or [DEFAULT_THEME]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]  # watch_theme saves it and says so

    def action_cycle_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(i + 1) % len(SORT_KEYS)]

    def action_filter(self) -> None:
        self.dashboard.open_filter()

    def action_clear_filter(self) -> None:
        self.dashboard.clear_filter()

    def action_unload(self) -> None:
        """``u``: unload the selected model (asks first)."""
        self.operator.unload_selected()

    def action_keep_alive(self) -> None:
        """``a``: pick a keep-alive for the selected model, then confirm it."""
        self.operator.keep_alive_selected()

    def action_signal_process(self, only_pid: int | None = None) -> None:
        """``k``: signal a GPU process that is not Ollama's (asks first)."""
        self.operator.signal_process(only_pid)

    def on_events_pane_fix_chosen(self, event: EventsPane.FixChosen) -> None:
        """Enter on an alert's fix in the events pane (``OperatorActions.fix_chosen``)."""
        self.operator.fix_chosen(event.fix, event.alert)

    @on(ModelsTable.RowSelected)
    def _open_detail(self, event: ModelsTable.RowSelected) -> None:
        view = self.dashboard.selected_view
        if view is not None:
            from kvtop.ui.screens.model_detail import ModelDetailScreen

            self.push_screen(ModelDetailScreen(view.name, view.digest))


def make_app(
    settings: Settings,
    source: OllamaSource | None = None,
    *,
    poll: bool = True,
    log_source: LogSource | None = None,
    gpu_source: GpuSourceLike | None = None,
    proc_source: ProcSourceLike | None = None,
    more_sources: Mapping[str, OllamaSource] | None = None,
    replay: Recording | None = None,
    slots_source: SlotsSourceLike | None = None,
) -> KvtopApp:
    """Build the app for the CLI and the tests alike (one factory).

    ``replay`` (``kvtop --replay``): play that recording instead of polling; no source is made.

    ``more_sources`` (host URL → source) are the servers after the first; without it, one
    ``OllamaClient`` is made for each of ``settings.more_hosts`` when ``source`` is None.

    Raises:
        ValueError: ``settings.log_spec`` is not a valid log spec.
    """
    if replay is not None:
        return KvtopApp(settings, None, poll=False, replay=replay)
    # the one factory of sources (kvtop.engine.build_sources): a client per server with its access
    # options, the log, and this machine's GPU, processes and /slots on a real run (no source given)
    servers = (
        None
        if source is None and more_sources is None
        else {**({settings.host_url: source} if source is not None else {}), **(more_sources or {})}
    )
    built = build_sources(
        settings,
        servers=servers,
        log=log_source,
        gpu=gpu_source,
        procs=proc_source,
        slots=slots_source,
        machine=source is None,
    )
    if source is None and settings.host_url not in built.servers:
        from kvtop.engine import ollama_client

        built.servers = {settings.host_url: ollama_client(settings, settings.host_url), **built.servers}
    first = built.servers.get(settings.host_url)
    more = {h: src for h, src in built.servers.items() if h != settings.host_url}
    app = KvtopApp(
        settings,
        first,
        poll=poll,
        log_source=built.log,
        gpu_source=built.gpu,
        proc_source=built.procs,
        more_sources=more,
        slots_source=built.slots,
    )
    app.engine.sources.conns = built.conns  # the queue (this machine's sockets): the header, i and Enter show it
    return app
