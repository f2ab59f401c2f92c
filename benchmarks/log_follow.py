"""Log following cost: kvtop's CPU while a server log grows at 100, 1,000 and 10,000 lines/s,
against kvtop's own idle and a standard-library log watcher, measured in the same run.

Method
------
1. The stand-in server (scenario step 4: three models, one spilled) and an empty log file.
2. ``kvtop --host URL --log file:LOG --interval 1`` in an 80x24 pty (drained, its bytes counted),
   and the floor: a stdlib watcher that follows the same file (``readline`` every 50 ms, splits
   fields, counts ``msg=`` lines) — what any log tail costs.
3. Windows of ``--seconds`` each: **idle** (nothing written), then one per rate in ``--rates``.
   A writer thread appends real runner lines (a recorded llama-server load of gemma3, the
   Ollama 0.30 scheduler lines and request timings from ``tests/fixtures/logs``, restamped and
   repeated) at the rate, in 20 ms chunks. kvtop's and the floor's CPU over the window
   (``psutil``, user + system), kvtop's RSS at the end, its terminal bytes/s.
4. Prints % of one core per window, the ratio to kvtop's idle and to the floor, the targets
   (1,000 lines/s <= 4x idle; 10,000 lines/s <= 15 % of a core) with MEETS / MISSES.
   The last line is one JSON object.

Usage: ``python benchmarks/log_follow.py [--seconds 20] [--rates 100,1000,10000]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO_ROOT, CpuMeter, PtyApp, StandIn, delta, kvtop_command  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "logs"
LOAD_LOG = FIXTURES / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"
NEEDLE = "qwen3:1.7b-q8_0"
TARGET_1000_VS_IDLE = 4.0
TARGET_10000_PCT = 15.0

FLOOR = r"""
import sys, time
path = sys.argv[1]
f = open(path, "r", encoding="utf-8", errors="replace")
f.seek(0, 2)
count = 0
while True:
    line = f.readline()
    if not line:
        time.sleep(0.05)
        continue
    if "msg=" in line or "|" in line:
        count += len(line.split())
"""


def real_lines() -> list[str]:
    """Real runner lines: one recorded load (its allocation, KV and context lines), then request
    timings and GIN access lines, as a busy server writes them."""
    load = [x for x in LOAD_LOG.read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    gin = '[GIN] 2026/12/01 - 12:00:00 | 200 |  1.234567ms |       127.0.0.1 | POST     "/api/chat"'
    timing = [
        "prompt eval time =      34.12 ms /    12 tokens (    2.84 ms per token,   351.70 tokens per second)",
        "       eval time =     512.55 ms /    64 tokens (    8.01 ms per token,   124.87 tokens per second)",
        "      total time =     546.67 ms /    76 tokens",
    ]
    return load + (timing + [gin]) * 50


class Writer(threading.Thread):
    def __init__(self, path: Path, rate: float, lines: list[str]) -> None:
        super().__init__(daemon=True)
        self.path, self.rate, self.lines = path, rate, lines
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        i = 0
        t0 = time.perf_counter()
        with self.path.open("a", encoding="utf-8") as f:
            while not self.stop.is_set():
                due = int((time.perf_counter() - t0) * self.rate)
                chunk = []
                while self.written < due:
                    chunk.append(self.lines[i % len(self.lines)])
                    i += 1
                    self.written += 1
                if chunk:
                    f.write("\n".join(chunk) + "\n")
                    f.flush()
                time.sleep(0.02)


def window(name: str, seconds: float, meters: dict[str, CpuMeter], app: PtyApp) -> dict[str, Any]:
    start = {n: m.read() for n, m in meters.items()}
    b0 = app.bytes_read
    w0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - w0
    stop = {n: m.read() for n, m in meters.items()}
    out: dict[str, Any] = {"window": name, "seconds": round(wall, 2)}
    for n in meters:
        out[f"{n}_pct_of_one_core"] = round(delta(start[n], stop[n])["total"] / wall * 100, 3)
    out["kvtop_rss_bytes"] = meters["kvtop"].rss()
    out["kvtop_tty_bytes_per_s"] = round((app.bytes_read - b0) / wall, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="window per rate (default 20)")
    ap.add_argument("--rates", default="100,1000,10000", help="lines per second, comma-separated")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    lines = real_lines()
    print(
        f"log following: {' '.join(kvtop_command())} --log file:LOG vs a stdlib watcher; "
        f"{args.seconds:g} s per window, {psutil.cpu_count()} logical CPUs, python {sys.version.split()[0]}"
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, StandIn(step=4) as standin:
        log = Path(tmp) / "server.log"
        log.write_text("", encoding="utf-8")
        app = PtyApp([*kvtop_command(), "--host", standin.url, "--interval", "1", "--log", f"file:{log}"])
        floor = subprocess.Popen([sys.executable, "-c", FLOOR, str(log)])
        try:
            app.start()
            if app.read_until(NEEDLE, args.timeout) is None:
                print("kvtop never showed data")
                return 1
            app.start_drain()
            time.sleep(2)
            meters = {"kvtop": CpuMeter(app.pid), "floor": CpuMeter(floor.pid)}
            idle = window("idle", args.seconds, meters, app)
            results.append(idle)
            print(
                f"  idle        kvtop {idle['kvtop_pct_of_one_core']:6.2f} %  floor "
                f"{idle['floor_pct_of_one_core']:5.2f} %  RSS {idle['kvtop_rss_bytes'] / 2**20:.1f} MiB"
            )
            for rate in rates:
                writer = Writer(log, rate, lines)
                writer.start()
                r = window(f"{rate:g} lines/s", args.seconds, meters, app)
                writer.stop.set()
                writer.join()
                r["lines_written"] = writer.written
                r["vs_idle"] = round(r["kvtop_pct_of_one_core"] / max(idle["kvtop_pct_of_one_core"], 1e-9), 2)
                r["vs_floor"] = round(r["kvtop_pct_of_one_core"] / max(r["floor_pct_of_one_core"], 1e-9), 2)
                verdict = ""
                if rate == 1000:
                    verdict = f"  target <= {TARGET_1000_VS_IDLE:g}x idle: " + (
                        "MEETS" if r["vs_idle"] <= TARGET_1000_VS_IDLE else "MISSES"
                    )
                if rate == 10000:
                    verdict = f"  target <= {TARGET_10000_PCT:g} % of a core: " + (
                        "MEETS" if r["kvtop_pct_of_one_core"] <= TARGET_10000_PCT else "MISSES"
                    )
                print(
                    f"  {rate:>6g}/s    kvtop {r['kvtop_pct_of_one_core']:6.2f} %  floor {r['floor_pct_of_one_core']:5.2f} %"
                    f"  {r['vs_idle']:5.2f}x idle  {r['vs_floor']:6.2f}x floor  RSS {r['kvtop_rss_bytes'] / 2**20:.1f} MiB"
                    f"  tty {r['kvtop_tty_bytes_per_s']:.0f} B/s{verdict}"
                )
                results.append(r)
                time.sleep(2)  # let the last batch settle
            app.quit()
        finally:
            app.close()
            floor.kill()
            floor.wait()
    print(json.dumps({"benchmark": "log_follow", "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
