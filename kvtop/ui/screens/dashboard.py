"""The dashboard screen: header, models table, the optional panels (memory map, alerts, history,
events: its ``PanelLayout`` decides which show), GPU strip, status line, filter box.

It draws itself from the app's state: it watches ``app.state`` (a new state, one repaint; the
engine makes at most about one per interval) and the view settings the keys change (sort,
filter, pause, interval, theme), as the pushed screens and Textual's own Header do. The app
keeps the keys, the other screens and the engine subscription; this screen never imports it
(``kvtop.ui.host.DashboardHost``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Static

from kvtop.model.gpu import GpuPanelData, gpu_panel_data
from kvtop.model.view_order import filter_views, sort_views
from kvtop.ui.actions import live_views
from kvtop.ui.alert_age import state_clock
from kvtop.ui.ascii_mode import ascii_on
from kvtop.ui.dashboard_text import ServerOverview, alert_bar, log_line, servers_bar
from kvtop.ui.format import legend, safe
from kvtop.ui.layout import PanelLayout
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.footer import KvFooter
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.memory_map import MemoryMapPanel
from kvtop.ui.widgets.models_table import SPARK_CELLS, SPARK_MIN_COLUMNS, ModelsTable, sort_arrow
from kvtop.ui.widgets.panels import AlertsPanel, HistoryPanel

if TYPE_CHECKING:
    from kvtop.model.views import AppState, ModelView
    from kvtop.ui.host import DashboardHost

MIN_WIDTH, MIN_HEIGHT = 70, 12
"""The smallest terminal (columns, rows) the dashboard draws in; below it says so."""

REPAINT_ON = ("sort_key", "sort_reverse", "filter_text", "paused", "interval_s", "theme")
"""The app's view settings whose change repaints the dashboard (besides ``state``)."""


