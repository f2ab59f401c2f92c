"""Which of the dashboard's optional panels show, and feeding them (``PanelLayout``: a part of the
dashboard screen, ``DashboardScreen.panels``).

The panels, in priority order (``config.PANELS``): the memory map, the alerts with every fix, the
VRAM and tok/s history, the recent events. Each is ``auto`` (shown once the terminal reaches its
size in :data:`PANEL_MIN_SIZE`), or ``on``/``off`` as the user chose with its key (``m``, ``f``,
``v``, ``l``); choices are saved in kvtop's state file (``config.save_panels``) and restored at
start. Which panels show is set with CSS classes; Textual's layout (``kvtop.tcss``) places them.

Observer cost (watching must cost little, linear in models): a hidden panel is given nothing; the map is recomputed only when its
inputs (the GPU and process samples, the models, the log's loads) are new objects, and redrawn
only when the map differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kvtop.config.ui_state import PANELS, save_panels, saved_panels
from kvtop.model.gpu import GpuPanelData
from kvtop.model.memmap import MemoryMap, loading_runners, memory_map
from kvtop.ui.alert_age import state_clock
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.memory_map import MemoryMapPanel
from kvtop.ui.widgets.models_table import ModelsTable
from kvtop.ui.widgets.panels import AlertsPanel, HistoryPanel

if TYPE_CHECKING:
    from textual.screen import Screen

    from kvtop.model.views import AppState
    from kvtop.ui.host import PanelHost

PANEL_MIN_SIZE: dict[str, tuple[int, int]] = {
    "map": (120, 36),
    "alerts": (120, 40),
    "history": (160, 48),
    "events": (200, 55),
}
"""Terminal size (columns, rows) from which an ``auto`` panel shows."""

EVENTS_FILL_ROWS = 5
"""Without the history plots, an ``auto`` events pane takes the rows the table leaves free when
there are at least this many (its border, its heading and 3 lines; the table keeps every model's
row). At 80×24 the alerts with their fixes come first in it, then the events (issue 26: 11 rows
were left empty while the banner cut the spill alert). The count does not depend on the alerts
(the alerts banner is counted at its 2 rows, the alerts panel not at all): the pane does not come
and go as alerts come and go."""

WIDE_PANELS_FROM = 160
"""From this width the alerts panel takes 2/5 of the panel row beside the history plots (1/3 below)."""

BANNER_ROWS = 2
"""The alerts banner's rows at most (``#alertbar``: hidden when there is no alert)."""

EVENTS_MIN_ROWS = 4
"""Rows the events pane keeps when the alerts panel above it takes the rest (it scrolls)."""

REMEASURES = 5
"""Repaints after a layout that could not be measured yet (none while the screen is too small)."""

COMPACT_MAP_BELOW = (120, 36)
"""Below this size a map switched on with ``m`` is one line per device."""


def panels_shown(width: int, height: int, choices: Mapping[str, str], spare_rows: int | None = None) -> dict[str, bool]:
    """Which panels show at ``width`` × ``height`` with the user's ``choices`` (``auto``/``on``/``off``).

    ``spare_rows``: rows the table (every model's row) leaves free below it, None when not
    measured. Without the history plots an ``auto`` events pane also shows when at least
    :data:`EVENTS_FILL_ROWS` are spare (it fills them, under the alerts panel when that shows)."""
    out: dict[str, bool] = {}
    for name in PANELS:
        choice = choices.get(name, "auto")
        w, h = PANEL_MIN_SIZE[name]
        out[name] = choice == "on" or (choice == "auto" and width >= w and height >= h)
    if (
        choices.get("events", "auto") == "auto"
        and not out["events"]
        and not out["history"]
        and spare_rows is not None
        and spare_rows >= EVENTS_FILL_ROWS
    ):
        out["events"] = True
    return out


def _untimed(sample: object) -> object:
    """A GPU or process sample without its time (``taken_at``), for comparing what it measured."""
    if sample is None or not dataclasses.is_dataclass(sample):
        return sample
    return dataclasses.replace(sample, taken_at=0.0)  # type: ignore[type-var]


