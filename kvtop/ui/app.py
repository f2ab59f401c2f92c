"""KvtopApp: owns the state, runs the pollers, delegates everything else to ``model/``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.binding import Binding
from textual.filter import LineFilter
from textual.reactive import var
from textual.widgets import Input, Static

from kvtop.config import Settings, clamp_interval
from kvtop.config.files import config_dir
from kvtop.config.ui_state import save_theme
from kvtop.engine import (  # noqa: F401 - the apply timing constants and fold_pending, re-exported for the tests
    APPLY_SETTLE_S,
    LOG_APPLY_GAP_INTERVALS,
    REPLAY_PENDING_MAX,
    Engine,
    EngineSources,
    Notice,
    Step,
    build_sources,
    fold_pending,
)
from kvtop.model.gpu import GpuPanelData, gpu_free_bytes, gpu_panel_data
from kvtop.model.logstate import LogState
from kvtop.model.state import SORT_KEYS, AppState, filter_views, sort_views
from kvtop.ui.actions import WRITE_ACTIONS, OperatorActions, live_views
from kvtop.ui.ascii_mode import with_ascii
from kvtop.ui.format import legend, safe
from kvtop.ui.server_view import ServerSampled, ServerView
from kvtop.ui.textual_fixes import install_textual_fixes
from kvtop.ui.layout import PanelLayout
# Imported where they are used (a dashboard that never replays, opens help or follows a log does
# not pay for them at startup; benchmarks/startup.py): the log parser, /slots, the replay
# worker and the recording format, the help and detail screens.
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
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.screens.dashboard import DashboardScreen
from kvtop.ui.themes import DEFAULT_THEME, KVTOP_THEMES, default_variables, load_themes_reporting
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.models_table import SPARK_CELLS, SPARK_MIN_COLUMNS, ModelsTable

INTERVAL_STEPS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
MIN_WIDTH, MIN_HEIGHT = 70, 12
SIGNAL_EXIT_GRACE_S = 5.0
"""After SIGTERM/SIGHUP, the longest a clean shutdown may take before the process just ends."""

from kvtop.sources.protocols import GpuSourceLike, OllamaSource, ProcSourceLike, SlotsSourceLike

if TYPE_CHECKING:
    from kvtop.engine.fold import Pending
    from kvtop.sources.replay import Recorder, Recording
    from kvtop.ui.replay_worker import ReplayControl
    from kvtop.sources.tail import LogSource


class KvtopApp(OperatorActions, PanelLayout, App[int]):
    """The dashboard.

    Data flows one way: the engine (``kvtop.engine.Engine``, run by one worker) polls every
    source, stages each result for its server and runs one apply step (fold everything staged,
    evaluate the alerts once, record the history once); the app subscribes to it
    (:meth:`_on_engine_step`) and sets ``state``, and the dashboard repaints once — at most about
    once per interval however many messages (log batches) arrived. The app keeps the keys, the
    screens, the recording's attachment and replay (whose worker posts recorded messages that are
    staged in the same engine).
    """

    CSS_PATH = "kvtop.tcss"
    TITLE = "kvtop"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus,equals_sign", "slower", "Slower", key_display="+", show=False),
        Binding("minus", "faster", "Faster", key_display="-", show=False),
        Binding("s", "cycle_sort", "Sort"),
        Binding("S", "reverse_sort", "Reverse sort", show=False),
        Binding("t", "cycle_theme", "Theme", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("l", "toggle_events", "Log"),
        Binding("g", "toggle_gpu", "GPU"),
        Binding("m", "toggle_map", "Map"),
        Binding("f", "toggle_alerts", "Fixes", show=False),
        Binding("v", "toggle_history_panel", "VRAM history", show=False),
        Binding("w", "what_if", "What if"),
        Binding("i", "server_view", "Server"),
        Binding("u", "unload", "Unload"),
        Binding("a", "keep_alive", "Keep-alive"),
        Binding("k", "signal_process", "Signal", show=False),
        Binding("h", "history", "History", show=False),
        Binding("r", "toggle_raw", "Raw lines", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("space", "replay_pause", "Play/pause", key_display="space"),
        Binding("full_stop", "replay_step", "Step", key_display=".", show=False),
        Binding("greater_than_sign", "replay_speed(2)", "Faster", key_display=">"),
        Binding("less_than_sign", "replay_speed(0.5)", "Slower", key_display="<", show=False),
        Binding("J,ctrl+right", "replay_jump('forward')", "+1 min", key_display="J"),
        Binding("K,ctrl+left", "replay_jump('back')", "-1 min", key_display="K", show=False),
        Binding("B", "replay_jump('start')", "Start", show=False),
        Binding("right_square_bracket", "next_server", "Next server", key_display="]"),
        Binding("left_square_bracket", "prev_server", "Prev server", key_display="[", show=False),
        *(Binding(str(n), f"server({n})", f"Server {n}", show=False) for n in range(1, 10)),
    ]
    MAIN_SCREEN_ACTIONS = frozenset({"cycle_sort", "filter", "clear_filter", "help", "toggle_events", "toggle_raw",
                                     "server_view",
                                     "what_if", "toggle_gpu", "next_server", "prev_server", "server",
                                     "history", "toggle_map", "toggle_alerts", "toggle_history_panel",
                                     *WRITE_ACTIONS})
    """Actions that only make sense on the dashboard itself (not over the detail view)."""
    TYPING_HIDES = frozenset({"quit", "help", "toggle_pause", "slower", "faster", "cycle_sort", "reverse_sort",
                              "server_view",
                              "filter", "toggle_events", "toggle_raw", "cycle_theme", "what_if", "toggle_gpu",
                              "next_server", "prev_server", "server", "history", "toggle_map", "toggle_alerts",
                              "toggle_history_panel", *WRITE_ACTIONS})
    """Actions whose keys are plain characters, hidden from the footer while the filter box has focus."""
    REPLAY_ACTIONS = frozenset({"replay_pause", "replay_step", "replay_speed", "replay_jump"})
    """Actions of ``--replay`` only."""
    LIVE_ACTIONS = frozenset({"slower", "faster", "what_if", *WRITE_ACTIONS})
    """Actions that need a live server (hidden in ``--replay``)."""

    # var(): these feed watchers that update only the widgets whose content changed; a plain
    # reactive would repaint the whole screen on every poll (benchmarks/cpu_idle.py).
    state: var[AppState | None] = var(None, always_update=True)  # a new state object is a new state: no deep compare
    sort_key: var[str] = var("server")
    sort_reverse: var[bool] = var(False)
    filter_text: var[str] = var("")
    paused: var[bool] = var(False)
    interval_s: var[float] = var(1.0)

    def __init__(self, settings: Settings, source: OllamaSource | None, *, poll: bool = True,
                 log_source: LogSource | None = None, gpu_source: GpuSourceLike | None = None,
                 proc_source: ProcSourceLike | None = None,
                 more_sources: Mapping[str, OllamaSource] | None = None,
                 replay: Recording | None = None, slots_source: SlotsSourceLike | None = None) -> None:
        install_textual_fixes()  # closed screens must not stay in Textual's caches (flat memory over weeks)
        super().__init__()
        self._init_operator()
        self._init_panels()
        self.server_view = ServerView(self)
        """The server view (``i``) and its poller: a part the app owns."""
        self.settings = settings
        self.source = source
        servers: dict[str, OllamaSource] = {settings.host_url: source} if source is not None else {}
        servers.update(more_sources or {})
        self.engine = Engine(settings, EngineSources(servers=servers, log=log_source, gpu=gpu_source,
                                                     procs=proc_source, slots=slots_source),
                             poll=poll and source is not None)
        """Polls, stages and applies (``kvtop.engine``); the app subscribes to its apply steps."""
        self.engine.interval_s = clamp_interval(settings.interval_s)
        self.engine.scheduled = True  # a live dashboard applies on the engine's timer, polled or not
        self.engine.subscribe(self._on_engine_step)
        self.engine.on_notice(self._on_engine_notice)
        self.engine.on_record_error = self._recording_failed
        self._poll = self.engine.poll
        self._dashboard_ready = False
        self._static_cache: dict[str, Text] = {}
        self._sparks: tuple[object, dict[tuple[str, str], str]] | None = None
        self._panel: tuple[tuple[object, ...], GpuPanelData] | None = None
        self.gpu_panel_joins = 0
        """Times the GPU panel's data was joined (``gpu_panel_data``): per new sample, not per repaint."""
        self.sparkline_builds = 0
        """Times the table's VRAM sparklines were built: once per history sample, not per repaint
        (a key between polls reuses them; observer-cost tests count them)."""
        self._threshold_warnings = list(self.engine.warnings)
        self.current_host = self.hosts[0]
        self.set_reactive(KvtopApp.state, self.states[self.current_host])
        self.set_reactive(KvtopApp.interval_s, clamp_interval(settings.interval_s))
        self.replay: ReplayControl | None = None
        """Playback of ``--replay`` (None when live)."""
        self._replay_quiet = False
        if replay is not None:
            from kvtop.ui.replay_worker import ReplayControl

            self.replay = ReplayControl(replay)
            self._poll = self.engine.poll = False
            self.engine.replaying = True
            self.engine.apply_each = not replay.header.apply_steps  # a recording without apply records
            self._reset_replay_state(replay)

    # the engine's view of the servers, read by the screens, the mixins and the tests
    sources = property(lambda self: self.engine.sources.servers,
                       doc="Host URL → its poller (the engine's; empty in a replay).")
    hosts = property(lambda self: self.engine.hosts,
                     doc="Every server watched, in the order given; ``state`` is the one on screen.")
    local_host = property(lambda self: self.engine.local_host,
                          doc="The server this machine's GPU sample and the server log belong to.")
    machine_hosts = property(lambda self: self.engine.machine_hosts,
                             doc="The other servers on this machine: their runners and environment are read here too.")
    states = property(lambda self: self.engine.states, doc="Each server's state (the engine's).")
    histories = property(lambda self: self.engine.histories,
                         doc="Each server's capped history (plots on ``h``, the table's VRAM sparkline).")
    apply_steps = property(lambda self: self.engine.apply_steps, doc="Apply steps the engine ran.")
    alert_evaluations = property(lambda self: self.engine.alert_evaluations,
                                 doc="Alert evaluations run by the apply steps (one per changed server and step).")
    _pending = property(lambda self: self.engine.pending, doc="Staged messages not applied yet, by server.")
    log_source = property(lambda self: self.engine.sources.log,
                          lambda self, v: setattr(self.engine.sources, "log", v),
                          doc="The server log followed (the local server's), or None.")
    gpu_source = property(lambda self: self.engine.sources.gpu,
                          lambda self, v: setattr(self.engine.sources, "gpu", v),
                          doc="This machine's GPU reader (the demo's simulated one), or None.")
    proc_source = property(lambda self: self.engine.sources.procs,
                           lambda self, v: setattr(self.engine.sources, "procs", v),
                           doc="This machine's process reader, or None.")
    slots_source = property(lambda self: self.engine.sources.slots,
                            lambda self, v: setattr(self.engine.sources, "slots", v),
                            doc="The local runners' ``/slots`` reader, or None.")

    @property
    def recorder(self) -> Recorder | None:
        """Where ``--record`` writes every staged message and apply step (None when not recording)."""
        return self.engine.recorder

    @recorder.setter
    def recorder(self, recorder: Recorder | None) -> None:
        self.engine.recorder = recorder

    def _reset_replay_state(self, recording: Recording) -> None:
        """Replay's initial state: the recorded servers, alert thresholds and log time zone."""
        header = recording.header
        hosts = header.sources.get("hosts")
        hosts = tuple(h for h in hosts if isinstance(h, str)) if isinstance(hosts, list) and hosts else (
            header.host_url,)
        self._threshold_warnings = self.engine.reset(hosts, header.alerts, header.naive_tz)
        self.current_host = self.hosts[0]
        self.set_reactive(KvtopApp.state, self.states[self.current_host])

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """kvtop's semantic colours, so any Textual theme can render the dashboard."""
        return default_variables()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's line filters, and in ASCII mode (``--ascii``, no UTF-8 locale) the ASCII one last."""
        return with_ascii(super().get_line_filters(), self.settings)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's commands, and the writes (``u``, ``a``, ``k``) unless ``--readonly``."""
        yield from super().get_system_commands(screen)
        yield from self.operator_commands(screen)

    def get_default_screen(self) -> DashboardScreen:
        """The dashboard is the bottom screen; detail and help screens go on top of it."""
        return DashboardScreen()

    @property
    def dashboard(self) -> DashboardScreen:
        """The dashboard screen, whichever screen is in front."""
        screen = self.screen_stack[0]
        assert isinstance(screen, DashboardScreen)
        return screen

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:  # a closed terminal or `kill` quits cleanly: the terminal is restored
                loop.add_signal_handler(sig, self._exit_on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests) or not supported (Windows)
        themes, problems = load_themes_reporting(config_dir() / "themes")
        for theme in themes.values():
            self.register_theme(theme)
        self._kvtop_themes = tuple(n for n in KVTOP_THEMES if n in themes) + tuple(
            n for n in themes if n not in KVTOP_THEMES)
        wanted = self.settings.theme
        if wanted not in self.available_themes:
            problems.append(f"unknown theme {wanted!r}: using {DEFAULT_THEME} (themes: {', '.join(themes)})")
            wanted = DEFAULT_THEME
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
        elif self._poll or self.log_source is not None:
            # the engine polls the servers and this machine and follows the log (kvtop.engine)
            self.run_worker(self.engine.run(), group="engine", exclusive=True, exit_on_error=False, name="engine")

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
        self.engine.stage_log(message.events, source=message.source, status=message.status, ok=message.ok,
                              lines=message.lines, dropped_lines=message.dropped_lines, raw_lines=message.raw_lines)

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

    def _stage(self, host: str, item: Pending, *, urgent: bool = True) -> None:
        """Keep one message for ``host``'s next apply step (``Engine.stage``: the server view's samples)."""
        self.engine.stage(host, item, urgent=urgent)

    @on(ApplyStepRecorded)
    def on_apply_step_recorded(self, message: ApplyStepRecorded) -> None:
        """``--replay``: the live dashboard applied here."""
        self._apply_pending()

    def _apply_pending(self) -> None:
        """Run the engine's apply step now (a replay's apply record; the end of a recording)."""
        self.engine.apply_step()

    def _on_engine_step(self, step: Step) -> None:
        """After each apply step of the engine: the server on screen's new state repaints the
        dashboard once (``watch_state``); the overview row follows a server's summary; a poll
        that changed the loaded models lets the unloads in flight end."""
        if not self.is_running:
            return  # shutting down: a late step must not touch removed widgets
        overview_changed = False
        for host in step.changed:
            old, new = step.previous[host], step.states[host]
            if new.ollama is not old.ollama:
                self.watch_unloads(host)
            if host == self.current_host:
                self.state = new
            overview_changed = overview_changed or _overview_key(old) != _overview_key(new)
        if overview_changed and len(self.hosts) > 1:
            self._refresh_servers_bar()

    def _on_engine_notice(self, notice: Notice) -> None:
        """A source that failed (a log parser error, …), said once by the engine; notes are --once's."""
        if notice.error and self.is_running:
            self.notify(safe(notice.text, 300), severity="error", markup=False)

    def _recording_failed(self, recorder: Recorder, exc: Exception) -> None:
        """``--record``: a write failed (disk full, removed disk): the engine stopped recording."""
        if self._dashboard_ready:
            self.dashboard.query_one(ServerHeader).recording = False
        self.notify(safe(f"recording stopped: {recorder.path}: {exc} — kvtop keeps running without recording", 300),
                    severity="error", timeout=30, markup=False)

    def _refresh_servers_bar(self) -> None:
        if not self._dashboard_ready or not self.is_running or len(self.hosts) < 2:
            return
        rows = [server_overview(self.states[h], h == self.current_host) for h in self.hosts]
        self._update_static("#servers", servers_bar(rows, dict(self.theme_variables), self.size.width - 2))

    def show_server(self, index: int) -> None:
        """Put the ``index``-th server (0-based, in ``--host`` order) on screen."""
        if not 0 <= index < len(self.hosts) or self.hosts[index] == self.current_host:
            return
        self.current_host = self.hosts[index]
        self.state = self.states[self.current_host]
        self._refresh_servers_bar()

    def action_next_server(self) -> None:
        self.show_server((self.hosts.index(self.current_host) + 1) % len(self.hosts))

    def action_prev_server(self) -> None:
        self.show_server((self.hosts.index(self.current_host) - 1) % len(self.hosts))

    def action_server(self, number: int) -> None:
        """Keys ``1``–``9``: the server with that number in the overview row."""
        self.show_server(number - 1)

    def watch_state(self) -> None:
        if not self._replay_quiet:
            self._refresh_all()

    @on(ReplayBurst)
    def _replay_burst(self, message: ReplayBurst) -> None:
        """A replay jump: back to the initial state first when it goes back; one repaint at its end."""
        if message.restart and self.replay is not None:
            self._reset_replay_state(self.replay.recording)
        self._replay_quiet = message.start
        if not message.start:
            self.state = self.states[self.current_host]
            self._refresh_all()

    @on(ReplayNotice)
    def _replay_notice(self, message: ReplayNotice) -> None:
        self.notify(safe(message.text, 300), severity="error", markup=False)

    @on(ReplayMoved)
    def replay_moved(self) -> None:
        """The replay worker applied a record or reached the end: the header follows; the end of a
        damaged recording is said once."""
        control = self.replay
        if control is None or not self._dashboard_ready or not self.is_running:
            return
        self.dashboard.query_one(ServerHeader).replay = control.header_text()
        if control.player.at_end and self._pending:
            self._apply_pending()  # the last records, if the recording ends without their apply record
        if control.player.at_end and not control.end_reported:
            control.end_reported = True
            damage = control.status_text()
            if damage:
                self.notify(safe(damage, 300), severity="warning", timeout=30, markup=False)
            self._refresh_all()

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
            self._refresh_all()

    def action_replay_jump(self, where: str) -> None:
        if self.replay is not None:
            from kvtop.ui.replay_worker import jump_request

            self.replay.request(jump=jump_request(where))

    def watch_sort_key(self) -> None:
        self._refresh_all()

    def watch_filter_text(self) -> None:
        self._refresh_all()

    def watch_paused(self) -> None:
        self.engine.paused = self.paused
        self._refresh_all()

    def watch_interval_s(self) -> None:
        self.engine.interval_s = self.interval_s
        self._refresh_all()

    def action_server_view(self) -> None:
        """Open the server view of the server on screen (``ServerView.open``)."""
        self.server_view.open()

    def on_server_sampled(self, message: ServerSampled) -> None:
        """Stage a server-view sample posted to the app (tests) for the server's next apply step."""
        self.server_view.stage(message)

    def dashboard_mounted(self) -> None:
        """Called by the dashboard screen once its widgets exist."""
        self.dashboard.query_one(ServerHeader).demo = self.settings.demo
        self.dashboard.query_one(ServerHeader).recording = self.recorder is not None
        self.dashboard.query_one("#servers").set_class(len(self.hosts) > 1, "-visible")
        self._dashboard_ready = True
        self._refresh_servers_bar()
        self._refresh_all()

    def refresh_dashboard(self) -> None:
        """Re-render the dashboard from the current state, size and view settings."""
        self._refresh_all()

    def _refresh_all(self) -> None:
        if not self._dashboard_ready or self.state is None or not self.is_running:
            return  # not up yet, or shutting down: a late GpuSampled must not query removed widgets
        state = self.state
        main = self.dashboard
        too_small = self.size.width < MIN_WIDTH or self.size.height < MIN_HEIGHT
        main.set_class(too_small, "-too-small")
        if too_small:
            self._update_static("#too-small", Text(
                f"Terminal too small: {self.size.width}×{self.size.height}.\n"
                f"kvtop needs at least {MIN_WIDTH}×{MIN_HEIGHT}. Resize, or press q to quit.",
                justify="center",
            ))
        header = main.query_one(ServerHeader)
        header.interval_s = self.interval_s
        header.paused = self.paused
        header.replay = self.replay.header_text() if self.replay is not None else None
        header.tls = self.settings.access_for(state.host_url).tls_flag
        header.state = state
        views = filter_views(sort_views(state.models, self.sort_key), self.filter_text)
        if self.sort_reverse:
            views = tuple(reversed(views))
        live = self.replay is None
        views, ticking = live_views(views, time.time(), self.unloading_keys(self.current_host)) if live else (views, False)
        self.schedule_until_tick(ticking)
        table = main.query_one(ModelsTable)
        table.set_class(state.stale_s is not None, "-stale")
        sparks = self._sparklines() if self.size.width >= SPARK_MIN_COLUMNS else None  # the column shows from there
        table.show(views, self.size.width, sparks, sort=(self.sort_key, self.sort_reverse))
        status = Text(no_wrap=True, overflow="ellipsis")
        if self.filter_text:
            status.append(f"filter: {safe(self.filter_text, 20)} ({len(views)} of {len(state.models)})  ")
        narrow = self.size.width < 100
        status.append(f"sort: {self.sort_key}{' ↑' if self.sort_reverse else ''}  {legend(state.models, short=narrow)}"
                      f"  Enter details  ? help")
        if state.ollama is not None and state.ollama.reachable and not state.models:
            status = Text("No model loaded: models appear here when a client loads one.")
        if state.ollama is not None and not state.ollama.reachable and self.replay is None:
            from kvtop.model.hints import unreachable_hint_line  # the way forward, as --once/--check say it

            status = Text(unreachable_hint_line(self.size.width - 2, demo=self.settings.demo,
                                                error_kind=state.ollama.error_kind, error=state.ollama.error),
                          no_wrap=True,
                          overflow="ellipsis", style=dict(self.theme_variables).get("kv-warn", ""))
        if self.replay is not None and self.replay.status_text():
            status = Text(f"{self.replay.status_text()}", no_wrap=True, overflow="ellipsis")
        self._update_static("#status", status)
        if state.host_url == self.local_host or self.log_source is None:
            self._update_static("#logline", log_line(state.log, self.settings.log_spec))
        else:
            self._update_static("#logline", Text(
                f"Server log: none for this server (the log read is server {self.hosts.index(self.local_host) + 1}'s):"
                " figures are reported or estimated", no_wrap=True, overflow="ellipsis"))
        main.query_one("#alertbar").set_class(not state.alerts, "-none")
        self._update_static("#alertbar", alert_bar(state, dict(self.theme_variables), self.size.width - 2))
        if state.host_url == self.local_host:
            panel = self._gpu_panel(state)
        else:  # the GPU sample is this machine's: it belongs to the local server only
            panel = GpuPanelData(status=f"GPU telemetry: none for this server (this machine's GPUs show with server"
                                        f" {self.hosts.index(self.local_host) + 1})")
        shown = self.refresh_panels(state, panel, state.host_url == self.local_host)
        # with the map on screen the GPU strip keeps what the map lacks, one line per GPU
        main.query_one(GpuPanel).show_data(panel, self.size.width, compact=True if shown["map"] else None)
        events = main.query_one(EventsPane)
        if events.has_class("-visible"):
            # the alerts panel, when shown, has the alerts and their fixes: the events pane keeps to events
            events.show(state.log, self.filter_text, () if shown["alerts"] else state.alerts, self.operator_log)

    def _gpu_panel(self, state: AppState) -> GpuPanelData:
        """``gpu_panel_data`` of the local server's samples and models, joined again only when one
        of them is a new object (a key between polls reuses it: ~9 ms at 1,000 models)."""
        key = (state.gpu, state.procs, state.models)
        if self._panel is None or any(a is not b for a, b in zip(key, self._panel[0])):
            self.gpu_panel_joins += 1
            self._panel = (key, gpu_panel_data(state.gpu, state.procs, state.models))
        return self._panel[1]

    def _sparklines(self) -> dict[tuple[str, str], str]:
        """The table's VRAM sparklines of the server on screen, built again only when its history
        stored a sample (issue 23: ~20 ms at 1,000 models, on every key that repaints)."""
        history = self.histories[self.current_host]
        key = (self.current_host, id(history), history.version, history.latest_s)
        if self._sparks is None or self._sparks[0] != key:
            self.sparkline_builds += 1
            self._sparks = (key, history.sparklines(cells=SPARK_CELLS))
        return self._sparks[1]

    def _update_static(self, selector: str, content: Text) -> None:
        """Update a Static only when its text changed (an update forces a layout pass)."""
        if self._static_cache.get(selector) != content:
            self._static_cache[selector] = content
            self.dashboard.query_one(selector, Static).update(content)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Sorting, filtering and help act on the dashboard, not through the detail view; the
        writes (``WRITE_ACTIONS``) do not exist with ``--readonly``."""
        if action in WRITE_ACTIONS and self.settings.readonly:
            return False
        if action == "signal_process" and (self.proc_source is None or self.settings.demo):
            return False  # no process table read here, or the demo's simulated one: its PIDs are not this machine's
        if action in self.REPLAY_ACTIONS and self.replay is None:
            return False  # replay keys exist only in --replay
        if action in self.LIVE_ACTIONS and self.replay is not None:
            return False  # no server to poll faster or to plan against in a replay
        if action in ("next_server", "prev_server", "server") and len(self.hosts) < 2:
            return False  # one server: the switcher keys do nothing and the footer leaves them out
        if action in self.MAIN_SCREEN_ACTIONS and len(self.screen_stack) > 1:
            return False
        if isinstance(self.focused, Input) and action in self.TYPING_HIDES:
            return False  # these keys are being typed into the filter box: the footer must not offer them
        return True

    def action_what_if(self) -> None:
        """Open the what-if planner for the selected model."""
        view = self.dashboard.query_one(ModelsTable).selected_view
        if view is None or view.cloud:
            self.notify("select a local model first (w plans a loaded model's memory)", markup=False)
            return
        from kvtop.ui.screens.plan import PlanScreen

        self.push_screen(PlanScreen(view.name, view.digest, gpu_free_bytes=self.gpu_free_bytes(),
                                    readonly=self.settings.readonly, host_url=self.current_host,
                                    writer=self.sources.get(self.current_host),
                                    access=self.settings.access_for(self.current_host)))

    def gpu_free_bytes(self) -> int | None:
        """Free GPU memory for the planner; None until a GPU source reports it."""
        return gpu_free_bytes(self.state.gpu) if self.state is not None and self.state.gpu is not None else None

    def action_interrupt(self) -> None:
        """Ctrl+C quits, whatever has the focus (it is never typed into the filter box)."""
        self.exit()

    def action_toggle_gpu(self) -> None:
        self.dashboard.query_one(GpuPanel).toggle_class("-hidden")

    def action_toggle_events(self) -> None:
        """``l``: the events panel (the choice is saved like the other panels')."""
        self.toggle_panel("events")

    def action_toggle_raw(self) -> None:
        pane = self.dashboard.query_one(EventsPane)
        if pane.has_class("-visible"):
            pane.raw = not pane.raw
            self._refresh_all()

    def action_history(self) -> None:
        """Open the history screen (plots) of the server on screen."""
        from kvtop.ui.screens.history import HistoryScreen

        self.push_screen(HistoryScreen(self.histories[self.current_host]))

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

    def watch_sort_reverse(self) -> None:
        self._refresh_all()

    def action_cycle_theme(self) -> None:
        names = list(self._kvtop_themes) or [DEFAULT_THEME]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=1.5, markup=False)

    def watch_theme(self, theme: str) -> None:
        """Remember a theme picked with ``t`` or the command palette for the next start."""
        if getattr(self, "_theme_loaded", False):
            problem = save_theme(theme)
            if problem:
                self.notify(problem, severity="warning", markup=False)
        self._refresh_all()  # the table's cells carry the theme's colours

    def action_cycle_sort(self) -> None:
        i = SORT_KEYS.index(self.sort_key)
        self.sort_key = SORT_KEYS[(i + 1) % len(SORT_KEYS)]

    def action_filter(self) -> None:
        box = self.dashboard.query_one("#filter", Input)
        box.add_class("-visible")
        box.value = self.filter_text
        # focus now, not after a refresh: keys typed in the same burst as "/" (a paste, a fast
        # typist, SSH bundling keystrokes) must land in the box, not act on the dashboard
        self.dashboard.set_focus(box)

    def action_clear_filter(self) -> None:
        box = self.dashboard.query_one("#filter", Input)
        self.filter_text = ""
        box.value = ""
        box.remove_class("-visible")
        self.dashboard.query_one(ModelsTable).focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value
        event.input.remove_class("-visible")
        self.dashboard.query_one(ModelsTable).focus()

    @on(ModelsTable.RowSelected)
    def _open_detail(self, event: ModelsTable.RowSelected) -> None:
        view = self.dashboard.query_one(ModelsTable).selected_view
        if view is not None:
            from kvtop.ui.screens.model_detail import ModelDetailScreen

            self.push_screen(ModelDetailScreen(view.name, view.digest))


