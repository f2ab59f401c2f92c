"""Cost of the server view's traffic aggregates (``kvtop.model.traffic.add_events``): per access
line and per batch, at several batch sizes and after a long run (the bounded windows full), and the
size of the state it keeps. Prints human-readable lines and, last, one JSON object.

    python benchmarks/traffic_cost.py [--lines 200000]
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import time
from datetime import datetime, timedelta

from kvtop.logparse.events import GinRequest
from kvtop.model.traffic import Traffic, add_events


def events(n: int, seed: int = 1) -> list[GinRequest]:
    rng = random.Random(seed)
    start = datetime(2026, 5, 1, 12, 0, 0)
    paths = ["/api/generate", "/api/chat", "/v1/chat/completions", "/api/embed", "/api/tags", "/api/ps"]
    out = []
    for i in range(n):
        t = start + timedelta(seconds=i // 50)
        out.append(
            GinRequest(
                i + 1,
                t,
                "raw",
                rng.choice([200] * 18 + [404, 503]),
                rng.lognormvariate(0, 1.5),
                "POST",
                rng.choice(paths) if rng.random() > 0.01 else f"/probe/{i}",
                f"10.0.{rng.randrange(4)}.{rng.randrange(256)}",
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    args = ap.parse_args()
    evs = events(args.lines)
    results = {}
    for batch in (10, 100, 1000, 10_000):
        t = Traffic()
        t0 = time.perf_counter()
        batches = 0
        for k in range(0, len(evs), batch):
            t = add_events(t, evs[k : k + batch])
            batches += 1
        dt = time.perf_counter() - t0
        per_line_us = dt / len(evs) * 1e6
        per_batch_ms = dt / batches * 1e3
        results[batch] = {"per_line_us": round(per_line_us, 2), "per_batch_ms": round(per_batch_ms, 3)}
        print(
            f"batch {batch:>6}: {per_line_us:7.2f} µs per line, {per_batch_ms:8.3f} ms per batch "
            f"({len(evs):,} lines, {batches:,} batches)"
        )
    state_bytes = len(pickle.dumps(t))
    latencies = sum(len(e.latencies_s) for e in t.endpoints)
    print(
        f"state after {t.requests:,} requests: {len(t.endpoints)} endpoints, {len(t.clients)} clients, "
        f"{latencies:,} latencies kept, {len(t.seconds)} seconds kept, {state_bytes:,} B pickled"
    )
    print(
        json.dumps(
            {
                "lines": len(evs),
                "batches": results,
                "endpoints": len(t.endpoints),
                "clients": len(t.clients),
                "latencies_kept": latencies,
                "state_pickled_bytes": state_bytes,
            }
        )
    )


if __name__ == "__main__":
    main()
