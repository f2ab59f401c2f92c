"""Slowloris against the real exporter on 127.0.0.1: hundreds of clients that trickle a
request head a byte at a time (each byte used to reset waitress's idle timer, so they held the 512
connections for ever and an honest scraper got 1 scrape of 7). With the request deadline, the
per-client cap and eviction at the connection limit (``kvtop.export.httpguard``), an honest scraper
from another address keeps being served.

Linux loopback answers every 127.0.0.0/8 address, so the slow clients and the scraper come from
different source addresses (``127.0.0.2`` is the scraper). No clock decides a verdict: a scrape
counts as served when it gets its 200 and full metrics within a generous per-scrape timeout, and
the slow connections are waited for until they are closed (with a generous deadline).
"""

from __future__ import annotations

import errno
import http.client
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry, Gauge

from kvtop.export.http_server import PER_CLIENT_PENDING, REQUEST_DEADLINE_S, MetricsServer
from tests.integration.test_export_prometheus import exporter
from tests.standin import running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.x source addresses: Linux")

SCRAPER = "127.0.0.2"
SCRAPES = 10
SCRAPE_TIMEOUT_S = 10.0  # Prometheus's default scrape_timeout
HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class Trickler:
    """Slow clients: each connects from one of ``sources``, sends a partial request head, then one
    more byte (``X-a: b``…, never the blank line) every ``every_s``; one the server closes is
    replaced at the next round when ``reconnect`` (a determined attacker). One thread,
    non-blocking sockets; a connect this machine refuses (out of ports) is tried again next round."""

    def __init__(
        self,
        host: str,
        port: int,
        sources: Sequence[str],
        per_source: int,
        *,
        every_s: float = 0.5,
        reconnect: bool = True,
    ) -> None:
        self.target = (host, port)
        self.slots = [src for src in sources for _ in range(per_source)]
        self.every_s = every_s
        self.reconnect = reconnect
        self.closed = 0
        self.opened = 0
        self.ticks = 0
        """Rounds of one byte to every slow client so far."""
        self.sel = selectors.DefaultSelector()
        self.socks: dict[socket.socket, str] = {}
        self.to_open: list[str] = []
        self.connect_errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, src: str) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((src, 0))
            s.setblocking(False)
            s.connect(self.target)
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            self.connect_errors += 1
            self.to_open.append(src)
            return
        self.socks[s] = src
        self.sel.register(s, selectors.EVENT_READ)
        self.opened += 1
        self._sent: dict[socket.socket, int] = getattr(self, "_sent", {})
        self._sent[s] = 0

    def _drop(self, s: socket.socket) -> None:
        src = self.socks.pop(s)
        self.sel.unregister(s)
        self._sent.pop(s, None)
        s.close()
        self.closed += 1
        if self.reconnect and not self.stop.is_set():
            self.to_open.append(src)

    def _run(self) -> None:
        for src in self.slots:
            self._open(src)
        next_tick = 0.0
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    if s.recv(4096) == b"":  # type: ignore[union-attr]
                        self._drop(s)  # type: ignore[arg-type]
                except BlockingIOError:
                    pass
                except OSError:
                    self._drop(s)  # type: ignore[arg-type]
            if time.monotonic() < next_tick:
                continue
            next_tick = time.monotonic() + self.every_s
            reopen, self.to_open = self.to_open, []
            for src in reopen:
                self._open(src)
            for s in list(self.socks):
                sent = self._sent.get(s, 0)
                data = HEAD if sent == 0 else b"X-a: b\r\n"[(sent - 1) % 8 : (sent - 1) % 8 + 1]
                try:
                    s.send(data)
                    self._sent[s] = sent + 1
                except (BlockingIOError, InterruptedError):
                    pass  # not connected yet (in the server's backlog)
                except OSError as exc:
                    if exc.errno != errno.ENOTCONN:  # else: still connecting
                        self._drop(s)
            self.ticks += 1

    def __enter__(self) -> Trickler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        for s in list(self.socks):
            s.close()


def _scrape(host: str, port: int) -> bool:
    """One scrape from ``SCRAPER``: True when it got 200 and the metrics within ``SCRAPE_TIMEOUT_S``."""
    conn = http.client.HTTPConnection(host, port, timeout=SCRAPE_TIMEOUT_S, source_address=(SCRAPER, 0))
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        return r.status == 200 and b"# TYPE" in r.read()
    except OSError:
        return False
    finally:
        conn.close()