class DashboardScreen(Screen[None]):
    """The main screen. It repaints on a new ``app.state`` (once per state), on a change of the
    view settings in :data:`REPAINT_ON`, on a resize and when it comes back into view, so the
    table's columns and the "terminal too small" message follow the terminal even while polling
    is paused (the App itself never sees Resize events: Textual stops them)."""

    def __init__(self) -> None:
        super().__init__()
        self.panels = PanelLayout(self._app(), self, self.repaint)
        """Which optional panels show, and their data (``kvtop.ui.layout``)."""
        self._ready = False
        self._static_cache: dict[str, Text] = {}
        self._sparks: tuple[object, dict[tuple[str, str], str]] | None = None
        self._panel: tuple[tuple[object, ...], GpuPanelData] | None = None
        self.gpu_panel_joins = 0
        """Times the GPU panel's data was joined (``gpu_panel_data``): per new sample, not per repaint."""
        self.sparkline_builds = 0
        """Times the table's VRAM sparklines were built: once per history sample, not per repaint
        (a key between polls reuses them; observer-cost tests count them)."""

    def compose(self) -> ComposeResult:
        # the panels' classes for the terminal's size from the start: set later by the first
        # repaint, each would style the whole screen again (~20 ms before the first frame)
        shown = self.panels.shown_panels()
        for name, add in self.panels.screen_classes(shown).items():
            self.set_class(add, name)
        size = self._app().size
        self.set_class(size.width < MIN_WIDTH or size.height < MIN_HEIGHT, "-too-small")
        yield ServerHeader(id="header")
        yield Static(id="servers", classes="-visible" if len(self._app().hosts) > 1 else "")
        yield Static(id="alertbar")
        yield ModelsTable(id="models")
        yield MemoryMapPanel(id="memmap", classes="-shown" if shown["map"] else "")
        with Horizontal(id="panel-row"):
            yield AlertsPanel(id="alerts-panel", classes="-shown" if shown["alerts"] else "")
            yield HistoryPanel(id="history-panel", classes="-shown" if shown["history"] else "")
        yield EventsPane(id="events", classes="-visible" if shown["events"] else "")
        yield GpuPanel(id="gpu")
        yield Static(id="logline")
        yield Static(id="status")
        # no select-all on focus: the Focus event comes after keys typed ahead with "/", and a
        # selection would let the next key replace them
        yield Input(placeholder="filter models (Enter keeps, Esc clears)", id="filter", select_on_focus=False)
        yield Static(id="too-small")
        yield KvFooter()  # its least important keys leave when the row is too narrow

    def _app(self) -> DashboardHost:
        """The app as this screen reads it (``kvtop.ui.host.DashboardHost``: no import of the app)."""
        return cast("DashboardHost", self.app)

    def on_mount(self) -> None:
        app = self._app()
        header = self.query_one(ServerHeader)
        header.demo = app.settings.demo
        header.recording = app.recording
        self.watch(self.app, "state", self._state_changed, init=False)
        for name in REPAINT_ON:
            self.watch(self.app, name, self.repaint, init=False)
        self.watch(self.app, "overview", self._show_servers, init=False)
        self.watch(self.app, "recording", self._recording_changed, init=False)
        self.watch(self.app, "replay_header", self._replay_header_changed, init=False)
        self.watch(self.app, "replay_status", self.repaint, init=False)
        self._ready = True
        self._show_servers()
        self.repaint()

    # -- what the app's attributes change --------------------------------------------------------

    def _state_changed(self) -> None:
        if not self._app().replay_quiet:  # a replay jump repaints once, at its end
            self.repaint()

    def _show_servers(self) -> None:
        """The server switcher's row (``app.overview``: one entry per server), shown with two or more."""
        app = self._app()
        if not self._ready or not app.is_running or len(app.hosts) < 2:
            return
        rows = cast("tuple[ServerOverview, ...]", app.overview)
        self._update_static("#servers", servers_bar(rows, dict(app.theme_variables), app.size.width - 2))

    def _recording_changed(self, recording: bool) -> None:
        if self._ready and self._app().is_running:  # a recording may fail while kvtop shuts down
            self.query_one(ServerHeader).recording = recording

    def _replay_header_changed(self, text: str | None) -> None:
        if self._ready and self._app().is_running:
            self.query_one(ServerHeader).replay = text

    # -- the filter box ---------------------------------------------------------------------------

    def open_filter(self) -> None:
        """``/``: show the filter box with the filter in it, and give it the focus."""
        box = self.query_one("#filter", Input)
        box.add_class("-visible")
        box.value = self._app().filter_text
        # focus now, not after a refresh: keys typed in the same burst as "/" (a paste, a fast
        # typist, SSH bundling keystrokes) must land in the box, not act on the dashboard
        self.set_focus(box)

    def clear_filter(self) -> None:
        """Esc: no filter, the box hidden, the focus back on the table."""
        box = self.query_one("#filter", Input)
        self._app().filter_text = ""
        box.value = ""
        box.remove_class("-visible")
        self.query_one(ModelsTable).focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._app().filter_text = event.value

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._app().filter_text = event.value
        event.input.remove_class("-visible")
        self.query_one(ModelsTable).focus()

    def on_key(self, event: events.Key) -> None:
        """Type-ahead for the filter. Keys typed in one burst with ``/`` (a fast typist, a paste,
        SSH sending keystrokes together) were all routed to the table before ``/`` moved the
        focus; they come back through here, in order. ``/`` opens the box at once (not when the
        app gets to its binding); while the box has the focus the printable keys go into it, and
        Backspace, Enter and Esc act on it here, so a burst is applied in the order typed."""
        box = self.query_one("#filter", Input)
        if self.focused is box:  # set at once by set_focus (has_focus follows only with the Focus event)
            if event.is_printable and event.character:  # routed elsewhere before the focus moved
                box.insert_text_at_cursor(event.character)
            elif event.key == "backspace":
                box.action_delete_left()
            elif event.key == "enter":
                self._filter_submitted(Input.Submitted(box, box.value))
                self.set_focus(self.query_one(ModelsTable))  # now: Widget.focus() waits a turn
            elif event.key == "escape":
                self.clear_filter()
                self.set_focus(self.query_one(ModelsTable))
            else:
                return
            event.stop()
            event.prevent_default()
        elif event.key == "slash" and self._app().check_action("filter", ()):
            event.stop()
            event.prevent_default()
            self.open_filter()

    # -- what the keys ask of the dashboard ------------------------------------------------------

    @property
    def selected_view(self) -> ModelView | None:
        """The table's selected model, or None (no model, or none selected)."""
        return self.query_one(ModelsTable).selected_view

    def toggle_gpu(self) -> None:
        """``g``: hide or show the GPU strip."""
        self.query_one(GpuPanel).toggle_class("-hidden")

    def toggle_raw(self) -> None:
        """``r``: the events pane shows raw log lines instead of events (or back), when it shows."""
        pane = self.query_one(EventsPane)
        if pane.has_class("-visible"):
            pane.raw = not pane.raw
            self.repaint()

    def on_memory_map_panel_model_picked(self, message: MemoryMapPanel.ModelPicked) -> None:
        """A model's stretch of the map was clicked or hovered: select it in the table."""
        self.query_one(ModelsTable).select_model(*message.model)

    def on_resize(self, event: events.Resize) -> None:
        self.repaint()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        self.repaint()

    # -- the one repaint --------------------------------------------------------------------------

    def _update_static(self, selector: str, content: Text) -> None:
        """Update a Static only when its text changed (an update forces a layout pass)."""
        if self._static_cache.get(selector) != content:
            self._static_cache[selector] = content
            self.query_one(selector, Static).update(content)

    def repaint(self) -> None:
        """Draw every widget from ``app.state``, the terminal's size and the view settings (each
        widget redraws only what changed)."""
        app = self._app()
        if not self._ready or app.state is None or not app.is_running:
            return  # not up yet, or shutting down: a late sample must not query removed widgets
        state = app.state
        width, height = app.size.width, app.size.height
        too_small = width < MIN_WIDTH or height < MIN_HEIGHT
        self.set_class(too_small, "-too-small")
        if too_small:
            self._update_static(
                "#too-small",
                Text(
                    f"Terminal too small: {width}×{height}.\n"
                    f"kvtop needs at least {MIN_WIDTH}×{MIN_HEIGHT}. Resize, or press q to quit.",
                    justify="center",
                ),
            )
        replay = app.replay
        header = self.query_one(ServerHeader)
        header.interval_s = app.interval_s
        header.paused = app.paused
        header.replay = replay.header_text() if replay is not None else None
        header.tls = app.settings.access_for(state.host_url).tls_flag
        header.state = state
        views = filter_views(sort_views(state.models, app.sort_key), app.filter_text)
        if app.sort_reverse:
            views = tuple(reversed(views))
        if replay is None:
            views, ticking = live_views(views, time.time(), app.operator.unloading_keys(app.current_host))
            app.operator.schedule_until_tick(ticking)
        table = self.query_one(ModelsTable)
        table.set_class(state.stale_s is not None, "-stale")
        sparks = self._sparklines() if width >= SPARK_MIN_COLUMNS else None  # the column shows from there
        table.show(views, width, sparks, sort=(app.sort_key, app.sort_reverse))
        self._update_static("#status", self._status_line(state, len(views)))
        local = state.host_url == app.local_host
        if local or app.log_source is None:
            self._update_static("#logline", log_line(state.log, app.settings.log_spec))
        else:
            self._update_static(
                "#logline",
                Text(
                    f"Server log: none for this server (the log read is server {app.hosts.index(app.local_host) + 1}'s):"
                    " figures are reported or estimated",
                    no_wrap=True,
                    overflow="ellipsis",
                ),
            )
        if local:
            panel = self._gpu_panel(state)
        else:  # the GPU sample is this machine's: it belongs to the local server only
            panel = GpuPanelData(
                status=f"GPU telemetry: none for this server (this machine's GPUs show with server"
                f" {app.hosts.index(app.local_host) + 1})"
            )
        shown = self.panels.refresh_panels(state, panel, local)
        self.query_one("#alertbar").set_class(not state.alerts, "-none")
        # the alerts panel, or the events pane without it, lists every alert: the banner points there
        listed = shown["alerts"] or (shown["events"] and self.query_one(EventsPane).has_class("-visible"))
        self._update_static("#alertbar", alert_bar(state, dict(app.theme_variables), width - 2, listed_below=listed))
        # with the map on screen the GPU strip keeps what the map lacks, one line per GPU
        self.query_one(GpuPanel).show_data(panel, width, compact=True if shown["map"] else None)
        events_pane = self.query_one(EventsPane)
        if events_pane.has_class("-visible"):
            # the alerts panel, when shown, has the alerts and their fixes: the events pane keeps to events
            # the past alerts (a model no longer loaded) are only here, with their age
            events_pane.show(
                state.log,
                app.filter_text,
                () if shown["alerts"] else state.alerts,
                app.operator.log,
                past=state.past_alerts,
                now=state_clock(state),
                changes=state.changes,
            )

    @staticmethod
    def _sort_mark(app: DashboardHost) -> str:
        """A reversed sort's mark on the status line: the column header's own arrow
        (``sort: name ▼`` under ``NAME ▼``); the usual direction needs none (``sort: size``)."""
        if not app.sort_reverse:
            return ""
        arrow = sort_arrow(app.sort_key, True, ascii_mode=ascii_on(app.settings))
        return f" {arrow}" if arrow else " (reversed)"

    def _status_line(self, state: AppState, shown_models: int) -> Text:
        """The line under the table: filter, sort and the legend; or why there is nothing to show."""
        app = self._app()
        width = app.size.width
        if app.replay is not None and app.replay.status_text():
            return Text(f"{app.replay.status_text()}", no_wrap=True, overflow="ellipsis")
        if state.ollama is not None and not state.ollama.reachable and app.replay is None:
            from kvtop.model.hints import unreachable_hint_line  # the way forward, as --once/--check say it

            return Text(
                unreachable_hint_line(
                    width - 2, demo=app.settings.demo, error_kind=state.ollama.error_kind, error=state.ollama.error
                ),
                no_wrap=True,
                overflow="ellipsis",
                style=dict(app.theme_variables).get("kv-warn", ""),
            )
        if state.ollama is not None and state.ollama.reachable and not state.models:
            return Text("No model loaded: models appear here when a client loads one.")
        status = Text(no_wrap=True, overflow="ellipsis")
        if app.filter_text:
            status.append(f"filter: {safe(app.filter_text, 20)} ({shown_models} of {len(state.models)})  ")
        status.append(
            f"sort: {app.sort_key}{self._sort_mark(app)}  "
            f"{legend(state.models, short=width < 100)}  Enter details  ? help"
        )
        return status

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
        app = self._app()
        history = app.histories[app.current_host]
        key = (app.current_host, id(history), history.version, history.latest_s)
        if self._sparks is None or self._sparks[0] != key:
            self.sparkline_builds += 1
            self._sparks = (key, history.sparklines(cells=SPARK_CELLS))
        return self._sparks[1]
