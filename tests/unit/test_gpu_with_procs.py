"""GpuWithProcs: the process table is read again only when the GPUs' processes change or
PROC_REFRESH_S has passed (the dashboard and the exporter share it)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess, GpuSnapshot, ProcSnapshot
from kvtop.sources.protocols import PROC_REFRESH_S, GpuWithProcs


class Gpus:
    def __init__(self) -> None:
        self.pids: tuple[int, ...] = (100,)

    async def sample(self) -> GpuSnapshot:
        procs = tuple(GpuProcess(pid=p, used_memory_bytes=1) for p in self.pids)
        return GpuSnapshot(
            taken_at=1.0, status="GPU telemetry: fake", ok=True, devices=(GpuDevice(index=0, processes=procs),)
        )

    async def aclose(self) -> None:
        return None


class Procs:
    def __init__(self) -> None:
        self.asked: list[tuple[int, ...]] = []

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        self.asked.append(tuple(gpu_pids))
        return ProcSnapshot(taken_at=float(len(self.asked)))

    async def aclose(self) -> None:
        return None


def test_process_table_is_read_on_change_or_after_the_refresh_period() -> None:
    now = [0.0]
    gpus, procs = Gpus(), Procs()
    sampler = GpuWithProcs(gpus, procs, clock=lambda: now[0])

    async def run() -> list[float]:
        seen = []
        for step in range(4):  # 0, 1, 2, 3 s: one read, then the same table
            now[0] = float(step)
            _, table = await sampler.sample()
            seen.append(table.taken_at)
        gpus.pids = (100, 200)  # a new process on the GPU: read at once
        _, table = await sampler.sample()
        seen.append(table.taken_at)
        now[0] += PROC_REFRESH_S  # nothing changed for the refresh period: read again
        _, table = await sampler.sample()
        seen.append(table.taken_at)
        return seen

    assert asyncio.run(run()) == [1.0, 1.0, 1.0, 1.0, 2.0, 3.0]
    assert procs.asked == [(100,), (100, 200), (100, 200)]