def _wait_for(cond: object, deadline_s: float = 60.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(cond())  # type: ignore[operator]


def _served_while(t: Trickler, host: str, port: int) -> list[bool]:
    """``SCRAPES`` scrapes once the slow clients are all connected and trickling."""
    assert _wait_for(lambda: t.ticks >= 3), t.ticks  # every slow client opened and trickling for 3 rounds
    return [_scrape(host, port) for _ in range(SCRAPES)]


def test_600_trickling_clients_from_one_address_do_not_starve_a_scraper(tmp_path: Path) -> None:
    """The real exporter process, its default limits: 600 slow clients from 127.0.0.1 that
    reconnect as soon as they are closed (more than the 512 connections it keeps open)."""
    with running(["--manual"]) as server, exporter(tmp_path, "--host", server.url, "--interval", "0.5") as exp:
        u = urlsplit(exp.url)
        host, port = u.hostname, u.port
        assert host is not None and port is not None
        assert _scrape(host, port)
        with Trickler(host, port, ["127.0.0.1"], 600) as t:
            served = _served_while(t, host, port)
            # the server closed slow clients past the per-client cap (they were replaced at once)
            assert _wait_for(lambda: t.closed >= 600 - PER_CLIENT_PENDING), t.closed
        assert sum(served) >= 9, served
        assert _scrape(host, port)
        assert exp.stop() == 0


@contextmanager
def _server(**kw: object) -> Iterator[MetricsServer]:
    """The exporter's HTTP server, in this process, on 127.0.0.1 (a free port)."""
    registry = CollectorRegistry()
    Gauge("kvtop_test_up", "a gauge to scrape", registry=registry).set(1)
    httpd = MetricsServer(registry, "127.0.0.1", 0, **kw)  # type: ignore[arg-type]
    httpd.start()
    try:
        yield httpd
    finally:
        httpd.close()


def test_slow_clients_from_many_addresses_past_the_connection_limit() -> None:
    """300 slow clients spread over 30 addresses (10 each: under the per-client cap) against a
    limit of 128 connections: at the limit a new connection evicts the slowest, and the request
    deadline closes every trickler, so the scraper is still served."""
    sources = [f"127.0.0.{i}" for i in range(10, 40)]
    with _server(connection_limit=128, request_deadline_s=4.0) as httpd:
        with Trickler("127.0.0.1", httpd.port, sources, 10) as t:
            served = _served_while(t, "127.0.0.1", httpd.port)
            assert _wait_for(lambda: t.closed >= 300), t.closed  # each one closed at least once
        assert sum(served) >= 9, served


def test_request_deadline_closes_a_trickler_under_the_cap() -> None:
    """One slow client alone (under every cap), a byte every 0.2 s so the idle timer never fires:
    closed by the request deadline, not before it; an honest keep-alive client is not."""
    with _server(request_deadline_s=2.0) as httpd:
        honest = http.client.HTTPConnection("127.0.0.1", httpd.port, timeout=30)
        honest.request("GET", "/metrics")
        assert honest.getresponse().read()
        with Trickler("127.0.0.1", httpd.port, ["127.0.0.3"], 1, every_s=0.2, reconnect=False) as t:
            assert _wait_for(lambda: t.closed == 1, 60.0)
        assert t.ticks >= 2  # it sent more than its head: bytes kept coming, so no idle timer closed it
        honest.request("GET", "/metrics")  # the same keep-alive connection, idle meanwhile, still served
        r = honest.getresponse()
        assert r.status == 200 and b"kvtop_test_up 1.0" in r.read()
        honest.close()


def test_default_deadline_is_ten_seconds() -> None:
    assert REQUEST_DEADLINE_S == 10.0 and PER_CLIENT_PENDING == 16


def test_a_request_body_is_bounded() -> None:
    """A scrape has no body: one declared over 64 KiB is refused (413) before it is read."""
    with _server() as httpd:
        s = socket.create_connection(("127.0.0.1", httpd.port), timeout=30)
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
            head = b""
            while b"\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
        finally:
            s.close()
        assert head.startswith(b"HTTP/1.1 413 "), head[:80]


def test_a_client_that_does_not_read_its_answer_is_closed() -> None:
    """A slow reader (a request sent whole, then its answer read at no pace at all) holds a
    connection as a trickling sender does: the response deadline closes it before the client got
    the whole answer; a scraper meanwhile is served."""
    registry = CollectorRegistry()
    g = Gauge("kvtop_test_big", "a large answer", ["name"], registry=registry)
    for i in range(40_000):
        g.labels(f"model-{i:06d}-" + "x" * 80).set(i)
    httpd = MetricsServer(registry, "127.0.0.1", 0, response_deadline_s=2.0)
    httpd.start()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", httpd.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # and then nothing read
        assert _wait_for(lambda: httpd.closed_stalled >= 1, 120.0)
        assert _scrape_plain("127.0.0.1", httpd.port)
        s.settimeout(30)
        got = b""
        while True:
            try:
                chunk = s.recv(1 << 16)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        length = int(
            next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        )
        assert length > 4_000_000 and len(body) < length  # cut before the whole answer was read
    finally:
        s.close()
        httpd.close()


def _scrape_plain(host: str, port: int) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        return r.status == 200 and len(r.read()) > 0
    finally:
        conn.close()