def alert_bar(state: AppState, colors: dict[str, str], width: int = 200) -> Text:
    """The most severe alert in one line (its first fix that fits in a second), and how many more;
    each line cut to ``width`` cells."""
    text = Text()
    if not state.alerts:
        return text
    top = state.alerts[0]
    style = {"critical": "kv-crit", "warning": "kv-warn"}.get(top.severity, "kv-muted")
    text.append(f"{'✖' if top.severity == 'critical' else '▲' if top.severity == 'warning' else 'ℹ'} ",
                style=f"bold {colors.get(style, '')}")
    text.append(f"{top.kind.replace('_', ' ')}", style=f"bold {colors.get(style, '')}")
    if top.model:
        text.append(f" {safe(top.model, 40)}", style="bold")
    text.append(f": {safe(top.message, 200)}")
    text.truncate(max(10, width), overflow="ellipsis")
    fix = next((f for f in top.fixes if f.fits), None)
    more = len(state.alerts) - 1
    if fix is not None or more:
        second = Text()
        if more:
            second.append(f"+{more} more{' · ' if fix is not None else ' (l: all alerts)'}", style=colors.get("kv-muted", ""))
        if fix is not None:
            second.append(f"fix: {safe(fix.action, 60)} — {safe(fix.detail, 100)}", style=colors.get("kv-ok", ""))
        second.truncate(max(10, width), overflow="ellipsis")
        text = Text("\n").join([text, second])
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class ServerOverview:
    """One server's compact row in the switcher: what an operator scans across boxes."""

    host: str
    selected: bool
    status: str
    """``up``, ``down``, ``error`` or ``connecting``."""
    models: int
    spilled: int
    critical: int
    warnings: int


