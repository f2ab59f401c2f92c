"""Which server is on screen: :class:`ServerSwitcher`, a plain base class of ``KvtopApp``.

With two or more servers (``--host`` given more than once) the dashboard shows a switcher row per
server (``app.overview``, ``dashboard_text.server_overview``); the keys ``1``–``9``, ``]`` and
``[`` put another server on screen (``app.current_host``, ``app.state``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kvtop.ui.dashboard_text import ServerOverview, server_overview

if TYPE_CHECKING:
    from kvtop.model.views import AppState

__all__ = ["ServerSwitcher"]


class ServerSwitcher:
    """The server on screen and the switcher's rows; the app's reactives ``state`` and ``overview``."""

    if TYPE_CHECKING:
        hosts: Sequence[str]
        states: Mapping[str, AppState]
        current_host: str
        state: AppState | None
        overview: tuple[ServerOverview, ...]

    def show_server(self, index: int) -> None:
        """Put the ``index``-th server (0-based, in ``--host`` order) on screen."""
        if not 0 <= index < len(self.hosts) or self.hosts[index] == self.current_host:
            return
        self.current_host = self.hosts[index]
        self.state = self.states[self.current_host]
        self.overview = self._overview_rows()

    def action_next_server(self) -> None:
        self.show_server((self.hosts.index(self.current_host) + 1) % len(self.hosts))

    def action_prev_server(self) -> None:
        self.show_server((self.hosts.index(self.current_host) - 1) % len(self.hosts))

    def action_server(self, number: int) -> None:
        """Keys ``1``–``9``: the server with that number in the overview row."""
        self.show_server(number - 1)

    def _overview_rows(self) -> tuple[ServerOverview, ...]:
        """The switcher's rows, one per server (none with one server: the switcher does not show)."""
        if len(self.hosts) < 2:
            return ()
        return tuple(server_overview(self.states[h], h == self.current_host) for h in self.hosts)
