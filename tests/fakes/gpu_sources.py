"""Fixed GPU and process sources for app tests (``make_app(..., gpu_source=, proc_source=)``), so
screens and snapshots never depend on the machine's GPUs, processes or RAM."""

from __future__ import annotations

from collections.abc import Collection

from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, SystemMemory
from kvtop.sources.gpu_nvml import STATUS_NO_LIBRARY

GiB = 1024**3

FIXED_SYSTEM = SystemMemory(
    ram_total_bytes=64 * GiB,
    ram_available_bytes=48 * GiB,
    ram_used_bytes=16 * GiB,
    swap_total_bytes=8 * GiB,
    swap_used_bytes=0,
)


def no_gpu_snapshot(taken_at: float = 0.0) -> GpuSnapshot:
    """What ``GpuSource`` gives on a machine without NVIDIA (RAM and swap fixed)."""
    return GpuSnapshot(taken_at=taken_at, status=STATUS_NO_LIBRARY, problem="no_library", system=FIXED_SYSTEM)


class FixedGpuSource:
    """Returns the same ``GpuSnapshot`` on every sample."""

    def __init__(self, snapshot: GpuSnapshot | None = None) -> None:
        self.snapshot = snapshot if snapshot is not None else no_gpu_snapshot()
        self.samples = 0
        self.closed = False

    async def sample(self) -> GpuSnapshot:
        self.samples += 1
        return self.snapshot

    async def aclose(self) -> None:
        self.closed = True


class FixedProcSource:
    """Returns the same ``ProcSnapshot`` on every sample (the PIDs asked for are recorded)."""

    def __init__(self, snapshot: ProcSnapshot | None = None) -> None:
        self.snapshot = snapshot if snapshot is not None else ProcSnapshot(taken_at=0.0)
        self.asked: list[tuple[int, ...]] = []

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        self.asked.append(tuple(gpu_pids))
        return self.snapshot

    async def aclose(self) -> None:
        pass
