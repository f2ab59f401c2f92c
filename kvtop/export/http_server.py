"""The exporter's HTTP server: ``/metrics`` over prometheus-client's WSGI app, behind waitress.

Connections are handled by one I/O thread (select/poll), requests by a fixed pool of
``SERVER_THREADS`` workers; listen backlog ``SERVER_BACKLOG``; a connection idle for
``CHANNEL_TIMEOUT_S`` is closed, and so is one whose request has not arrived whole
``REQUEST_DEADLINE_S`` after its first byte (a slowloris client trickling a byte at a time) or
whose answer is not read ``RESPONSE_DEADLINE_S`` after it was ready; one client address may keep
at most ``PER_CLIENT_PENDING`` connections stalled so; at most ``CONNECTION_LIMIT`` connections
are open at once, and at the limit a new one evicts a stalled one (of the address holding the most
first), else the one idle longest (``kvtop.export.httpguard``). ``GET /metrics`` (and ``/``, as
prometheus-client's own server did) serve the metrics, ``HEAD`` too; other paths answer 404,
other methods 405.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry

from kvtop.export.metrics_cache import MetricsCache

SERVER_THREADS = 8
"""Worker threads answering requests (a scrape costs about a millisecond of one of them)."""

SERVER_BACKLOG = 1024
"""Listen backlog: connections the kernel queues while the workers are busy."""

CHANNEL_TIMEOUT_S = 10
"""A connection with no activity for this long is closed (forgotten keep-alives, silent clients)."""

REQUEST_DEADLINE_S = 10.0
"""A request's head (and body) must arrive whole within this many seconds of its first byte (a
new connection's: of its accept); a client trickling bytes is closed then, however often it sends."""

RESPONSE_DEADLINE_S = 30.0
"""An answer must be read by its client within this many seconds of being ready (a client that
reads a byte at a time holds its connection as a trickling sender does)."""

PER_CLIENT_PENDING = 16
"""Connections one client address may keep stalled (on an incomplete request or an unread answer)
for more than ``PENDING_GRACE_S``; its longest-stalled ones past that are closed."""

PENDING_GRACE_S = 1.0
"""An incomplete request younger than this is not yet counted against ``PER_CLIENT_PENDING``
(a burst of honest scrapes from one address sends each request whole at once)."""

CLEANUP_INTERVAL_S = 1
"""How often idle and slow connections are looked for."""

CONNECTION_LIMIT = 512
"""Connections open at once; at the limit a new one evicts a stalled connection (the oldest of the
address holding the most), else the one idle longest between requests (closed at once only when
every connection is being answered)."""

MAX_REQUEST_HEADER_BYTES = 16 * 1024
"""Longest request head accepted (a scrape's is a few hundred bytes)."""

MAX_REQUEST_BODY_BYTES = 64 * 1024
"""Longest request body accepted (a scrape has none; larger ones are answered 413)."""

_NOT_FOUND = b"not found: kvtop serves its metrics on /metrics\n"


def make_wsgi(registry: CollectorRegistry, cache: MetricsCache | None = None) -> Callable[..., Iterable[bytes]]:
    """The exporter's WSGI app: ``/metrics`` and ``/`` → the metrics (text format, OpenMetrics or
    gzip when the scraper asks); ``GET``/``HEAD`` only (else 405); any other path → 404 with a
    one-line plain-text body.

    With ``cache``, bodies come from :class:`MetricsCache` (rendered once per poll); a request
    filtering by ``name[]`` and every request without a cache go to prometheus-client's own
    metrics app over ``registry`` (rendered per request)."""
    from prometheus_client import make_wsgi_app

    uncached = make_wsgi_app(registry)

    def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if cache is None or "name" in environ.get("QUERY_STRING", ""):
            return uncached(environ, start_response)  # type: ignore[no-any-return]
        body, headers = cache.body(environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path not in ("/metrics", "/"):
            start_response(
                "404 Not Found",
                [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(_NOT_FOUND)))],
            )
            return [_NOT_FOUND]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            body = b"only GET and HEAD\n"
            start_response(
                "405 Method Not Allowed",
                [
                    ("Allow", "GET, HEAD"),
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(body))),
                ],
            )
            return [body]
        if environ["REQUEST_METHOD"] == "HEAD":  # prometheus-client answers GET only: same headers, no body
            for _chunk in metrics({**environ, "REQUEST_METHOD": "GET"}, start_response):
                pass
            return []
        return metrics(environ, start_response)

    return app


class MetricsServer:
    """The HTTP side of the exporter: ``make_wsgi(registry)`` served by waitress in one daemon
    thread (its I/O loop) plus ``threads`` workers.

    Args:
        registry: What ``/metrics`` serves.
        cache: Serve ``/metrics`` from this cache (:func:`make_wsgi`); None renders every request.
        host: Address to bind (an IP address or a name; a name binds its first address, as
            ``getaddrinfo`` orders them).
        port: Port; 0 picks a free one (see :attr:`port`).
        request_deadline_s / response_deadline_s / per_client_pending / pending_grace_s /
            connection_limit: the slow client rules (``REQUEST_DEADLINE_S`` …, ``kvtop.export.httpguard``).

    Raises:
        OSError: The address cannot be bound (in use, not this machine's, permission denied) or
            the name does not resolve (``socket.gaierror``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        threads: int = SERVER_THREADS,
        backlog: int = SERVER_BACKLOG,
        channel_timeout_s: int = CHANNEL_TIMEOUT_S,
        connection_limit: int = CONNECTION_LIMIT,
        cache: MetricsCache | None = None,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        response_deadline_s: float = RESPONSE_DEADLINE_S,
        per_client_pending: int = PER_CLIENT_PENDING,
        pending_grace_s: float = PENDING_GRACE_S,
    ) -> None:
        import logging
        import socket

        from kvtop.export.httpguard import create_guarded_server

        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        ip = sockaddr[0]
        listen = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" under load is expected
        try:
            self._server = create_guarded_server(
                make_wsgi(registry, cache),
                listen=listen,
                threads=threads,
                backlog=backlog,
                channel_timeout=channel_timeout_s,
                cleanup_interval=CLEANUP_INTERVAL_S,
                connection_limit=connection_limit,
                max_request_header_size=MAX_REQUEST_HEADER_BYTES,
                max_request_body_size=MAX_REQUEST_BODY_BYTES,
                asyncore_use_poll=True,
                ident="kvtop",
                expose_tracebacks=False,
                request_deadline_s=request_deadline_s,
                response_deadline_s=response_deadline_s,
                per_client_pending=per_client_pending,
                pending_grace_s=pending_grace_s,
            )
        except ValueError as exc:  # waitress: "Invalid host/port specified."
            raise OSError(str(exc)) from None
        self.host: str = ip
        self.port: int = int(self._server.effective_port)
        """The bound port (the free one chosen for port 0)."""
        self._thread = threading.Thread(target=self._server.run, name="kvtop-http", daemon=True)

    def start(self) -> None:
        """Start serving (returns at once)."""
        self._thread.start()

    @property
    def closed_stalled(self) -> int:
        """Connections closed so far for being stalled (the slow-client rules of ``httpguard``)."""
        return int(self._server.closed_slow)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop accepting, close every connection and the workers; waits up to ``timeout_s``."""
        from waitress import wasyncore

        server = self._server
        try:
            wasyncore.close_all(server._map)  # the listening socket and every open connection
        except Exception:  # noqa: BLE001, S110 - closing must never block exiting
            pass
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout_s)
        if self._thread.is_alive():
            self._thread.join(timeout_s)
