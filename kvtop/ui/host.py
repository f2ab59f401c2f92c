"""What the dashboard screen and the panel layout need of the app, as Protocols.

``screens/dashboard.py`` and ``layout.py`` are typed against these instead of importing
``kvtop.ui.app`` (which imports both): the app satisfies them, and nothing below it names
``KvtopApp`` (issue 24: the circle app ↔ layout ↔ dashboard).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console
    from textual.geometry import Size
    from textual.notifications import SeverityLevel
    from textual.screen import Screen
    from textual.widgets import Input

    from kvtop.config import Settings
    from kvtop.engine import Engine
    from kvtop.engine.fold import Pending
    from kvtop.model.history import History


@runtime_checkable
class DashboardHost(Protocol):
    """The app as the dashboard screen uses it: told when the screen is mounted, asked to repaint,
    and the filter box's actions (the screen's type-ahead runs them in the order typed)."""

    def dashboard_mounted(self) -> None: ...

    def refresh_dashboard(self) -> None: ...

    def action_filter(self) -> None: ...

    def action_clear_filter(self) -> None: ...

    def _filter_submitted(self, event: Input.Submitted) -> None: ...

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None: ...


class PanelHost(Protocol):
    """The app as the panel layout (``layout.PanelLayout``, a mixin of the app) uses it."""

    @property
    def size(self) -> Size: ...

    @property
    def dashboard(self) -> Screen[None]: ...

    @property
    def console(self) -> Console: ...

    @property
    def theme_variables(self) -> dict[str, str]: ...

    @property
    def histories(self) -> Mapping[str, History]: ...

    settings: Settings
    replay: object | None
    theme: str
    current_host: str
    interval_s: float

    def notify(self, message: str, *, title: str = ..., severity: SeverityLevel = ...,
               timeout: float | None = ..., markup: bool = ...) -> None: ...

    def refresh_dashboard(self) -> None: ...

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...


class ServerViewHost(Protocol):
    """The app as the server view (``server_view.ServerView``, a part the app owns) uses it."""

    engine: Engine
    replay: object | None
    current_host: str
    interval_s: float
    _poll: bool

    @property
    def screen_stack(self) -> list[Screen[Any]]: ...

    def push_screen(self, screen: Screen[Any]) -> Any: ...

    def run_worker(self, work: Any, name: str | None = ..., group: str = ..., description: str = ...,
                   exit_on_error: bool = ..., start: bool = ..., exclusive: bool = ..., thread: bool = ...) -> Any: ...

    def _stage(self, host: str, item: Pending, *, urgent: bool = ...) -> None: ...
