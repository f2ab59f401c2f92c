"""What the dashboard screen and the app's parts need of the app, as Protocols.

``screens/dashboard.py``, ``layout.py``, ``actions.py`` and ``server_view.py`` are typed against
these instead of importing ``kvtop.ui.app`` (which imports them): the app satisfies them, and
nothing below it names ``KvtopApp`` (issue 24: no circle app ↔ layout ↔ dashboard).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from textual.geometry import Size
    from textual.notifications import SeverityLevel
    from textual.screen import Screen

    from kvtop.config import Settings
    from kvtop.engine import Engine
    from kvtop.model.history import History
    from kvtop.model.views import AppState, ModelView
    from kvtop.ui.replay_worker import ReplayControl
    from kvtop.ui.widgets.events_pane import OperatorEntry


class OperatorLog(Protocol):
    """The operator actions' part (``actions.OperatorActions``, ``app.operator``) as the dashboard
    reads it: the writes to list in the events pane, the unloads in flight, the UNTIL countdown."""

    log: list[OperatorEntry]

    def unloading_keys(self, host: str) -> set[tuple[str, str]]: ...

    def schedule_until_tick(self, ticking: bool) -> None: ...


class _Notifies(Protocol):
    def notify(
        self,
        message: str,
        *,
        title: str = ...,
        severity: SeverityLevel = ...,
        timeout: float | None = ...,
        markup: bool = ...,
    ) -> None: ...


class PanelHost(_Notifies, Protocol):
    """The app as the panel layout (``layout.PanelLayout``, the dashboard screen's part) reads it."""

    @property
    def size(self) -> Size: ...

    @property
    def console(self) -> Console: ...

    @property
    def theme_variables(self) -> dict[str, str]: ...

    @property
    def histories(self) -> Mapping[str, History]: ...

    settings: Settings
    replay: ReplayControl | None
    theme: str
    current_host: str
    interval_s: float

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...


class DashboardHost(PanelHost, Protocol):
    """The app as the dashboard screen reads it to draw itself: the state on screen and the view
    settings it watches (``state``, ``sort_key``, ``sort_reverse``, ``filter_text``, ``paused``,
    ``interval_s``, ``theme``, ``overview``, ``recording``, ``replay_header``, ``replay_status``),
    the servers, and the operator part's log."""

    state: AppState | None
    sort_key: str
    sort_reverse: bool
    filter_text: str
    paused: bool
    overview: tuple[object, ...]
    recording: bool
    replay_header: str | None
    replay_status: str | None
    replay_quiet: bool
    """True during a replay jump: states change without a repaint until the jump's end."""
    operator: OperatorLog

    @property
    def hosts(self) -> Sequence[str]: ...

    @property
    def local_host(self) -> str: ...

    @property
    def log_source(self) -> object | None: ...

    @property
    def is_running(self) -> bool: ...

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None: ...


class SelectsModels(Protocol):
    """The dashboard screen as the operator actions ask it for the table's selected row."""

    @property
    def selected_view(self) -> ModelView | None: ...


class OperatorHost(_Notifies, Protocol):
    """The app as the operator actions (``actions.OperatorActions``, a part the app owns) use it."""

    settings: Settings
    state: AppState | None
    replay: ReplayControl | None
    current_host: str

    @property
    def sources(self) -> Mapping[str, Any]: ...

    @property
    def states(self) -> Mapping[str, AppState]: ...

    @property
    def local_host(self) -> str: ...

    @property
    def dashboard(self) -> SelectsModels: ...

    @property
    def screen_stack(self) -> list[Screen[Any]]: ...

    @property
    def is_running(self) -> bool: ...

    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], Any] | None = ...) -> Any: ...

    def run_worker(
        self,
        work: Any,
        name: str | None = ...,
        group: str = ...,
        description: str = ...,
        exit_on_error: bool = ...,
        start: bool = ...,
        exclusive: bool = ...,
        thread: bool = ...,
    ) -> Any: ...


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

    def run_worker(
        self,
        work: Any,
        name: str | None = ...,
        group: str = ...,
        description: str = ...,
        exit_on_error: bool = ...,
        start: bool = ...,
        exclusive: bool = ...,
        thread: bool = ...,
    ) -> Any: ...
