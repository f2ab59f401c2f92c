"""Request traffic from the gin access lines (docs/ollama-internals.md §4.9), as bounded running aggregates.

The log state keeps per-request events only briefly (``logstate._trim`` drops them first), so the
server view's traffic figures are folded here batch by batch (``add_events``): the cost of a batch
is linear in its events plus a constant (the bounded windows are copied once per batch), and the
memory is bounded whatever the traffic (``LATENCY_WINDOW`` latencies per endpoint, at most
``MAX_ENDPOINTS`` rows for other paths besides Ollama's own routes, ``MAX_CLIENTS`` client addresses, ``SECONDS_KEPT`` one-second buckets).

What gin prints (§4.9): ``[GIN] 2024/07/10 - 17:33:55 | 200 | 22.25s | 127.0.0.1 | POST "/api/chat"``,
local time without a zone, to the second; the latency is a Go duration, printed when the response
completes (a streamed chat's covers load + prompt + generation). A full queue (more than
``OLLAMA_MAX_QUEUE`` requests waiting, default 512, docs/ollama-internals.md §3.5) is answered ``503``
(``server/sched.go`` ``ErrMaxQueue``, "server busy, please try again.  maximum pending requests
exceeded"); gin logs it as a ``503`` line like corpus 053's.
The server log prints no queue depth, so the queue is shown as the count of ``503`` answers and
the configured limit from the ``server config`` line.

Pure: no I/O, no clock (callers pass "now").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kvtop.logparse.events import GinRequest, LogEvent, ServerConfig
from kvtop.core.bounds import duration_s_or_none

LATENCY_WINDOW = 512
"""Latencies kept per endpoint (the newest): p50/p95 are exact over these."""

MAX_ENDPOINTS = 24
"""Rows for paths that are not ``KNOWN_ENDPOINTS`` (``OTHER`` included); later new paths are
counted under ``OTHER``. Ollama's own routes always get a row of their own."""

MAX_CLIENTS = 256
"""Distinct client addresses counted; later new addresses are counted under ``other_clients``."""

SECONDS_KEPT = 120
"""One-second request buckets kept (the newest), for requests per minute."""

OTHER = "(other)"
"""The endpoint row that counts the paths past ``MAX_ENDPOINTS``."""

MAX_PATH_CHARS = 80
"""A logged path longer than this is cut (a path is client-supplied text)."""

KNOWN_ENDPOINTS = (
    "/api/generate",
    "/api/chat",
    "/v1/chat/completions",
    "/v1/completions",
    "/api/embed",
    "/api/embeddings",
    "/v1/embeddings",
    "/api/show",
    "/api/tags",
    "/api/ps",
    "/api/pull",
    "/api/version",
    "/v1/models",
    "/v1/responses",
    "/",
)
"""Ollama's routes (``server/routes.go:GenerateRoutes``): always kept as rows of their own."""

