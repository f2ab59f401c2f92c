"""Key latency benchmark: how long kvtop takes to answer a key at N loaded models, beside the floor.

Method
------
1. Start the stand-in Ollama server in manual mode with a generated one-step scenario of
   ``--models`` models (default 1,000; ``_common.many_models_scenario``: every third spilled).
2. Launch ``kvtop --host URL --interval I`` in a pty of ``--cols`` x ``--rows`` (default
   120x40), read until its first frame shows ``bench-0``, then let it settle ``--settle`` s
   (its polls, the GPU and process samples and the first repaints run meanwhile).
3. Send ``s`` once (sort by size: SIZE's header, ``VRAM+RAM`` with spilled models, takes the
   mark ``▼``; timed as ``first_sort_s``), then ``--keys`` times (default 12): wait a
   pseudo-random 0..interval s (a fixed seed: the keys land at different points of the poll
   cycle, the same ones every run), note where the terminal output stands, send ``S`` (reverse
   the sort: every row moves) and time until the new output shows the header's flipped mark
   (``VRAM+RAM▲``, then ``VRAM+RAM▼``...): the key's effect drawn.
4. The same for the floor (``floor.py``, whose ``s`` reverses its table's sort by NAME; its
   needle is the name of the model that comes first after the sort), in the same run.

Reports min / median / p90 / max of each, kvtop's median against the floor's, and whether
kvtop's p90 is under the target (100 ms at 1,000 models). Human-readable lines, then
one JSON line. Exit code 1 only when an app never showed data or a key was never answered within
``--timeout``.

Usage: ``python benchmarks/key_latency.py [--models 1000] [--keys 12] [--interval 1] [--cols 120 --rows 40]``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PtyApp, StandIn, kvtop_command, many_models_scenario, ratio, strip_ansi, summary
from floor import floor_command

TARGET_P90_S = 0.1
"""Target: kvtop answers a key within this at 1,000 models (90th percentile)."""

SIZE_HEADER = "VRAM+RAM"
"""SIZE's header while a model is spilled (the generated scenario spills every third model)."""


def _wait_new(app: PtyApp, offset: int, needle: str, timeout_s: float) -> float | None:
    """Read until ``needle`` shows in the output after byte ``offset``; the perf_counter then, or None."""
    deadline = time.perf_counter() + timeout_s
    while True:
        with app._lock:  # noqa: SLF001 - the benchmark's own helper class
            tail = bytes(app.raw[offset:])
        now = time.perf_counter()
        if needle in strip_ansi(tail.decode("utf-8", "replace")):
            return now
        if now >= deadline or not app._read_available(min(0.005, deadline - now)):  # noqa: SLF001
            return None


