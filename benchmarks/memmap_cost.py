"""What the memory map costs per repaint: ``kvtop.model.memmap.memory_map`` (the join) and
``kvtop.ui.widgets.memory_map.map_text`` (the drawing, 158 cells), on the shared two-GPU server of
``tests/fakes/scenario.py`` (3 models, one split and spilled, two foreign processes) and on the
same server with 100 models (copies of the three, each matched to its own runner on GPU 0).

Usage: ``python benchmarks/memmap_cost.py [--repeat 200]``. Prints the median CPU microseconds
(``time.process_time``) of one join and one drawing per world. The app pays the join only when a
new GPU, process or model sample arrives, and the drawing only when the map changed
(``tests/ui/test_memory_map.py`` checks both); a hidden map pays neither. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvtop.model.gpu_snapshots import GpuProcess, ProcSnapshot, RunnerProcess  # noqa: E402
from kvtop.model.memmap import memory_map  # noqa: E402
from kvtop.ui.themes import default_variables  # noqa: E402
from kvtop.ui.widgets.memory_map import map_text  # noqa: E402
from tests.fakes.scenario import shared_sample  # noqa: E402


def _median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e6


def _hundred(gpu, procs, models):  # type: ignore[no-untyped-def]
    """100 models: copies of the three with their own digest, blob, runner PID and 40 MiB on GPU 0."""
    runners = list(procs.runners)
    template = next(r for r in runners if r.blob is not None)
    many, extra_runners, extra_procs = list(models), [], []
    for i in range(97):
        m = models[i % 3]
        blob = f"sha256-{i:064x}"
        many.append(dataclasses.replace(m, name=f"copy{i}:{m.name}", digest=f"{i:064x}", model_blob=blob))
        extra_runners.append(dataclasses.replace(template, pid=50_000 + i, blob=blob, model_arg=blob, ctx_size=None))
        extra_procs.append(GpuProcess(pid=50_000 + i, used_memory_bytes=40 * 1024**2))
    dev0 = gpu.devices[0]
    devices = (dataclasses.replace(dev0, processes=tuple(dev0.processes or ()) + tuple(extra_procs)), *gpu.devices[1:])
    procs = ProcSnapshot(
        taken_at=procs.taken_at,
        servers=procs.servers,
        runners=tuple(runners + extra_runners),
        discovery_pids=procs.discovery_pids,
        processes=procs.processes,
        namespace=procs.namespace,
    )
    assert all(isinstance(r, RunnerProcess) for r in procs.runners)
    return dataclasses.replace(gpu, devices=devices), procs, tuple(many)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    colors = default_variables()
    gpu, procs, models = shared_sample(Path(tempfile.mkdtemp()))
    out = {}
    for label, world in (("3 models", (gpu, procs, models)), ("100 models", _hundred(gpu, procs, models))):
        mm = memory_map(*world)
        segments = sum(len(b.segments) for b in mm.bars)
        join = _median_us(lambda: memory_map(*world), args.repeat)
        draw = _median_us(lambda: map_text(mm, 158, colors, compact=False), args.repeat)
        print(f"{label:>10}: {segments:4d} segments  join {join:8.0f} µs  draw {draw:8.0f} µs")
        out[label] = {"segments": segments, "join_us": round(join), "draw_us": round(draw)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
