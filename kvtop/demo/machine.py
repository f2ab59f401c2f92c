"""The demo's machine: ``kvtop --demo`` shows the scenario's RAM and no GPU or process of the host.

Without this, the GPU line of the demo read this machine's NVML and RAM (moving with whatever
else runs here) and the process table (a real ``ollama serve`` on the host would show up as the
demo server's environment). The stand-in serves its scenario's machine at ``GET
/_standin/machine`` (``kvtop.demo.server``): RAM in use grows by what a spilled model holds in
system RAM, as it would on a real server.
"""

from __future__ import annotations

import time
from collections.abc import Collection

import httpx

from kvtop.model.gpu import GpuSnapshot, ProcSnapshot, SystemMemory

__all__ = ["DEMO_GPU_STATUS", "DemoMachineSource", "NoProcSource"]

DEMO_GPU_STATUS = "GPU telemetry: none in the demo (no GPU is read)"


class DemoMachineSource:
    """A ``GpuSourceLike`` over the stand-in's ``GET /_standin/machine``: no GPU, the scenario's RAM."""

    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        self._url = url.rstrip("/") + "/_standin/machine"
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)

    async def sample(self) -> GpuSnapshot:
        """The demo machine's RAM (``system`` None when the stand-in has no machine or does not answer)."""
        system: SystemMemory | None = None
        try:
            answer = await self._client.get(self._url)
            if answer.status_code == 200:
                doc = answer.json()
                total, used = int(doc["ram_total"]), int(doc["ram_used"])
                system = SystemMemory(ram_total_bytes=total, ram_used_bytes=used,
                                      ram_available_bytes=max(0, total - used), swap_total_bytes=0,
                                      swap_used_bytes=0)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            system = None
        return GpuSnapshot(taken_at=time.time(), status=DEMO_GPU_STATUS, problem="not_supported", system=system)

    async def aclose(self) -> None:
        await self._client.aclose()


class NoProcSource:
    """A ``ProcSourceLike`` that sees no process: the demo's server and runners are not on this machine."""

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        return ProcSnapshot(taken_at=time.time())

    async def aclose(self) -> None:
        return None
