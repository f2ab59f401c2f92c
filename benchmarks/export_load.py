"""Prometheus exporter under load: 200 concurrent scrapers, and scrapes while 100 slowloris sockets hold on.

Method
------
1. Start the stand-in Ollama server at scenario step 4 (``_common.StandIn``) and
   ``kvtop export prometheus --listen 127.0.0.1:0 --host URL --interval 1`` as its own process;
   wait until the three models are exported.
2. Burst: ``--rounds`` times (default 5), ``--scrapers`` threads (default 200) released together by a
   barrier each open a new connection and ``GET /metrics`` (``http.client``, timeout ``--timeout``,
   default 5 s; a scrape past it counts as a timeout). Every scrape is timed from connect to the
   full body and must carry the models.
3. Slowloris: ``--slowloris`` sockets (default 100) each send a partial request head and then
   nothing. While they are held, one client scrapes back to back for ``--seconds`` (default 5),
   new connection per scrape. Then it waits for the server to close the held sockets
   (``CHANNEL_TIMEOUT_S``) and reports how many it closed and after how long.
4. Throughout, a thread samples the exporter's thread count (psutil) every 20 ms.

Reports per phase: scrapes, failures, timeouts, scrapes/s, latency p50/p95/p99/max, peak threads
(and the exporter's threads at rest, the floor). Figures measured for prometheus-client's own
server (which kvtop served with before): 200 scrapers → 3.1 % timed out, p99 3.3 s; 303 threads with slowloris sockets.
Human-readable lines, then one JSON line. Exit code 1 when the exporter did not start.

Measured (2 shared cores, waitress 3.0.2): 200 scrapers x 5 rounds: 1000/1000 ok, 0 timeouts,
751 scrapes/s, p50 113 ms, p95 303 ms, p99 361 ms, max 416 ms, threads 11 at rest and at peak.
With 100 slowloris sockets held: 2120/2120 ok, 424 scrapes/s, p50 1.5 ms, p99 10 ms, threads 11 →
12; all 100 sockets closed by the server, median after 12.0 s (before the request deadline and the
per-client cap of ``kvtop.export.httpguard``).
With the slow-client rules (defaults, other work on the machine): 200 x 5: 1000/1000 ok, p99
175 ms, threads 11; 100 slowloris sockets: 4708/4708 ok, p50 0.7 ms, all 100 closed by the
server (median 5.0 s: the first check after the 5 s phase); 600 tricklers (each reconnecting at
its next 0.5 s round once closed): the exporter served 3475/3475 scrapes from 127.0.0.2 (p50
1.07 ms, p99 6.9 ms); waitress without the rules 0/1 (timed out at 5 s).

5. Trickle (``--tricklers``, default 600; Linux): that many slow clients from 127.0.0.1 each trickle
   a request head a byte every 0.5 s (each byte used to reset waitress's idle timer) and
   reconnect as soon as they are closed, while one scraper from 127.0.0.2 scrapes back to back for
   ``--seconds``: against the exporter, then, in the same run, against waitress as the exporter ran
   it before its slow-client rules (the floor).

Usage: ``python benchmarks/export_load.py [--scrapers 200] [--rounds 5] [--slowloris 100] [--seconds 5]
[--tricklers 600]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, StandIn, kvtop_command

LISTENING = re.compile(r"serving Prometheus metrics on (http://\S+/metrics)")
MODEL_NEEDLE = b'model="gemma4:latest"'


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values`` in ms, nearest rank."""
    if not values:
        return float("nan")
    s = sorted(values)
    return round(1000 * s[min(len(s) - 1, max(0, round(q * len(s)) - 1))], 2)