STATUS_POLLS = frozenset(
    {
        ("GET", "/api/ps"),
        ("GET", "/api/version"),
        ("GET", "/api/tags"),
        ("POST", "/api/show"),
        ("GET", "/"),
        ("HEAD", "/"),
    }
)
"""Requests that read the server's status and do no model work: what monitors send (kvtop polls
``/api/ps`` every interval, ``/api/version`` and ``/api/tags`` now and then, ``/api/show`` once per
model). Counted apart (``Traffic.polls_per_min``, ``client_polls``), so a monitor's polling does not
read as traffic."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0 < q ≤ 100) of ``values`` by the nearest-rank method.

    The value at 1-based rank ``ceil(q / 100 × n)`` of the sorted values: always one of the
    values (no interpolation), so p50 of ``[1, 2, 3, 4]`` is 2 and p95 of 20 values is the 19th.
    None for no values.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True, slots=True)
class EndpointTraffic:
    """Requests to one path (query string dropped).

    Attributes:
        path: The path as logged (client text: sanitize before display), or ``OTHER``.
        requests: Every request counted since kvtop started reading the log.
        client_errors / server_errors: Answers 400–499 / 500–599.
        latencies_s: The newest ``LATENCY_WINDOW`` latencies, seconds, oldest first; a latency that is
            not known, or out of a Go duration's range (``bounds.GO_DURATION_MAX_S``), is not among them.
    """

    path: str
    requests: int = 0
    client_errors: int = 0
    server_errors: int = 0
    latencies_s: tuple[float, ...] = ()

    @property
    def p50_s(self) -> float | None:
        """Median latency of ``latencies_s`` (nearest rank), seconds."""
        return percentile(self.latencies_s, 50)

    @property
    def p95_s(self) -> float | None:
        """95th percentile latency of ``latencies_s`` (nearest rank), seconds."""
        return percentile(self.latencies_s, 95)


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the access lines said so far.

    Attributes:
        requests: Access lines counted.
        client_errors / server_errors: 4xx / 5xx answers.
        busy: ``503`` answers (Ollama's "server busy": the queue was full, or the scheduler
            could not take the request).
        last_busy: When the newest ``503`` was logged (log time: naive local), None if none.
        newest: The newest access line's time (naive local), None before one.
        seconds: ``(epoch second of the naive time, requests)``, newest ``SECONDS_KEPT``, oldest first.
        endpoints: Per path, in the order first seen.
        clients: ``(address, requests)`` per client address, in the order first seen.
        other_clients: Requests from addresses past ``MAX_CLIENTS``.
        max_queue: ``OLLAMA_MAX_QUEUE`` from the newest ``server config`` line (Ollama's
            default 512 when that line does not set it), None before such a line.
        poll_seconds: Like ``seconds``, the :data:`STATUS_POLLS` requests only.
        client_polls: ``(address, status polls)`` per client address among ``clients``.
    """

    requests: int = 0
    client_errors: int = 0
    server_errors: int = 0
    busy: int = 0
    last_busy: datetime | None = None
    newest: datetime | None = None
    seconds: tuple[tuple[int, int], ...] = ()
    endpoints: tuple[EndpointTraffic, ...] = ()
    clients: tuple[tuple[str, int], ...] = ()
    other_clients: int = 0
    max_queue: int | None = None
    poll_seconds: tuple[tuple[int, int], ...] = ()
    client_polls: tuple[tuple[str, int], ...] = ()

    def polls_per_min(self, now: datetime | None = None) -> int | None:
        """:data:`STATUS_POLLS` requests logged in the 60 seconds up to ``now`` (as
        :meth:`requests_per_min`); None before any access line."""
        if self.newest is None:
            return None
        end = _epoch(now if now is not None else self.newest)
        return sum(n for s, n in self.poll_seconds if end - 60 < s <= end)

    def requests_per_min(self, now: datetime | None = None) -> int | None:
        """Requests logged in the 60 seconds up to ``now`` (naive local time, as the log's), or up
        to the newest access line when ``now`` is None. None before any access line."""
        if self.newest is None:
            return None
        end = _epoch(now if now is not None else self.newest)
        return sum(n for s, n in self.seconds if end - 60 < s <= end)

    def busiest_clients(self, n: int = 5) -> tuple[tuple[str, int], ...]:
        """The ``n`` addresses with the most requests, most first (ties: first seen first)."""
        order = sorted(range(len(self.clients)), key=lambda i: (-self.clients[i][1], i))
        return tuple(self.clients[i] for i in order[:n])

    def endpoint(self, path: str) -> EndpointTraffic | None:
        """The row of ``path``, None when it has none."""
        return next((e for e in self.endpoints if e.path == path), None)


def _epoch(t: datetime) -> int:
    """Whole seconds of a naive log time, read as UTC (only differences are used)."""
    return int(t.replace(tzinfo=timezone.utc).timestamp()) if t.tzinfo is None else int(t.timestamp())


def _path(raw: str) -> str:
    path = raw.split("?", 1)[0]
    return path[:MAX_PATH_CHARS]


def _max_queue(env: Mapping[str, str]) -> int | None:
    value = env.get("OLLAMA_MAX_QUEUE", "").strip()
    if not value:
        return 512  # envconfig.MaxQueue's default (docs/ollama-internals.md §3.5)
    try:
        return int(value)
    except ValueError:
        return None


def is_status_poll(event: LogEvent) -> bool:
    """An access line of one of the :data:`STATUS_POLLS` (a monitor's read of the server)."""
    return isinstance(event, GinRequest) and (event.method.upper(), _path(event.path)) in STATUS_POLLS


