"""The app's side of the server view (``i``): open the screen, and while it is open ask the engine
for one round per interval (``Engine.sample_server_info``: the health of the local ``ollama serve``,
``sources.health``, and the pulled models, ``sources.pulled``: ``/api/tags``, then ``/api/show`` a
few at a time), staged into the server's state like every other sample (``fold_server``). Nothing
is read while the view is closed; the restart count and cgroup limits are read at most every
``health.SLOW_EVERY_S``.

A part the app owns (``app.server_view``), not a mixin: the app's ``action_server_view`` and
``on_server_sampled`` hand over to it; it sees the app through ``kvtop.ui.host.ServerViewHost``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # the server model, its pre-flight (and the plan it uses) are imported when first used
    from kvtop.model.server_health import ServerHealth
    from kvtop.model.snapshots import PulledSnapshot
    from kvtop.ui.host import ServerViewHost


class ServerSampled(Message):
    """A health sample and/or a read of the pulled models of one server."""

    def __init__(self, host: str, health: ServerHealth | None, pulled: PulledSnapshot | None) -> None:
        super().__init__()
        self.host = host
        self.health = health
        self.pulled = pulled


class ServerView:
    """The server view's part of the app: opening the screen and its poller."""

    def __init__(self, app: ServerViewHost) -> None:
        self.app = app

    def open(self) -> None:
        """Open the server view of the server on screen (the app's ``action_server_view``)."""
        from kvtop.ui.screens.server_view import ServerScreen

        app = self.app
        app.push_screen(ServerScreen())
        if app._poll and app.replay is None:
            self.poll()

    def is_open(self) -> bool:
        from kvtop.ui.screens.server_view import ServerScreen

        return any(isinstance(s, ServerScreen) for s in self.app.screen_stack)

    def poll(self) -> None:
        """Start the poller in the app's worker group ``poll-server-view`` (one at a time)."""
        self.app.run_worker(
            self.poll_rounds(), name="poll_server_view", group="poll-server-view", exclusive=True, exit_on_error=False
        )

    async def poll_rounds(self) -> None:
        """While the view is open: one round of the engine's server-view reads per interval (health:
        this machine's server only; the pulled models), for the server on screen."""
        app = self.app
        while self.is_open():
            await app.engine.sample_server_info(app.current_host)
            await asyncio.sleep(app.interval_s)

    def stage(self, message: ServerSampled) -> None:
        """Stage a server-view sample posted to the app (tests) for the server's next apply step."""
        from kvtop.model.server_view import fold_server

        health, pulled = message.health, message.pulled
        self.app.engine.stage(message.host, lambda state: fold_server(state, health, pulled))