def scrape(
    host: str, port: int, timeout_s: float, *, source: str | None = None, needle: bytes = MODEL_NEEDLE
) -> tuple[str, float]:
    """One scrape on a new connection (from ``source`` when given): (``ok`` / ``timeout`` /
    ``error: …``, seconds)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s, source_address=(source, 0) if source else None)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read()
        ok = r.status == 200 and needle in body
        return ("ok" if ok else f"error: HTTP {r.status}"), time.perf_counter() - t0
    except (TimeoutError, socket.timeout):
        return "timeout", time.perf_counter() - t0
    except OSError as exc:
        return f"error: {exc}", time.perf_counter() - t0
    finally:
        conn.close()


def phase_report(
    name: str, results: list[tuple[str, float]], wall_s: float, peak: int | None, floor: int | None
) -> dict:
    """Counts and latencies of one phase (printed and returned); ``peak``/``floor`` threads, None: not sampled."""
    lat = [s for r, s in results if r == "ok"]
    out = {
        "scrapes": len(results),
        "ok": len(lat),
        "timeouts": sum(r == "timeout" for r, _ in results),
        "errors": sum(r.startswith("error") for r, _ in results),
        "scrapes_per_s": round(len(lat) / wall_s, 1) if wall_s > 0 else None,
        "p50_ms": pct(lat, 0.50),
        "p95_ms": pct(lat, 0.95),
        "p99_ms": pct(lat, 0.99),
        "max_ms": round(1000 * max(lat), 2) if lat else None,
        "threads_peak": peak,
        "threads_at_rest": floor,
    }
    print(
        f"{name}: {out['ok']}/{out['scrapes']} ok, {out['timeouts']} timed out, {out['errors']} errors; "
        f"{out['scrapes_per_s']} scrapes/s; p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms, "
        f"p99 {out['p99_ms']} ms, max {out['max_ms']} ms"
        + (f"; threads {floor} at rest, peak {peak}" if peak is not None else "")
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrapers", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--slowloris", type=int, default=100)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument(
        "--tricklers",
        type=int,
        default=600,
        help="slow clients trickling a request head from 127.0.0.1 (0: skip; Linux loopback)",
    )
    args = p.parse_args()

    with StandIn(step=4) as standin:
        exporter = subprocess.Popen(
            [
                *kvtop_command(),
                "export",
                "prometheus",
                "--listen",
                "127.0.0.1:0",
                "--host",
                standin.url,
                "--interval",
                "1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO_ROOT),
        )
        try:
            lines: queue.Queue[str] = queue.Queue()
            assert exporter.stderr is not None
            stderr = exporter.stderr
            threading.Thread(target=lambda: [lines.put(x) for x in stderr], daemon=True).start()
            url = None
            deadline = time.monotonic() + 15
            while url is None and time.monotonic() < deadline:
                try:
                    m = LISTENING.search(lines.get(timeout=1))
                except queue.Empty:
                    continue
                url = m.group(1) if m else None
            if url is None:
                print("the exporter did not start")
                return 1
            u = urlsplit(url)
            host, port = u.hostname or "127.0.0.1", u.port or 0
            while scrape(host, port, 5)[0] != "ok":
                if time.monotonic() > deadline + 10:
                    print("the exporter never exported the stand-in's models")
                    return 1
                time.sleep(0.05)
            proc = psutil.Process(exporter.pid)
            floor = proc.num_threads()
            peak = [floor]
            watching = threading.Event()

            def watch() -> None:
                while not watching.is_set():
                    try:
                        peak[0] = max(peak[0], proc.num_threads())
                    except psutil.Error:
                        return
                    time.sleep(0.02)

            print(f"exporter pid {exporter.pid}: {floor} threads at rest")

            # -- burst ---------------------------------------------------------------------------
            threading.Thread(target=watch, daemon=True).start()
            burst: list[tuple[str, float]] = []
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.scrapers) as pool:
                for _ in range(args.rounds):
                    barrier = threading.Barrier(args.scrapers)

                    def one(_: int, barrier: threading.Barrier = barrier) -> tuple[str, float]:
                        barrier.wait(30)
                        return scrape(host, port, args.timeout)

                    burst.extend(pool.map(one, range(args.scrapers)))
            burst_wall = time.perf_counter() - t0
            watching.set()
            time.sleep(0.05)
            report = {
                "burst": phase_report(
                    f"{args.scrapers} concurrent scrapers x {args.rounds}", burst, burst_wall, peak[0], floor
                )
            }

            # -- slowloris -----------------------------------------------------------------------
            time.sleep(1.0)
            floor2 = proc.num_threads()
            peak[0] = floor2
            watching.clear()
            threading.Thread(target=watch, daemon=True).start()
            held: list[socket.socket] = []
            for _ in range(args.slowloris):
                s = socket.create_connection((host, port), timeout=5)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                held.append(s)
            t_held = time.monotonic()
            results: list[tuple[str, float]] = []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                results.append(scrape(host, port, args.timeout))
            loris_wall = time.perf_counter() - t0
            threads_with = proc.num_threads()
            report["slowloris"] = phase_report(
                f"one scraper while {args.slowloris} slowloris sockets are held", results, loris_wall, peak[0], floor2
            )
            closed: list[float] = []
            for s in held:
                s.settimeout(max(0.1, t_held + 60 - time.monotonic()))
                try:
                    if s.recv(1) == b"":
                        closed.append(time.monotonic() - t_held)
                except (TimeoutError, socket.timeout):
                    pass
                except ConnectionResetError:
                    closed.append(time.monotonic() - t_held)
                s.close()
            watching.set()
            report["slowloris"].update(
                {
                    "threads_while_held": threads_with,
                    "closed_by_server": len(closed),
                    "closed_after_s": round(statistics.median(closed), 1) if closed else None,
                }
            )
            print(
                f"slowloris: {len(closed)}/{len(held)} sockets closed by the server, median after "
                f"{report['slowloris']['closed_after_s']} s; {threads_with} threads while they were held"
            )
            if args.tricklers and sys.platform.startswith("linux"):
                report["trickle"] = trickle_phase(host, port, args)
            print(json.dumps(report))
        finally:
            exporter.terminate()
            try:
                exporter.wait(10)
            except subprocess.TimeoutExpired:
                exporter.kill()
                exporter.wait()
    return 0


def trickle_phase(host: str, port: int, args: argparse.Namespace) -> dict:
    """``--tricklers`` slow clients from 127.0.0.1, each trickling a request head a byte every
    0.5 s and reconnecting as soon as it is closed, while one scraper from 127.0.0.2 scrapes back
    to back for ``--seconds``: against the exporter, then against waitress as the exporter ran it
    before its slow-client rules (the floor, in this process, same settings otherwise)."""
    from prometheus_client import CollectorRegistry, Gauge
    from waitress.server import create_server

    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))  # the tests' Trickler
    from kvtop.export.http_server import make_wsgi
    from tests.integration.test_exporter_slowloris import Trickler

    def attacked(h: str, p: int, needle: bytes) -> tuple[list[tuple[str, float]], float, int]:
        with Trickler(h, p, ["127.0.0.1"], args.tricklers) as t:
            while t.ticks < 3:  # every slow client opened and trickling
                time.sleep(0.05)
            results: list[tuple[str, float]] = []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                results.append(scrape(h, p, args.timeout, source="127.0.0.2", needle=needle))
            return results, time.perf_counter() - t0, t.closed

    out: dict = {}
    results, wall, closed = attacked(host, port, MODEL_NEEDLE)
    out["exporter"] = phase_report(
        f"scraper from 127.0.0.2 while {args.tricklers} clients trickle (exporter)", results, wall, None, None
    )
    out["exporter"]["tricklers_closed"] = closed
    registry = CollectorRegistry()
    Gauge("kvtop_floor_up", "floor", registry=registry).set(1)
    plain = create_server(
        make_wsgi(registry),
        listen="127.0.0.1:0",
        threads=8,
        backlog=1024,
        channel_timeout=10,
        cleanup_interval=2,
        connection_limit=512,
        max_request_header_size=16 * 1024,
        asyncore_use_poll=True,
    )
    threading.Thread(target=plain.run, daemon=True).start()
    # left serving until the benchmark exits (closing its socket under its running loop only adds a traceback)
    results, wall, closed = attacked("127.0.0.1", int(plain.effective_port), b"kvtop_floor_up 1.0")
    out["unguarded_waitress"] = phase_report(
        f"scraper from 127.0.0.2 while {args.tricklers} clients trickle (waitress without the rules)",
        results,
        wall,
        None,
        None,
    )
    out["unguarded_waitress"]["tricklers_closed"] = closed
    return out


if __name__ == "__main__":
    sys.exit(main())
