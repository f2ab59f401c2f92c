"""Prometheus exporter benchmark: scrape latency, and polls per interval under concurrent scrapers.

Method
------
1. Start the stand-in Ollama server (``python -m kvtop.demo.server --port 0 --manual --verbose``,
   stderr to a file: one line per request it serves) and jump it to scenario step 4 (three
   models loaded, one spilled).
2. Start ``kvtop export prometheus --listen 127.0.0.1:0 --host URL --interval I`` (the console
   script of this interpreter's environment) as its own process, read the URL it prints, and
   scrape until the three models are exported.
3. Sequential: ``--sequential`` scrapes (default 200) one after the other with one keep-alive
   httpx client; each is timed from request to the full body.
4. Concurrent: ``--scrapers`` threads (default 5), each with its own client, scrape back to back
   for ``--seconds`` (default 10). Every scrape is timed and must carry the models. Over the same
   window the stand-in's request log is read: the ``GET /api/ps`` lines it wrote are the polls
   the exporter made. The exporter's CPU time over the window comes from psutil.

Target: polls per interval stay at 1 whatever the number of scrapers: at most
``seconds / interval + 1`` polls in the window (the +1 is a poll that straddles a window edge).
Prints human-readable lines and, last, one JSON line. Exit code 1 when the exporter did not
start or a scrape failed; a missed target is reported, not an exit code.

Usage: ``python benchmarks/export_scrape.py [--scrapers 5] [--seconds 10] [--interval 1] [--sequential 200]``
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, kvtop_command, summary

LISTENING = re.compile(r"serving Prometheus metrics on (http://\S+/metrics)")
MODEL_NEEDLE = 'model="gemma4:latest"'


def ps_lines(log_path: Path) -> int:
    """``GET /api/ps`` requests the stand-in has logged so far."""
    return log_path.read_text(encoding="utf-8", errors="replace").count('"GET /api/ps ')


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrapers", type=int, default=5)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--sequential", type=int, default=200)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        standin_log = Path(tmp) / "standin.log"
        with standin_log.open("w") as log_file:
            standin = subprocess.Popen(
                [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--manual", "--verbose"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=str(REPO_ROOT))
        exporter: subprocess.Popen[str] | None = None
        try:
            assert standin.stdout is not None
            ready, _, _ = select.select([standin.stdout], [], [], 15)
            line = standin.stdout.readline() if ready else ""
            if not line.startswith("LISTENING "):
                print(f"the stand-in server did not start: {line!r}")
                return 1
            url = line.split(None, 1)[1].strip()
            httpx.post(f"{url}/_standin/advance", json={"to": 4}, timeout=5, trust_env=False)

            exporter = subprocess.Popen(
                [*kvtop_command(), "export", "prometheus", "--listen", "127.0.0.1:0", "--host", url,
                 "--interval", str(args.interval)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                cwd=str(REPO_ROOT))
            lines: queue.Queue[str] = queue.Queue()
            assert exporter.stderr is not None
            stderr = exporter.stderr
            threading.Thread(target=lambda: [lines.put(x) for x in stderr], daemon=True).start()
            t_start = time.monotonic()
            metrics_url = None
            while metrics_url is None and time.monotonic() - t_start < 15:
                try:
                    m = LISTENING.search(lines.get(timeout=1))
                except queue.Empty:
                    continue
                metrics_url = m.group(1) if m else None
            if metrics_url is None:
                print("the exporter did not start")
                return 1
            with httpx.Client(timeout=5, trust_env=False) as client:
                while MODEL_NEEDLE not in client.get(metrics_url).text:
                    if time.monotonic() - t_start > 20:
                        print("the exporter never exported the stand-in's models")
                        return 1
                    time.sleep(0.05)
                t_data = time.monotonic() - t_start
                sequential: list[float] = []
                body_bytes = 0
                for _ in range(args.sequential):
                    t0 = time.perf_counter()
                    r = client.get(metrics_url)
                    sequential.append(time.perf_counter() - t0)
                    body_bytes = len(r.content)

            latencies: list[list[float]] = [[] for _ in range(args.scrapers)]
            failures: list[str] = []
            proc = psutil.Process(exporter.pid)
            cpu0 = sum(proc.cpu_times()[:2])
            polls0 = ps_lines(standin_log)
            t0 = time.monotonic()
            stop_at = t0 + args.seconds

            def scraper(i: int) -> None:
                with httpx.Client(timeout=5, trust_env=False) as c:
                    while time.monotonic() < stop_at:
                        s = time.perf_counter()
                        r = c.get(metrics_url)
                        latencies[i].append(time.perf_counter() - s)
                        if r.status_code != 200 or MODEL_NEEDLE not in r.text:
                            failures.append(f"HTTP {r.status_code}")

            threads = [threading.Thread(target=scraper, args=(i,)) for i in range(args.scrapers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            window = time.monotonic() - t0
            time.sleep(0.2)  # the stand-in writes its log line after it answered
            polls = ps_lines(standin_log) - polls0
            cpu = sum(proc.cpu_times()[:2]) - cpu0
        finally:
            if exporter is not None and exporter.poll() is None:
                exporter.terminate()
                try:
                    exporter.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    exporter.kill()
                    exporter.wait()
            standin.terminate()
            try:
                standin.wait(timeout=5)
            except subprocess.TimeoutExpired:
                standin.kill()
                standin.wait()

    every = [x for per in latencies for x in per]
    allowed = math.floor(window / args.interval) + 1
    per_interval = polls / (window / args.interval)
    verdict = "MEETS" if polls <= allowed else "MISSES"
    conc = summary(every)
    p95 = sorted(every)[int(0.95 * (len(every) - 1))]
    print(f"exporter: first scrape with the models {t_data:.2f} s after start; /metrics body {body_bytes} B")
    print(f"sequential scrapes ({args.sequential}): median {sorted(sequential)[len(sequential) // 2] * 1000:.2f} ms, "
          f"max {max(sequential) * 1000:.2f} ms")
    print(f"{args.scrapers} concurrent scrapers for {window:.1f} s: {len(every)} scrapes "
          f"({len(every) / window:.0f}/s), median {conc['median'] * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms, "
          f"max {conc['max'] * 1000:.2f} ms, failures {len(failures)}")
    print(f"stand-in GET /api/ps in the window: {polls} at interval {args.interval:g} s "
          f"= {per_interval:.2f} per interval (allowed ≤ {allowed}): {verdict}")
    print(f"exporter CPU over the window: {cpu:.2f} s ({cpu / window * 100:.1f}% of one core)")
    print(json.dumps({
        "scrapers": args.scrapers, "window_s": round(window, 2), "interval_s": args.interval,
        "scrapes": len(every), "scrapes_per_s": round(len(every) / window, 1), "failures": len(failures),
        "sequential_s": summary(sequential), "concurrent_s": conc, "concurrent_p95_s": round(p95, 4),
        "polls": polls, "polls_allowed": allowed, "polls_per_interval": round(per_interval, 3),
        "verdict": verdict, "exporter_cpu_s": round(cpu, 3), "body_bytes": body_bytes,
    }))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