class PanelLayout:
    """The panels' part of the dashboard screen: choices, visibility and their data.

    ``app``: the app as the layout reads it (its size, theme, settings, histories); ``screen``: the
    dashboard whose widgets it lays out; ``repaint``: the screen's one repaint, asked for after a
    toggle and when a layout could not be measured yet."""

    def __init__(self, app: PanelHost, screen: Screen[None], repaint: Callable[[], None]) -> None:
        self.app = app
        self.screen = screen
        self.repaint = repaint
        self.panel_choices: dict[str, str] = saved_panels()
        """``auto``/``on``/``off`` per panel (saved with each toggle)."""
        self._spare_rows: int | None = None
        """:meth:`measure_spare_rows` at the last repaint."""
        self._remeasures = 0
        self._map_inputs: tuple[object, ...] | None = None
        self._map_cache: MemoryMap | None = None
        self.map_computations = 0
        """Times the memory map was computed (the observer-cost tests count them)."""
        self._alerts_rows_key: tuple[object, ...] | None = None
        self._alerts_rows = 0
        self.alerts_measures = 0
        """Times the alerts panel's lines were counted (wrapped): once per change of the alerts,
        the colours or the width, not per repaint (the observer-cost tests count them)."""

    def shown_panels(self) -> dict[str, bool]:
        """Which panels show now."""
        app = self.app
        return panels_shown(app.size.width, app.size.height, self.panel_choices, self._spare_rows)

    def measure_spare_rows(self) -> int | None:
        """Rows left below the table's rows, from the last layout: the table, the panel row and the
        events pane share what the header, map, GPU strip and status lines leave, whichever of them
        fills it. The alerts banner counts as :data:`BANNER_ROWS` shown or not, and the alerts
        panel not at all (the result does not change with the alerts). None before the first
        layout."""
        main = self.screen
        table = main.query_one(ModelsTable)
        if not table.size.height:
            return None
        shared = sum(
            w.outer_size.height for w in (table, main.query_one("#panel-row"), main.query_one(EventsPane)) if w.display
        )
        mmap = main.query_one(MemoryMapPanel)
        if mmap.has_class("-shown"):  # its lines now, if it was laid out at another height (or hidden)
            shared += mmap.outer_size.height if mmap.display else 0
            shared -= mmap.line_count()
        banner = main.query_one("#alertbar")
        shared += (banner.outer_size.height if banner.display else 0) - BANNER_ROWS
        return shared - table.virtual_size.height

    def settled(self) -> bool:
        """Whether the layout on screen is final: measured (not waiting for a re-measure after a
        repaint) and every panel shown or hidden as :meth:`shown_panels` says. Tests wait for it."""
        shown = self.shown_panels()
        spare = self.measure_spare_rows()
        if spare is None or spare != self._spare_rows:
            return False
        main = self.screen
        return all(
            w.has_class(cls) == shown[name]
            for name, w, cls in (
                ("map", main.query_one(MemoryMapPanel), "-shown"),
                ("alerts", main.query_one(AlertsPanel), "-shown"),
                ("history", main.query_one(HistoryPanel), "-shown"),
                ("events", main.query_one(EventsPane), "-visible"),
            )
        )

    def apply_panel_layout(self) -> dict[str, bool]:
        """Set the classes that show or hide the panels; returns :meth:`shown_panels`."""
        main = self.screen
        shown = self.shown_panels()
        main.query_one(MemoryMapPanel).set_class(shown["map"], "-shown")
        main.query_one(AlertsPanel).set_class(shown["alerts"], "-shown")
        main.query_one(HistoryPanel).set_class(shown["history"], "-shown")
        main.query_one(EventsPane).set_class(shown["events"], "-visible")
        for name, add in self.screen_classes(shown).items():
            main.set_class(add, name)
        return shown

    def screen_classes(self, shown: Mapping[str, bool]) -> dict[str, bool]:
        """The dashboard screen's layout classes for the panels ``shown`` (class name → set)."""
        return {
            "-panel-row": shown["alerts"] or shown["history"],
            "-events-fill": shown["events"] and not shown["history"],
            # under the map's size, panels switched on by hand share the rows left instead of the
            # events pane's 12 pushing the screen into a scrollbar (80x24 with every panel on)
            "-short": self.app.size.height < PANEL_MIN_SIZE["map"][1],
            # the alerts get 2/5 of the panel row instead of 1/3 (kvtop.tcss)
            "-wide-panels": self.app.size.width >= WIDE_PANELS_FROM,
        }

    def toggle_panel(self, name: str) -> None:
        """Show a panel that is hidden or hide one that shows, and save the choice."""
        app = self.app
        now = self.shown_panels()[name]
        self.panel_choices[name] = "off" if now else "on"
        problem = save_panels(self.panel_choices)
        said = f"{name} {'off' if now else 'on'}"
        if problem:  # one notice either way: what was chosen, and whether it was saved
            app.notify(f"{said} (not saved: {problem})", severity="warning", markup=False)
        else:
            app.notify(f"saved: {said}", timeout=1.5, markup=False)
        self.repaint()

    def current_memory_map(self, state: AppState, gpu_panel: GpuPanelData | None, local: bool) -> MemoryMap:
        """The map of ``state`` (recomputed only when the GPU, process or model samples are new).

        ``local``: the GPU sample is this server's (the GPU of another machine is not known)."""
        # a new sample equal to the last but for its time draws the same map (issue 23: at 1,000
        # models the map was joined again every second for the same bytes)
        loading = loading_runners(state.procs, state.models, state.log, state.blob_names) if local else None
        inputs = (
            _untimed(state.gpu) if local else None,
            _untimed(state.procs) if local else None,
            state.models,
            local,
            loading,
        )
        if (
            self._map_cache is not None
            and self._map_inputs is not None
            and all(a is b or a == b for a, b in zip(inputs, self._map_inputs))
        ):
            return self._map_cache
        self.map_computations += 1
        if local:
            views = gpu_panel.views if gpu_panel is not None and gpu_panel.ok else None
            mm = memory_map(state.gpu, state.procs, state.models, views=views, loading=loading)
        else:
            mm = dataclasses.replace(
                memory_map(None, None, state.models),
                status="GPU telemetry: none for this server (its GPUs are on another machine)",
            )
        self._map_inputs, self._map_cache = inputs, mm
        return mm

    def alerts_rows(self, state: AppState, colors: dict[str, str], width: int) -> int:
        """The alerts panel's lines at ``width`` cells, with its title: counted again only when the
        alerts (a new tuple: the apply step keeps the same one while they do not change), the
        colours or the width changed."""
        key = (state.alerts, tuple(sorted(colors.items())), width)
        if key != self._alerts_rows_key:
            self.alerts_measures += 1
            memo = self.screen.query_one(AlertsPanel).memo  # each alert measured once per width
            self._alerts_rows = 1 + memo.line_count(state.alerts, width, self.app.console)
            self._alerts_rows_key = key
        return self._alerts_rows

    def refresh_panels(self, state: AppState, gpu_panel: GpuPanelData | None, local: bool) -> dict[str, bool]:
        """Lay the panels out and give the shown ones their data (called by the one repaint)."""
        app = self.app
        main = self.screen
        colors = dict(app.theme_variables)
        spare = self.measure_spare_rows()
        if spare != self._spare_rows or (spare is None and self._remeasures < REMEASURES):
            # measured on the layout before this repaint (or none yet): measure again once this one
            # is laid out, so a quiet server (no new sample to repaint for) gets its rows too
            self._remeasures = self._remeasures + 1 if spare is None else 0
            app.call_after_refresh(self.repaint)
        self._spare_rows = spare
        shown = self.apply_panel_layout()
        alerts_panel = main.query_one(AlertsPanel)
        if shown["alerts"] and shown["events"] and not shown["history"] and spare is not None:
            # the alerts take the rows they need, the events pane keeps at least EVENTS_MIN_ROWS
            banner = main.query_one("#alertbar")
            free = spare + BANNER_ROWS - (banner.outer_size.height if banner.display else 0)
            cap = max(3, free - EVENTS_MIN_ROWS)
            if alerts_panel.styles.max_height is None or alerts_panel.styles.max_height.value != cap:
                alerts_panel.styles.max_height = cap
        elif alerts_panel.styles.max_height is not None:
            alerts_panel.styles.max_height = None
        if shown["map"]:
            w, h = COMPACT_MAP_BELOW
            compact = app.size.width < w or app.size.height < h
            main.query_one(MemoryMapPanel).show(self.current_memory_map(state, gpu_panel, local), compact=compact)
        if shown["alerts"]:
            main.query_one(AlertsPanel).show(state.alerts, colors, now=state_clock(state))  # ages on the state's clock
        if shown["history"]:
            from kvtop.ui.screens.history import _log_note

            note = _log_note(state.log.source, demo=app.settings.demo, replay=app.replay is not None)
            distinct = bool(getattr(app, "no_color", False)) or app.theme == "kvtop-mono"
            main.query_one(HistoryPanel).show(app.histories[app.current_host], app.interval_s, note, distinct)
        return shown
