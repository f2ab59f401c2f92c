"""What one alert evaluation costs (``kvtop.model.alerts.evaluate``) at 3, 100 and 1,000 loaded
models, a third of them spilled, each with its runner on one nearly full GPU (the world of
``tests/unit/test_alerts_cost.py``), and what the log scan costs on 20,000 retained events.

Usage: ``python benchmarks/alerts_cost.py [--repeat 20]``. Prints, per model count, the median
CPU milliseconds of one evaluation (``time.process_time``) as a dashboard does it every poll
(the GPU's free memory moves a little between samples, so the spill fixes' searches are new
questions to the KV caches), the same state evaluated again (every answer cached), and the first
evaluation with the KV caches cleared; the µs per model, its ratio to the 100-model figure
(flat = linear), and the KV computations one evaluation asks for (calls into ``kv.kv_allocation``
and ``kv.max_num_ctx``, cache hits included). Then the log: a full scan of 20,000 events, the
same log again (memo), and 50 events appended (only those are scanned). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvtop.logparse.parser import parse_lines  # noqa: E402
from kvtop.model import kv  # noqa: E402
from kvtop.model.alerts import log_scan as alert_context  # noqa: E402
from kvtop.model.alerts import evaluate  # noqa: E402
from kvtop.model.views import AppState  # noqa: E402
from tests.unit.test_alerts import LOGS  # noqa: E402
from tests.unit.test_alerts_cost import world  # noqa: E402

TARGET_PER_MODEL_RATIO = 1.5
"""Linear: µs per model at 1,000 models at most this many times the 100-model figure."""


def median_ms(fn: Callable[[int], object], repeat: int, *, gc_paused: bool = False) -> float:
    """Median CPU milliseconds of ``fn(i)`` over ``repeat`` calls (with the garbage collector
    paused during each call when ``gc_paused``: the work itself, without the collector's walks
    over a heap that grows with the models)."""
    times = []
    if gc_paused:
        gc.collect()
    for i in range(repeat):
        if gc_paused:
            gc.disable()
        try:
            t0 = time.process_time()
            fn(i)
            times.append(time.process_time() - t0)
        finally:
            gc.enable()
    return statistics.median(times) * 1000


def with_free(state: AppState, free: int) -> AppState:
    """The state with the GPU's free memory changed (the next GPU sample)."""
    gpu = state.gpu
    assert gpu is not None
    dev = dataclasses.replace(gpu.devices[0], memory_free_bytes=free)
    return dataclasses.replace(state, gpu=dataclasses.replace(gpu, devices=(dev,)))