def _overview_key(state: AppState) -> tuple[object, ...]:
    snap = state.ollama
    return (None if snap is None else (snap.reachable, snap.error_kind), len(state.models),
            sum(1 for m in state.models if m.spilled), tuple((a.kind, a.severity) for a in state.alerts))


def server_overview(state: AppState, selected: bool) -> ServerOverview:
    """The overview row of one server's state."""
    snap = state.ollama
    if snap is None:
        status = "connecting"
    elif snap.reachable:
        status = "up"
    else:
        status = "error" if snap.error_kind in ("http", "invalid_json", "invalid_shape", "other") else "down"
    return ServerOverview(
        host=state.host_url, selected=selected, status=status, models=len(state.models),
        spilled=sum(1 for m in state.models if m.spilled),
        critical=sum(1 for a in state.alerts if a.severity == "critical"),
        warnings=sum(1 for a in state.alerts if a.severity == "warning"),
    )


def servers_bar(rows: Sequence[ServerOverview], colors: Mapping[str, str], width: int = 200) -> Text:
    """The server switcher: one compact entry per server (number, host, state, models, alerts),
    the one on screen in reverse video. When the full entries do not fit in ``width`` cells a
    terse form is used (``3m`` models, ``⇣1`` spilled, hosts shortened to what tells them apart)."""
    from urllib.parse import urlsplit

    from kvtop.config.host import display_host

    def build(verbose: bool) -> Text:
        names = [display_host(r.host) for r in rows]
        if not verbose:
            parts = [urlsplit(r.host) for r in rows]
            if len({p.hostname for p in parts}) == 1 and len({p.port for p in parts}) == len(parts):
                names = [f":{p.port}" for p in parts]  # one machine, several ports
            elif len({p.hostname for p in parts}) == len(parts):
                names = [p.hostname or n for p, n in zip(parts, names)]
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (row, name) in enumerate(zip(rows, names), 1):
            if i > 1:
                text.append(" │ ", style=colors.get("kv-muted", ""))
            entry = Text()
            entry.append(f"{i} " if i <= 9 else "  ", style="bold")
            entry.append(safe(name, 40 if verbose else 20))
            mark = {"up": ("●", "kv-ok"), "connecting": ("…", "kv-muted")}.get(row.status, ("✖", "kv-crit"))
            entry.append(f" {mark[0]}", style=colors.get(mark[1], ""))
            if row.status == "up":
                entry.append(f" {row.models} model{'s' if row.models != 1 else ''}" if verbose else f"{row.models}m")
                if row.spilled:
                    entry.append(f" {row.spilled} spilled" if verbose else f" ⇣{row.spilled}", style=colors.get("kv-crit", ""))
            elif row.status != "connecting":
                entry.append(f" {row.status}", style=colors.get("kv-crit", ""))
            if row.critical:
                entry.append(f" ✖{row.critical}", style=f"bold {colors.get('kv-crit', '')}")
            if row.warnings:
                entry.append(f" ▲{row.warnings}", style=f"bold {colors.get('kv-warn', '')}")
            if row.selected:
                entry.stylize("reverse")
            text.append_text(entry)
        return text

    text = build(True)
    if text.cell_len > width:
        text = build(False)
    text.truncate(max(10, width), overflow="ellipsis")
    return text


