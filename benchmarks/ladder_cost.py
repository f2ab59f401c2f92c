"""What the source ladder costs per poll: deriving every model row with the process sample and the
runners' ``/props`` + ``/slots`` round (runner, requested and service rungs), against the same
rows derived from ``/api/ps`` alone (the floor), measured in the same run, at 3, 100 and 1,000
models, each with its own llama-server runner.

Usage: ``python benchmarks/ladder_cost.py [--repeat 20]``. Prints, per model count, the median
milliseconds per derivation with and without the local rungs (the rows' memo emptied before each:
every row through the ladder), their ratio, and microseconds per model (linear cost shows as a flat
µs/model); then what a poll that changed no row's inputs costs (``state.ROW_MEMO`` gives every row
again, brought to the poll's time) and its share of the full derivation.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvtop.model.gpu_snapshots import ProcSnapshot, RunnerProcess, ServerProcess, ServiceEnv  # noqa: E402
from kvtop.model.logstate import LogState  # noqa: E402
from kvtop.model.slot_snapshots import RunnerProps, RunnerSlots, SlotState, SlotsSnapshot  # noqa: E402
from kvtop.model import state  # noqa: E402
from kvtop.model.state import derive_models  # noqa: E402
from tests.unit.test_alerts import ps_snapshot, row  # noqa: E402


def world(n: int) -> tuple[object, ProcSnapshot, SlotsSnapshot]:
    base = ps_snapshot([row("tiny:latest", 8192, 60_000_000, 50_000_000)])
    (m0,) = base.models
    show0 = base.shows[m0.digest]
    models = tuple(
        dataclasses.replace(
            m0, name=f"tiny:m{i}", digest=f"{i:064x}", size_vram_bytes=50_000_000 if i % 3 == 0 else 60_000_000
        )
        for i in range(n)
    )
    blobs = [f"sha256-{i + 1:064x}" for i in range(n)]
    shows = {
        m.digest: dataclasses.replace(show0, digest=m.digest, name=m.name, model_blob=b) for m, b in zip(models, blobs)
    }
    snap = dataclasses.replace(base, models=models, shows=MappingProxyType(shows))
    env = ServiceEnv(
        values=MappingProxyType({"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_NUM_PARALLEL": "2"}), source="/proc/1/environ"
    )
    runners = tuple(
        RunnerProcess(
            pid=100 + i,
            kind="llama-server",
            era="v0.30+",
            blob=b,
            port=40000 + i,
            ctx_size=16384,
            parallel=2,
            cache_type_k="q8_0",
            cache_type_v="q8_0",
            flash_attn="on",
            ppid=1,
            server_pid=1,
        )
        for i, b in enumerate(blobs)
    )
    procs = ProcSnapshot(taken_at=1.0, servers=(ServerProcess(1, "ollama", ("ollama", "serve"), env),), runners=runners)
    slots = SlotsSnapshot(
        2.0,
        tuple(
            RunnerSlots(
                r.pid,
                r.port or 0,
                r.blob,
                16384,
                (SlotState(0, 8192, False), SlotState(1, 8192, False)),
                props=RunnerProps(8192, 2, None, "b10488"),
            )
            for r in runners
        ),
    )
    return snap, procs, slots


def median_ms(fn, repeat: int, *, memo: bool = False) -> float:  # type: ignore[no-untyped-def]
    """Median wall ms of ``fn()``; the rows' memo is emptied before each call unless ``memo``."""
    times = []
    for _ in range(repeat):
        if not memo:
            state.ROW_MEMO.clear()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    log = LogState()
    print(
        f"{'models':>7} {'floor ms':>9} {'ladder ms':>10} {'ratio':>6} {'µs/model':>9} {'unchanged ms':>13} {'share':>6}"
    )
    for n in (3, 100, 1000):
        snap, procs, slots = world(n)
        floor = median_ms(lambda: derive_models(snap, log, None, None, {}), args.repeat)  # type: ignore[arg-type]
        full = median_ms(lambda: derive_models(snap, log, procs, slots, {}), args.repeat)  # type: ignore[arg-type]
        rows = derive_models(snap, log, procs, slots, {})  # type: ignore[arg-type]
        assert all(v.kv_type.source == "requested" and v.parallel.source == "runner" for v in rows)
        polls = iter(range(1, 10**9))  # each poll a new snapshot time, the same rows, runners and answers
        derived0 = state.ROW_MEMO.derived
        same = median_ms(
            lambda: derive_models(
                dataclasses.replace(snap, taken_at=snap.taken_at + next(polls)),  # type: ignore[arg-type]
                log,
                procs,
                slots,
                {},
                rows,
            ),
            args.repeat,
            memo=True,
        )
        assert state.ROW_MEMO.derived == derived0, "an unchanged poll derived rows again"
        print(
            f"{n:>7} {floor:>9.2f} {full:>10.2f} {full / floor:>6.2f} {full * 1000 / n:>9.1f} {same:>13.2f}"
            f" {same / full:>6.2f}"
        )


if __name__ == "__main__":
    main()
