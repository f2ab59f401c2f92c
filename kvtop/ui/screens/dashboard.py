"""The dashboard screen: header, models table, the optional panels (memory map, alerts, history,
events: ``kvtop.ui.layout`` decides which show), GPU strip, status line, filter box."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Static

from kvtop.ui.host import DashboardHost
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.footer import KvFooter
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.memory_map import MemoryMapPanel
from kvtop.ui.widgets.models_table import ModelsTable
from kvtop.ui.widgets.panels import AlertsPanel, HistoryPanel


class DashboardScreen(Screen[None]):
    """The main screen. It tells the app when its size changes or it comes back into view, so
    the table's columns and the "terminal too small" message follow the terminal even while
    polling is paused (the App itself never sees Resize events: Textual stops them)."""

    def compose(self) -> ComposeResult:
        yield ServerHeader(id="header")
        yield Static(id="servers")
        yield Static(id="alertbar")
        yield ModelsTable(id="models")
        yield MemoryMapPanel(id="memmap")
        with Horizontal(id="panel-row"):
            yield AlertsPanel(id="alerts-panel")
            yield HistoryPanel(id="history-panel")
        yield EventsPane(id="events")
        yield GpuPanel(id="gpu")
        yield Static(id="logline")
        yield Static(id="status")
        # no select-all on focus: the Focus event comes after keys typed ahead with "/", and a
        # selection would let the next key replace them
        yield Input(placeholder="filter models (Enter keeps, Esc clears)", id="filter", select_on_focus=False)
        yield Static(id="too-small")
        yield KvFooter()  # its least important keys leave when the row is too narrow

    def _app(self) -> DashboardHost:
        """The app as this screen uses it (``kvtop.ui.host.DashboardHost``: no import of the app)."""
        assert isinstance(self.app, DashboardHost)
        return self.app

    def on_mount(self) -> None:
        self._app().dashboard_mounted()

    def on_key(self, event: events.Key) -> None:
        """Type-ahead for the filter. Keys typed in one burst with ``/`` (a fast typist, a paste,
        SSH sending keystrokes together) were all routed to the table before ``/`` moved the
        focus; they come back through here, in order. ``/`` opens the box at once (not when the
        app gets to its binding); while the box has the focus the printable keys go into it, and
        Backspace, Enter and Esc act on it here, so a burst is applied in the order typed."""
        box = self.query_one("#filter", Input)
        app = self._app()
        if self.focused is box:  # set at once by set_focus (has_focus follows only with the Focus event)
            if event.is_printable and event.character:  # routed elsewhere before the focus moved
                box.insert_text_at_cursor(event.character)
            elif event.key == "backspace":
                box.action_delete_left()
            elif event.key == "enter":
                app._filter_submitted(Input.Submitted(box, box.value))
                self.set_focus(self.query_one(ModelsTable))  # now: Widget.focus() waits a turn
            elif event.key == "escape":
                app.action_clear_filter()
                self.set_focus(self.query_one(ModelsTable))
            else:
                return
            event.stop()
            event.prevent_default()
        elif event.key == "slash" and app.check_action("filter", ()):
            event.stop()
            event.prevent_default()
            app.action_filter()

    def on_resize(self, event: events.Resize) -> None:
        self._app().refresh_dashboard()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        self._app().refresh_dashboard()