def add_events(traffic: Traffic, events: Iterable[LogEvent]) -> Traffic:
    """``traffic`` with one batch of parsed events counted (only ``GinRequest`` and
    ``ServerConfig`` matter; others are skipped). The same object when the batch has none."""
    gins: list[GinRequest] = []
    max_queue = traffic.max_queue
    for e in events:
        if isinstance(e, GinRequest):
            gins.append(e)
        elif isinstance(e, ServerConfig):
            max_queue = _max_queue(e.env)
    if not gins:
        return traffic if max_queue == traffic.max_queue else _replace(traffic, max_queue=max_queue)
    requests, c4, c5, busy = traffic.requests, traffic.client_errors, traffic.server_errors, traffic.busy
    last_busy, newest = traffic.last_busy, traffic.newest
    seconds = dict(traffic.seconds)
    rows: dict[str, list[Any]] = {
        e.path: [e.requests, e.client_errors, e.server_errors, list(e.latencies_s)] for e in traffic.endpoints
    }
    clients = dict(traffic.clients)
    client_polls = dict(traffic.client_polls)
    poll_seconds = dict(traffic.poll_seconds)
    other_clients = traffic.other_clients
    for g in gins:
        requests += 1
        poll = (g.method.upper(), _path(g.path)) in STATUS_POLLS
        status = g.status
        if 400 <= status < 500:
            c4 += 1
        elif 500 <= status < 600:
            c5 += 1
        if status == 503:
            busy += 1
            if g.time is not None:
                last_busy = g.time
        if g.time is not None:
            if newest is None or g.time >= newest:
                newest = g.time
            sec = _epoch(g.time)
            seconds[sec] = seconds.get(sec, 0) + 1
            if poll:
                poll_seconds[sec] = poll_seconds.get(sec, 0) + 1
        path = _path(g.path)
        row = rows.get(path)
        if row is None:
            if len(rows) >= MAX_ENDPOINTS - (0 if OTHER in rows else 1) and path not in KNOWN_ENDPOINTS:
                path = OTHER
            row = rows.setdefault(path, [0, 0, 0, []])
        row[0] += 1
        if 400 <= status < 500:
            row[1] += 1
        elif 500 <= status < 600:
            row[2] += 1
        latency_s = duration_s_or_none(g.latency_s)  # a latency no Go program printed is not counted
        if latency_s is not None:
            row[3].append(latency_s)
        addr = g.client.strip()[:64]
        if addr in clients:
            clients[addr] += 1
        elif len(clients) < MAX_CLIENTS:
            clients[addr] = 1
        else:
            other_clients += 1
            continue
        if poll:
            client_polls[addr] = client_polls.get(addr, 0) + 1
    kept = sorted(seconds.items())
    kept_polls = sorted(poll_seconds.items())
    if newest is not None:
        cut = _epoch(newest) - SECONDS_KEPT
        kept = [(s, n) for s, n in kept if s > cut]
        kept_polls = [(s, n) for s, n in kept_polls if s > cut]
    endpoints = tuple(EndpointTraffic(p, r[0], r[1], r[2], tuple(r[3][-LATENCY_WINDOW:])) for p, r in rows.items())
    return Traffic(
        requests,
        c4,
        c5,
        busy,
        last_busy,
        newest,
        tuple(kept[-SECONDS_KEPT:]),
        endpoints,
        tuple(clients.items()),
        other_clients,
        max_queue,
        tuple(kept_polls[-SECONDS_KEPT:]),
        tuple(client_polls.items()),
    )


def _replace(t: Traffic, **kw: object) -> Traffic:
    import dataclasses

    return dataclasses.replace(t, **kw)  # type: ignore[arg-type]


def traffic_json(t: Traffic, now: datetime | None = None) -> dict[str, object]:
    """The ``server.traffic`` object of ``--once --json`` (docs/json.md); latencies in seconds."""
    polls = dict(t.client_polls)
    return {
        "requests": t.requests,
        "requests_last_min": t.requests_per_min(now),
        "status_polls_last_min": t.polls_per_min(now),
        "client_errors": t.client_errors,
        "server_errors": t.server_errors,
        "busy_503": t.busy,
        "last_busy": t.last_busy.isoformat() if t.last_busy else None,
        "newest": t.newest.isoformat() if t.newest else None,
        "max_queue": t.max_queue,
        "endpoints": [
            {
                "path": e.path,
                "requests": e.requests,
                "client_errors": e.client_errors,
                "server_errors": e.server_errors,
                "latency_samples": len(e.latencies_s),
                "p50_s": e.p50_s,
                "p95_s": e.p95_s,
            }
            for e in t.endpoints
        ],
        "busiest_clients": [
            {"address": a, "requests": n, "status_polls": polls.get(a, 0)} for a, n in t.busiest_clients(5)
        ],
        "other_clients": t.other_clients,
    }
