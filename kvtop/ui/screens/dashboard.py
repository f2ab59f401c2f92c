"""The dashboard screen: header, models table, GPU strip, status line, filter box."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.models_table import ModelsTable

if TYPE_CHECKING:
    from kvtop.ui.app import KvtopApp


class DashboardScreen(Screen[None]):
    """The main screen. It tells the app when its size changes or it comes back into view, so
    the table's columns and the "terminal too small" message follow the terminal even while
    polling is paused (the App itself never sees Resize events: Textual stops them)."""

    def compose(self) -> ComposeResult:
        yield ServerHeader(id="header")
        yield Static(id="servers")
        yield Static(id="alertbar")
        yield ModelsTable(id="models")
        yield EventsPane(id="events")
        yield GpuPanel(id="gpu")
        yield Static(id="logline")
        yield Static(id="status")
        yield Input(placeholder="filter models (Enter keeps, Esc clears)", id="filter")
        yield Static(id="too-small")
        yield Footer()

    def _app(self) -> KvtopApp:
        from kvtop.ui.app import KvtopApp

        assert isinstance(self.app, KvtopApp)
        return self.app

    def on_mount(self) -> None:
        self._app().dashboard_mounted()

    def on_resize(self, event: events.Resize) -> None:
        self._app().refresh_dashboard()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        self._app().refresh_dashboard()
