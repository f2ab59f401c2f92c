"""``kvtop export prometheus`` under hostile and heavy load, as a real process on 127.0.0.1.

- 100 slowloris sockets (a partial request, then silence) do not add a thread each, do not block a
  normal scrape, and are closed by the server (past the per-client cap at once, the rest at the
  request deadline or ``CHANNEL_TIMEOUT_S``; ``test_exporter_slowloris.py`` has the trickling kind);
- 200 scrapers at once all get their 200 and full metrics (counts only: no clock is asserted;
  ``benchmarks/export_load.py`` measures the latencies);
- routing: ``/metrics`` and ``/`` serve the metrics, ``HEAD`` too, other paths 404, other methods 405.

Threads are the exporter process's own, read with psutil.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from kvtop.export.http_server import CHANNEL_TIMEOUT_S, CLEANUP_INTERVAL_S
from tests.integration.test_export_prometheus import exporter
from tests.standin import running

SLOWLORIS = 100
SCRAPERS = 200


def _get(host: str, port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _threads(pid: int) -> int:
    return psutil.Process(pid).num_threads()


def test_slowloris_sockets_get_no_thread_each_and_do_not_block_a_scrape(tmp_path: Path) -> None:
    with running(["--manual"]) as server, exporter(tmp_path, "--host", server.url, "--interval", "0.5") as exp:
        u = urlsplit(exp.url)
        assert _get(u.hostname, u.port)[0] == 200
        before = _threads(exp.proc.pid)
        held: list[socket.socket] = []
        try:
            for _ in range(SLOWLORIS):
                s = socket.create_connection((u.hostname, u.port), timeout=30)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and never the rest
                held.append(s)
            time.sleep(0.5)
            during = _threads(exp.proc.pid)
            status, body = _get(u.hostname, u.port)  # a normal scrape still gets through
            assert status == 200 and b"kvtop_server_up" in body
            assert during - before < 5, (before, during)  # the old server: one more thread per socket
            # The server closes them once idle for CHANNEL_TIMEOUT_S (checked every CLEANUP_INTERVAL_S).
            deadline = time.monotonic() + CHANNEL_TIMEOUT_S + 3 * CLEANUP_INTERVAL_S + 5
            closed = 0
            for s in held:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    closed += s.recv(1) == b""
                except (TimeoutError, socket.timeout):
                    pass
                except ConnectionResetError:
                    closed += 1
            assert closed == SLOWLORIS
        finally:
            for s in held:
                s.close()
        assert exp.stop() == 0


def test_two_hundred_concurrent_scrapers_all_succeed(tmp_path: Path) -> None:
    with running(["--manual"]) as server, exporter(tmp_path, "--host", server.url, "--interval", "0.5") as exp:
        u = urlsplit(exp.url)
        exp.until(lambda fams: "kvtop_server_up" in fams)
        before = _threads(exp.proc.pid)
        start = threading.Barrier(SCRAPERS)
        peak = [0]
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _threads(exp.proc.pid))
                time.sleep(0.02)

        def one(_: int) -> tuple[int, bool]:
            start.wait(30)
            status, body = _get(u.hostname, u.port)
            return status, b"kvtop_server_up{" in body and b"kvtop_exporter_scrapes_total" in body

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with ThreadPoolExecutor(SCRAPERS) as pool:
            results = list(pool.map(one, range(SCRAPERS)))
        stop.set()
        watcher.join()
        assert results == [(200, True)] * SCRAPERS
        assert peak[0] - before < 5, (before, peak[0])
        assert exp.stop() == 0


def test_routing_metrics_root_head_404_405(tmp_path: Path) -> None:
    with running(["--manual"]) as server, exporter(tmp_path, "--host", server.url) as exp:
        u = urlsplit(exp.url)
        status, body = _get(u.hostname, u.port, "/")
        assert status == 200 and b"kvtop_exporter_info" in body  # "/" as prometheus-client's own server did
        assert _get(u.hostname, u.port, "/metrics", "HEAD") == (200, b"")
        assert _get(u.hostname, u.port, "/nope") == (404, b"not found: kvtop serves its metrics on /metrics\n")
        assert _get(u.hostname, u.port, "/metrics", "POST")[0] == 405
        assert exp.stop() == 0
