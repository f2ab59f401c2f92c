"""The exporter's HTTP server: waitress with deadlines and caps against slow clients (slowloris).

Waitress alone closes a connection only after ``channel_timeout`` seconds without a byte, so a
client that trickles one byte every few seconds holds its connection for ever, and 600 such clients
filled the 512 connections (a hostile-client case). :class:`GuardedServer` adds three rules, checked in the I/O
thread (at most every ``cleanup_interval`` seconds, and when a connection arrives at the limit):

- **request deadline**: a request's head and body must arrive whole within ``request_deadline_s``
  of its first byte (a new connection's clock starts at its accept); otherwise the connection is
  closed without an answer. A connection idle between requests is closed by waitress's own
  ``channel_timeout``.
- **response deadline**: an answer must be read by the client within ``response_deadline_s`` of
  the time it was ready (a client that reads a byte at a time keeps its connection busy too).
- **per-client cap**: one client address may hold at most ``per_client_pending`` connections
  stalled (on an incomplete request, or an answer not read) for more than ``pending_grace_s``; its
  longest-stalled ones past that are closed. A burst of honest requests (each sent whole at once,
  each answer read) is never stalled that long.
- **at the connection limit** a new connection evicts the oldest stalled connection of the
  address holding the most connections (else the longest-stalled one, else the one idle longest
  between requests), instead of the server no longer accepting; only when every connection is
  being answered is the new one closed at once.

Connections closed by these rules leave the loop's map at once and their sockets are closed at the
start of the next poll round (see ``GuardedServer._close``).

Which connections are slow is judged by bytes arriving, not by their address: every address
(``127.0.0.1`` included) gets the same rules. Behind a reverse proxy all clients share its address.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher


ACCEPTS_PER_WAKE = 64
"""Connections accepted per wake-up of the I/O loop (waitress accepts one)."""


class GuardedChannel(HTTPChannel):  # type: ignore[misc]
    """A waitress channel that knows since when it waits on an incomplete request.

    ``pending_since`` (``time.monotonic()``): the accept, or the first byte of the request now being
    received; None while no request is incomplete (one being answered, or idle between requests).
    """

    pending_since: float | None = None
    flushing_since: float | None = None
    """``time.monotonic()`` when maintenance first saw an answer waiting to be read (set and
    cleared by :meth:`GuardedServer.maintenance`), None when there is none."""

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:  # noqa: A002
        self.pending_since = time.monotonic()
        self.client = _client(addr)
        super().__init__(server, sock, addr, adj, map=map)
        if isinstance(server, GuardedServer):
            server.by_client.setdefault(self.client, {})[self] = None  # in accept order

    def del_channel(self, map: Any = None) -> None:  # noqa: A002
        super().del_channel(map)
        server = self.server
        if isinstance(server, GuardedServer):
            mine = server.by_client.get(self.client)
            if mine is not None:
                mine.pop(self, None)
                if not mine:
                    del server.by_client[self.client]

    def received(self, data: bytes) -> bool:
        before = self.request
        if self.pending_since is None and data:
            self.pending_since = time.monotonic()
        out: bool = super().received(data)
        if self.request is None:
            self.pending_since = None  # nothing incomplete: the next request's clock starts at its byte
        elif self.request is not before and before is not None:
            self.pending_since = time.monotonic()  # a request ended in this chunk and the next began
        return out

    def stall(self, now: float) -> tuple[str, float] | None:
        """``("request", s)``: waiting ``s`` seconds on an incomplete request; ``("response", s)``:
        an answer unread for ``s`` seconds; None: a request is being answered, the connection is
        idle between requests, or it is closing."""
        if self.requests or self.will_close:
            return None
        if self.total_outbufs_len and self.flushing_since is not None:
            return "response", now - self.flushing_since
        if self.pending_since is not None:
            return "request", now - self.pending_since
        return None


class GuardedServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server with the module's rules (see the module doc).

    Args: as ``TcpWSGIServer``, plus ``request_deadline_s``, ``response_deadline_s``,
    ``per_client_pending`` and ``pending_grace_s``.
    """

    channel_class = GuardedChannel
    next_channel_cleanup: float  # waitress's: when maintenance() runs next (time.time())

    def __init__(
        self,
        *args: Any,
        request_deadline_s: float,
        response_deadline_s: float,
        per_client_pending: int,
        pending_grace_s: float,
        **kw: Any,
    ) -> None:
        self.request_deadline_s = request_deadline_s
        self.response_deadline_s = response_deadline_s
        self.per_client_pending = per_client_pending
        self.pending_grace_s = pending_grace_s
        self.closed_slow = 0
        """Connections closed by these rules (a count, for tests and benchmarks)."""
        self.by_client: dict[str, dict[GuardedChannel, None]] = {}
        """Open connections by client address, each address's in accept order."""
        self._evicted_sockets: list[Any] = []
        """Sockets of connections closed by these rules, closed for good at the start of the next
        round's set-up: closed at once (in ``maintenance``, while waitress builds a poll set, or in
        ``handle_accept``), a descriptor number could go to a connection accepted later in the same
        round, which would then get the closed one's events (a POLLNVAL closed honest scrapers)."""
        super().__init__(*args, **kw)

    def readable(self) -> bool:
        # waitress stops accepting at the connection limit, which is what slow clients exploit:
        # keep accepting and make room in handle_accept instead
        for sock in self._evicted_sockets:
            try:
                sock.close()
            except OSError:
                pass
        self._evicted_sockets.clear()
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        return bool(self.accepting)

    def handle_accept(self) -> None:
        # waitress accepts one connection per wake-up of its loop; with slow clients reconnecting as
        # fast as they are closed, an honest scraper would queue behind them in the backlog
        for _ in range(ACCEPTS_PER_WAKE):
            if len(self.active_channels) >= self.adj.connection_limit and not self._evict_one():
                try:
                    got = self.accept()
                except OSError:
                    return
                if got is None:
                    return
                got[0].close()  # every connection is being answered: this one waits for none
                continue
            before = len(self.active_channels)
            super().handle_accept()
            if len(self.active_channels) == before:  # nothing was waiting (or accept failed)
                return

    def maintenance(self, now: float) -> None:
        """waitress's idle check, then the request and response deadlines and the per-client cap."""
        super().maintenance(now)
        mono = time.monotonic()
        late: list[GuardedChannel] = []
        slow_by_client: dict[str, list[tuple[float, GuardedChannel]]] = defaultdict(list)
        for channel in list(self.active_channels.values()):
            if not isinstance(channel, GuardedChannel):
                continue
            if channel.requests or not channel.total_outbufs_len:
                channel.flushing_since = None
            elif channel.flushing_since is None:
                channel.flushing_since = mono  # an answer is ready and not read yet: its clock starts
            stall = channel.stall(mono)
            if stall is None:
                continue
            kind, waited = stall
            if waited > (self.request_deadline_s if kind == "request" else self.response_deadline_s):
                late.append(channel)
            elif waited > self.pending_grace_s:
                slow_by_client[_client(channel.addr)].append((waited, channel))
        for waiting in slow_by_client.values():
            if len(waiting) > self.per_client_pending:
                waiting.sort(key=lambda w: -w[0])  # the longest waiting first
                late.extend(c for _, c in waiting[: len(waiting) - self.per_client_pending])
        for channel in late:
            self._close(channel)

    def _evict_one(self) -> bool:
        """Make room for a new connection: close the oldest stalled connection (an incomplete
        request or an unread answer) of the address holding the most connections (when it holds
        more than one: the fair share goes first, so a scraper's one connection is not evicted by
        a flood from elsewhere), else the longest-stalled one of all, else the one idle longest
        between requests. False when every connection is being answered."""
        mono = time.monotonic()
        busiest = max(self.by_client.values(), key=len, default=None)
        if busiest is not None and len(busiest) > 1:
            for channel in busiest:  # accept order: the oldest first
                if not channel.will_close and channel.stall(mono) is not None:
                    self._close(channel)
                    return True
        stalled: tuple[float, GuardedChannel] | None = None
        idle: tuple[float, GuardedChannel] | None = None
        for channel in self.active_channels.values():
            if not isinstance(channel, GuardedChannel) or channel.will_close:
                continue
            stall = channel.stall(mono)
            if stall is not None:
                if stalled is None or stall[1] > stalled[0]:
                    stalled = (stall[1], channel)
            elif (
                not channel.requests
                and not channel.total_outbufs_len
                and (idle is None or channel.last_activity < idle[0])
            ):
                idle = (channel.last_activity, channel)
        victim = stalled or idle
        if victim is None:
            return False
        self._close(victim[1])
        return True

    def _close(self, channel: GuardedChannel) -> None:
        """Close ``channel`` (no request of it is being answered) in this, the I/O thread: out of
        the loop's map now, its socket closed at the start of the next poll round's set-up."""
        self.closed_slow += 1
        sock = channel.socket
        if sock is not None:
            channel.socket = None  # handle_close then leaves the socket open, for readable() to close
            self._evicted_sockets.append(sock)
        try:
            channel.handle_close()
        except OSError:
            pass


def _client(addr: Any) -> str:
    """The client address of a connection (``addr[0]``), "" when unknown."""
    return str(addr[0]) if isinstance(addr, tuple) and addr else ""


def create_guarded_server(
    app: Any,
    *,
    request_deadline_s: float,
    response_deadline_s: float,
    per_client_pending: int,
    pending_grace_s: float,
    **adjustments: Any,
) -> GuardedServer:
    """A :class:`GuardedServer` for ``app`` on the one address of ``adjustments["listen"]``
    (``"ip:port"`` or ``"[ip6]:port"``), as ``waitress.create_server`` builds one, started
    listening (call ``run`` to serve). ``adjustments`` are waitress's.

    Raises:
        ValueError: an invalid host or port (waitress's message).
        OSError: the address cannot be bound.
    """
    adj = Adjustments(**adjustments)
    if len(adj.listen) != 1:
        raise ValueError("one address to listen on")
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    return GuardedServer(
        app,
        {},
        True,
        None,
        dispatcher=dispatcher,
        adj=adj,
        sockinfo=adj.listen[0],
        request_deadline_s=request_deadline_s,
        response_deadline_s=response_deadline_s,
        per_client_pending=per_client_pending,
        pending_grace_s=pending_grace_s,
    )
