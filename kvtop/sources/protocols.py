"""What the dashboard and the exporter need from each source: the real ones in ``sources/``
or a test fake. Typing only; nothing here does I/O."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from kvtop.model.gpu import GpuSnapshot, ProcSnapshot, RunnerProcess
from kvtop.model.slots import SlotsSnapshot
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
