"""The app's side of the server view (``i``): open the screen, and while it is open read the
health of the local ``ollama serve`` (``sources.health``) and the pulled models
(``sources.pulled``: ``/api/tags``, then ``/api/show`` a few at a time) once per interval, staged
into the server's state like every other sample (``fold_server``). Nothing is read while the view
is closed; the restart count and cgroup limits are read at most every ``health.SLOW_EVERY_S``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message

from kvtop.model.server import ServerHealth, fold_server

if TYPE_CHECKING:  # the pre-flight model (and the plan it uses) is imported when the view first opens
    from kvtop.model.snapshots import PulledSnapshot


class ServerSampled(Message):
    """A health sample and/or a read of the pulled models of one server."""

    def __init__(self, host: str, health: ServerHealth | None, pulled: PulledSnapshot | None) -> None:
        super().__init__()
        self.host = host
        self.health = health
        self.pulled = pulled


class ServerView:
    """Mixin of ``KvtopApp``: ``action_server_view`` and its poller."""

    _health_source: Any
    _pulled_sources: dict[str, Any]

    def _init_server_view(self) -> None:
        self._health_source = None
        self._pulled_sources = {}

    def action_server_view(self) -> None:
        """Open the server view of the server on screen."""
        from kvtop.ui.screens.server import ServerScreen

        app: Any = self
        app.push_screen(ServerScreen())
        if app._poll and app.replay is None:
            app.poll_server_view()

    def _server_view_open(self) -> bool:
        from kvtop.ui.screens.server import ServerScreen

        return any(isinstance(s, ServerScreen) for s in getattr(self, "screen_stack", ()))

    @work(group="poll-server-view", exclusive=True, exit_on_error=False)
    async def poll_server_view(self) -> None:
        """While the view is open: one health sample (this machine's server only) and one round of
        pulled-model reads per interval, for the server on screen."""
        from kvtop.sources.health import HealthSource
        from kvtop.sources.ollama import OllamaClient
        from kvtop.sources.pulled import PulledSource

        app: Any = self
        while self._server_view_open():
            host = app.current_host
            state = app.states.get(host)
            health = None
            if app.settings.demo:
                health = ServerHealth(taken_at=time.time(),
                                      error="the demo's server is a stand-in: there is no ollama serve process to read")
            elif host == app.local_host or host in app.machine_hosts:
                if self._health_source is None:
                    self._health_source = HealthSource()
                health = await self._health_source.sample(state.procs if state is not None else None, host)
            pulled = None
            source = app.sources.get(host)
            if isinstance(source, OllamaClient):
                if host not in self._pulled_sources:
                    settings = app.settings
                    self._pulled_sources[host] = PulledSource(host, timeout_s=settings.timeout_s,
                                                              show_timeout_s=settings.show_timeout_s,
                                                              access=settings.access_for(host))
                # a hanging /api/show holds one of its slots, never the sample (the rest run on)
                pulled = await self._pulled_sources[host].sample_pulled(wait_s=max(0.5, app.interval_s))
            app.post_message(ServerSampled(host, health, pulled))
            await asyncio.sleep(app.interval_s)

    def on_server_sampled(self, message: ServerSampled) -> None:
        """Stage the sample for the server's next apply step."""
        app: Any = self
        health, pulled = message.health, message.pulled
        app._stage(message.host, lambda state: fold_server(state, health, pulled))

    async def _close_server_view(self) -> None:
        for source in self._pulled_sources.values():
            try:
                await source.aclose()
            except Exception:  # noqa: BLE001, S110 - closing must never block quitting
                pass