def measure(
    argv: list[str],
    needles: list[str],
    args: argparse.Namespace,
    first: str,
    key: bytes = b"s",
    before: tuple[bytes, str] | None = None,
) -> dict[str, Any]:
    """Launch ``argv`` in a pty, wait for ``first``, send ``before`` (a key and what shows its
    effect, timed as ``first_sort_s``), then time ``len(needles)`` presses of ``key``."""
    app = PtyApp(argv, cols=args.cols, rows=args.rows)
    out: dict[str, Any] = {}
    rng = random.Random(23)
    try:
        t0 = app.start()
        t = app.read_until(first, args.timeout)
        if t is None:
            out["error"] = f"never showed {first!r} within {args.timeout:g} s"
            return out
        out["first_data_frame_s"] = round(t - t0, 3)
        settle_until = time.perf_counter() + args.settle
        while time.perf_counter() < settle_until:
            app._read_available(0.05)  # noqa: SLF001 - keep the pty drained while it settles
        cpu0 = psutil.Process(app.pid).cpu_times()
        if before is not None:
            with app._lock:  # noqa: SLF001
                offset = len(app.raw)
            sent = time.perf_counter()
            app.send(before[0])
            done = _wait_new(app, offset, before[1], args.timeout)
            if done is None:
                out["error"] = f"the first key was not answered ({before[1]!r} never showed) within {args.timeout:g} s"
                return out
            out["first_sort_s"] = round(done - sent, 4)
        latencies: list[float] = []
        for needle in needles:
            wait_until = time.perf_counter() + rng.uniform(0, args.interval)
            while time.perf_counter() < wait_until:
                app._read_available(max(0.0, min(0.02, wait_until - time.perf_counter())))  # noqa: SLF001
            with app._lock:  # noqa: SLF001
                offset = len(app.raw)
            sent = time.perf_counter()
            app.send(key)
            done = _wait_new(app, offset, needle, args.timeout)
            if done is None:
                out["error"] = f"the key was not answered ({needle!r} never showed) within {args.timeout:g} s"
                break
            latencies.append(done - sent)
        cpu1 = psutil.Process(app.pid).cpu_times()
        out["latencies_s"] = [round(x, 4) for x in latencies]
        if latencies:
            ordered = sorted(latencies)
            out.update(summary(latencies))
            out["p90"] = round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4)
        out["cpu_s_during_keys"] = round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 3)
        out["quit_clean"] = app.quit()[1]
    finally:
        app.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=1000, help="models loaded (default 1000)")
    ap.add_argument("--keys", type=int, default=12, help="keys timed per app (default 12)")
    ap.add_argument("--interval", type=float, default=1.0, help="polling interval of both apps (default 1)")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after the first data frame (default 5)")
    ap.add_argument("--timeout", type=float, default=60.0, help="give up on data or a key after S s (default 60)")
    ap.add_argument("--cols", type=int, default=120)
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--no-floor", action="store_true", help="time kvtop alone")
    args = ap.parse_args()

    print(
        f"key latency: {' '.join(kvtop_command())} at {args.models} models, {args.cols}x{args.rows}, "
        f"--interval {args.interval:g}; {args.keys} presses of a sort key each (kvtop 'S', the floor 's'); {psutil.cpu_count() or 1} logical CPUs"
    )
    result: dict[str, Any] = {"benchmark": "key_latency", "models": args.models, "terminal": f"{args.cols}x{args.rows}"}
    with tempfile.TemporaryDirectory() as tmp:
        path = many_models_scenario(args.models, Path(tmp) / "models.json")
        with StandIn(step=0, scenario=str(path)) as standin:
            kv_needles = [f"{SIZE_HEADER}{'▲' if i % 2 == 0 else '▼'}" for i in range(args.keys)]
            result["kvtop"] = measure(
                [*kvtop_command(), "--host", standin.url, "--interval", f"{args.interval:g}"],
                kv_needles,
                args,
                "bench-0",
                key=b"S",
                before=(b"s", f"{SIZE_HEADER}▼"),
            )
            if not args.no_floor:
                last = f"bench-{args.models - 1:04d}"
                floor_needles = [last if i % 2 == 0 else "bench-0000" for i in range(args.keys)]
                result["floor"] = measure(floor_command(standin.url, args.interval), floor_needles, args, "bench-0")
    failed = False
    for name in ("kvtop", "floor"):
        r = result.get(name)
        if r is None:
            continue
        if "error" in r:
            failed = True
            print(f"  {name}: {r['error']}")
        if "median" in r:
            print(
                f"  {name:5}: min {r['min'] * 1000:7.1f} ms  median {r['median'] * 1000:7.1f} ms  "
                f"p90 {r['p90'] * 1000:7.1f} ms  max {r['max'] * 1000:7.1f} ms  "
                f"(CPU {r['cpu_s_during_keys']:.2f} s while timing; first data frame {r['first_data_frame_s']:.2f} s)"
            )
        if "first_sort_s" in r:
            print(f"  {name:5}: first 's' (server order -> by size) {r['first_sort_s'] * 1000:.1f} ms")
    kv = result.get("kvtop", {})
    fl = result.get("floor", {})
    if "median" in kv and "median" in fl:
        result["median_vs_floor"] = ratio(kv["median"], fl["median"])
        print(f"  kvtop's median = {result['median_vs_floor']}x the floor's")
    if "p90" in kv:
        result["meets"] = kv["p90"] <= TARGET_P90_S
        print(
            f"  kvtop p90 {kv['p90'] * 1000:.1f} ms: {'MEETS' if result['meets'] else 'MISSES'}"
            f" (target <= {TARGET_P90_S * 1000:g} ms)"
        )
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