def count_kv(fn: Callable[[], object]) -> int:
    """Calls into the KV arithmetic while ``fn`` runs (cache hits included)."""
    calls = 0
    originals = {name: getattr(kv, name) for name in ("kv_allocation", "max_num_ctx")}

    def wrap(real: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return real(*args, **kwargs)

        return counted

    for name, real in originals.items():
        setattr(kv, name, wrap(real))
    try:
        fn()
    finally:
        for name, real in originals.items():
            setattr(kv, name, real)
    return calls


def clear_kv_caches() -> None:
    kv.kv_allocation.cache_clear()
    kv.max_num_ctx.cache_clear()


def log_events(n: int) -> tuple[Any, ...]:
    """``n`` events: the corpus logs, parsed as one stream, repeated."""
    lines = [
        line
        for p in sorted(LOGS.glob("*.log"))
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    out: list[Any] = []
    while len(out) < n:
        out.extend(parse_lines(lines * 10))
    return tuple(out[:n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rows: dict[int, dict[str, float]] = {}
    print(
        f"{'models':>7} {'spilled':>7} {'per poll ms':>11} {'same ms':>8} {'cold ms':>8} {'µs/model':>9}"
        f" {'vs 100':>7} {'no-GC µs/m':>10} {'vs 100':>7} {'KV calls':>9} {'KV/model':>9}"
    )
    for n in (3, 100, 1000):
        state = world(n)
        repeat = max(3, args.repeat // (5 if n >= 1000 else 1))
        spilled = sum(a.kind == "spill" for a in evaluate(state))
        base_free = 100_000_000
        polls = [with_free(state, base_free + 4096 * (i + 1)) for i in range(repeat)]
        per_poll = median_ms(lambda i: evaluate(polls[i], polls[i].thresholds), repeat)
        no_gc = median_ms(lambda i: evaluate(polls[i], polls[i].thresholds), repeat, gc_paused=True)
        evaluate(state)
        same = median_ms(lambda i: evaluate(state, state.thresholds), repeat)

        def cold(i: int) -> None:
            clear_kv_caches()
            evaluate(state, state.thresholds)

        cold_ms = median_ms(cold, max(3, repeat // 4))
        calls = count_kv(lambda: evaluate(with_free(state, base_free + 1), state.thresholds))
        rows[n] = {
            "models": n,
            "spilled": spilled,
            "per_poll_ms": round(per_poll, 3),
            "same_state_ms": round(same, 3),
            "cold_ms": round(cold_ms, 3),
            "us_per_model": round(per_poll * 1000 / n, 1),
            "kv_calls": calls,
            "per_poll_gc_paused_ms": round(no_gc, 3),
            "us_per_model_gc_paused": round(no_gc * 1000 / n, 1),
        }
    for n, r in rows.items():
        vs = r["us_per_model"] / rows[100]["us_per_model"]
        vs_work = r["us_per_model_gc_paused"] / rows[100]["us_per_model_gc_paused"]
        r["per_model_vs_100"], r["per_model_gc_paused_vs_100"] = round(vs, 2), round(vs_work, 2)
        print(
            f"{n:>7} {int(r['spilled']):>7} {r['per_poll_ms']:>11.2f} {r['same_state_ms']:>8.2f} {r['cold_ms']:>8.2f}"
            f" {r['us_per_model']:>9.1f} {vs:>7.2f} {r['us_per_model_gc_paused']:>10.1f} {vs_work:>7.2f}"
            f" {int(r['kv_calls']):>9} {r['kv_calls'] / n:>9.1f}"
        )
    kv_ratio = (rows[1000]["kv_calls"] / 1000) / (rows[100]["kv_calls"] / 100)
    linear = rows[1000]["per_model_gc_paused_vs_100"] <= TARGET_PER_MODEL_RATIO and kv_ratio <= TARGET_PER_MODEL_RATIO
    print(
        f"per model at 1,000 models vs 100: KV computations {kv_ratio:.2f}x, CPU {rows[1000]['per_model_vs_100']:.2f}x"
        f" ({rows[1000]['per_model_gc_paused_vs_100']:.2f}x with the garbage collector paused):"
        f" {'MEETS' if linear else 'MISSES'} (target <= {TARGET_PER_MODEL_RATIO:g}x: linear work)"
    )

    events = log_events(20_050)
    head, whole = events[:20_000], events
    tz = world(1, gpu=False).naive_tz
    alert_context._scans.clear()
    full = median_ms(lambda i: (alert_context._scans.clear(), alert_context.scan_log(head, tz)), 5)
    alert_context.scan_log(head, tz)
    memo = median_ms(lambda i: alert_context.scan_log(head, tz), 20)

    def extend(i: int) -> None:
        alert_context._scans.clear()
        alert_context.scan_log(head, tz)
        t0 = time.process_time()
        alert_context.scan_log(whole, tz)
        extended.append(time.process_time() - t0)

    extended: list[float] = []
    for i in range(5):
        extend(i)
    ext_ms = statistics.median(extended) * 1000
    print(
        f"log scan of 20,000 events: full {full:.2f} ms, the same log again {memo:.3f} ms,"
        f" 50 events appended {ext_ms:.2f} ms"
    )
    print(
        json.dumps(
            {
                "benchmark": "alerts_cost",
                "repeat": args.repeat,
                "models": list(rows.values()),
                "per_model_verdict": "MEETS" if linear else "MISSES",
                "log_scan_ms": {"full_20000": round(full, 3), "memo": round(memo, 4), "append_50": round(ext_ms, 3)},
            }
        )
    )


if __name__ == "__main__":
    main()
