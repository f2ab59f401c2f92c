"""What the dashboard and the exporter need from each source (the real ones in ``sources/`` or a
test fake), and ``GpuWithProcs``, which joins the GPU and process sources the same way for both."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, RunnerProcess
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot


class OllamaSource(Protocol):
    """An Ollama server's poller (``sources.ollama.OllamaClient`` or a fake)."""

    async def sample(self) -> OllamaSnapshot: ...

    async def aclose(self) -> None: ...


class GpuSourceLike(Protocol):
    """This machine's GPU telemetry (``sources.gpu.GpuSource`` or a fake)."""

    async def sample(self) -> GpuSnapshot: ...

    async def aclose(self) -> None: ...


class ProcSourceLike(Protocol):
    """This machine's process table (``sources.procs.ProcSource`` or a fake)."""

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot: ...

    async def aclose(self) -> None: ...


class SlotsSourceLike(Protocol):
    """The local llama-server runners' ``/slots`` (``sources.slots.SlotsSource`` or a fake)."""

    async def sample(self, runners: Sequence[RunnerProcess]) -> SlotsSnapshot: ...

    async def aclose(self) -> None: ...


PROC_REFRESH_S = 5.0
"""Seconds between two full process-table reads while the GPUs' process list is unchanged."""


class GpuWithProcs:
    """A GPU sample and, joined to it, the process table: re-read when the GPUs' processes
    change, else every ``PROC_REFRESH_S`` (a full scan each second is most of an idle kvtop's
    CPU on a busy host). Used by the dashboard and the exporter alike."""

    def __init__(
        self, gpu_source: GpuSourceLike, proc_source: ProcSourceLike, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.gpu_source = gpu_source
        self.proc_source = proc_source
        self._clock = clock
        self._procs: ProcSnapshot | None = None
        self._pids: frozenset[int] = frozenset()
        self._procs_at = 0.0

    async def sample(self) -> tuple[GpuSnapshot, ProcSnapshot]:
        """One GPU sample and the process table that goes with it (never raises for a missing GPU)."""
        gpu = await self.gpu_source.sample()
        pids = frozenset(gpu.pids)
        now = self._clock()
        if self._procs is None or pids != self._pids or now - self._procs_at >= PROC_REFRESH_S:
            self._procs = await self.proc_source.sample(gpu.pids)
            self._pids, self._procs_at = pids, now
        return gpu, self._procs
