"""The demo's machine: ``kvtop --demo`` shows the scenario's GPU, RAM and processes, none of the host's.

Without this, the GPU line of the demo read this machine's NVML and RAM (moving with whatever
else runs here) and the process table (a real ``ollama serve`` on the host would show up as the
demo server's environment). The stand-in serves its scenario's machine at ``GET
/_standin/machine`` (``kvtop.demo.server``, document built by ``kvtop.demo.gpusim.machine_doc``):
RAM in use grows by what a spilled model holds in system RAM, as it would on a real server, and a
scenario with ``machine.gpu`` has one simulated NVIDIA GPU (memory, utilization, power, the
runners of the loaded models and another user's process on it). :class:`DemoMachineSource` turns
it into the ``GpuSnapshot`` NVML would give (``GpuSourceLike``), :class:`DemoProcSource` into the
``ProcSnapshot`` of the process table (``ProcSourceLike``), both labelled DEMO.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from types import MappingProxyType
from typing import Any

import httpx

from kvtop.model.gpu_snapshots import (
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    PidNamespace,
    ProcSnapshot,
    ProcessInfo,
    RunnerProcess,
    ServerProcess,
    SystemMemory,
)

__all__ = ["DEMO_GPU_STATUS", "DEMO_NO_GPU_STATUS", "DemoMachineSource", "DemoProcSource", "NoProcSource"]

DEMO_GPU_STATUS = "GPU telemetry: DEMO, a GPU simulated by the stand-in (this machine's GPU is not read)"
DEMO_NO_GPU_STATUS = "GPU telemetry: none in the demo (no GPU is read)"
"""The status when the scenario's machine has no GPU (or the stand-in does not answer)."""


class DemoMachineSource:
    """A ``GpuSourceLike`` over the stand-in's ``GET /_standin/machine``: the scenario's GPU and RAM.

    ``sample()`` never raises: without an answer (or a scenario without a machine) the snapshot has
    no device and ``system`` None. The last document is kept for :class:`DemoProcSource`.
    """

    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        self._url = url.rstrip("/") + "/_standin/machine"
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)
        self.last_doc: dict[str, Any] | None = None

    async def sample(self) -> GpuSnapshot:
        """The demo machine now: its GPU (sizes in bytes, power in mW) and RAM."""
        system: SystemMemory | None = None
        doc: dict[str, Any] | None = None
        try:
            answer = await self._client.get(self._url)
            if answer.status_code == 200:
                doc = answer.json()
                total, used = int(doc["ram_total"]), int(doc["ram_used"])
                system = SystemMemory(
                    ram_total_bytes=total,
                    ram_used_bytes=used,
                    ram_available_bytes=max(0, total - used),
                    swap_total_bytes=0,
                    swap_used_bytes=0,
                )
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            system, doc = None, None
        self.last_doc = doc
        gpu = doc.get("gpu") if doc is not None else None
        if not isinstance(gpu, dict):
            return GpuSnapshot(taken_at=time.time(), status=DEMO_NO_GPU_STATUS, problem="not_supported", system=system)
        try:
            device = GpuDevice(
                index=0,
                vendor="nvidia",
                name=f"{gpu['name']} (DEMO)",
                uuid="GPU-DEMO-0000",
                bus_id="00000000:01:00.0",
                memory_total_bytes=int(gpu["memory_total"]),
                memory_used_bytes=int(gpu["memory_used"]),
                memory_free_bytes=int(gpu["memory_free"]),
                gpu_util_percent=int(gpu["gpu_util"]),
                memory_util_percent=int(gpu["memory_util"]),
                temperature_c=int(gpu["temperature_c"]),
                power_draw_mw=int(gpu["power_draw_mw"]),
                power_limit_mw=int(gpu["power_limit_mw"]),
                processes=tuple(GpuProcess(int(p["pid"]), int(p["gpu_bytes"])) for p in gpu["processes"]),
            )
        except (KeyError, TypeError, ValueError):
            return GpuSnapshot(taken_at=time.time(), status=DEMO_NO_GPU_STATUS, problem="error", system=system)
        return GpuSnapshot(
            taken_at=time.time(),
            status=DEMO_GPU_STATUS,
            ok=True,
            backend="nvml",
            driver_version="DEMO",
            devices=(device,),
            system=system,
        )

    def procs_source(self) -> DemoProcSource:
        """The process table that goes with this machine (read from the same answers)."""
        return DemoProcSource(self)

    async def aclose(self) -> None:
        await self._client.aclose()


class DemoProcSource:
    """A ``ProcSourceLike`` over the demo machine's processes (``GET /_standin/machine``'s
    ``processes``): the simulated ``ollama serve``, one llama-server runner per loaded model (its
    command line read as the real process source reads one) and other users' processes."""

    def __init__(self, machine: DemoMachineSource) -> None:
        self._machine = machine

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        """The demo's process table as of the machine's last answer (empty before one)."""
        from kvtop.sources.proc_cmdline import classify_cmdline, runner_process

        doc = self._machine.last_doc or {}
        servers: list[ServerProcess] = []
        runners: list[RunnerProcess] = []
        infos: dict[int, ProcessInfo] = {}
        for p in doc.get("processes") or ():
            try:
                pid, argv = int(p["pid"]), tuple(str(a) for a in p["cmdline"])
                user, name, rss = str(p["user"]), str(p["name"]), int(p["rss"])
            except (KeyError, TypeError, ValueError):
                continue
            infos[pid] = ProcessInfo(pid=pid, user=user, name=name, cmdline=argv, rss_bytes=rss)
            c = classify_cmdline(argv)
            if c is not None and c.kind == "server":
                servers.append(ServerProcess(pid=pid, user=user, cmdline=argv))
            elif c is not None and c.kind == "runner" and c.runner_kind is not None:
                ppid = p.get("ppid") if isinstance(p.get("ppid"), int) else None
                runners.append(
                    runner_process(pid, c, ppid=ppid, server_pid=ppid, user=user, rss_bytes=rss, cmdline=argv)
                )
        wanted = {
            pid: infos.get(pid, ProcessInfo(pid=pid, visible=False, note="no such process in the demo"))
            for pid in gpu_pids
        }
        return ProcSnapshot(
            taken_at=time.time(),
            servers=tuple(servers),
            runners=tuple(runners),
            processes=MappingProxyType(wanted),
            namespace=PidNamespace(private=False),
        )

    async def aclose(self) -> None:
        return None


class NoProcSource:
    """A ``ProcSourceLike`` that sees no process: the demo's server and runners are not on this machine."""

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        return ProcSnapshot(taken_at=time.time())

    async def aclose(self) -> None:
        return None