def log_line(log: LogState, spec: str) -> Text:
    """The one-line log status under the table."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if spec == "none" and log.source is None:
        text.append("Server log: off (--log none): no figure is allocated; each says its source")
        return text
    text.append(f"Server log: {safe(log.source or spec, 60)}")
    if log.status:
        text.append(f" — {safe(log.status, 160)}")
    else:
        text.append(f" · {log.lines:,} line{'s' if log.lines != 1 else ''} · {len(log.loads)} load{'s' if len(log.loads) != 1 else ''}"
                    " · l: events")
    if log.dropped_lines:  # history skipped at start, and noise shed under overload
        text.append(f" · {log.dropped_lines:,} dropped")
    return text


def make_app(settings: Settings, source: OllamaSource | None = None, *, poll: bool = True,
             log_source: LogSource | None = None, gpu_source: GpuSourceLike | None = None,
             proc_source: ProcSourceLike | None = None,
             more_sources: Mapping[str, OllamaSource] | None = None,
             replay: Recording | None = None, slots_source: SlotsSourceLike | None = None) -> KvtopApp:
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
    servers = None if source is None and more_sources is None else {
        **({settings.host_url: source} if source is not None else {}), **(more_sources or {})}
    built = build_sources(settings, servers=servers, log=log_source, gpu=gpu_source, procs=proc_source,
                          slots=slots_source, machine=source is None)
    if source is None and settings.host_url not in built.servers:
        from kvtop.engine import ollama_client

        built.servers = {settings.host_url: ollama_client(settings, settings.host_url), **built.servers}
    first = built.servers.get(settings.host_url)
    more = {h: src for h, src in built.servers.items() if h != settings.host_url}
    return KvtopApp(settings, first, poll=poll, log_source=built.log, gpu_source=built.gpu,
                    proc_source=built.procs, more_sources=more, slots_source=built.slots)
