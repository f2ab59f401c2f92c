"""GPU source: NVIDIA through NVML (``pynvml``), AMD and Intel through sysfs, Apple Silicon through
``ioreg``, system memory through psutil.

Unified memory (the GPU shares system RAM): NVIDIA GB10 (DGX Spark) and Jetson answer
``NVMLError_NotSupported`` for memory info; kvtop then gives the device the system's RAM figures
(psutil: ``/proc/meminfo``) and flags it ``unified_memory``. Apple Silicon GPUs always share RAM:
``ioreg -r -d 1 -w 0 -c AGXAccelerator`` (no sudo) gives what the GPU holds ("In use system
memory"), what its driver allocated ("Alloc system memory") and its utilization ("Device
Utilization %"), psutil the RAM.

Every NVML call goes through ``nvml_query``: a field the driver does not support becomes None,
never an exception. Only errors that mean "NVML is gone" (library missing, driver not loaded,
driver/library mismatch, uninitialised) or "this GPU is gone" (lost, reset required) leave it,
as ``NvmlUnavailable`` / ``GpuLost``, and ``GpuSource`` turns those into a snapshot that says so
in plain words. The next sample tries again, so kvtop recovers when the driver comes back.

``GpuSource.sample()`` runs the blocking reads in a thread (``asyncio.to_thread``); nothing here
imports Textual or Rich.

This module is :class:`GpuSource` and the system-memory read; the readers of each kind of GPU are
beside it: NVML (``gpu_nvml``), AMD and Intel sysfs (``gpu_sysfs``), Apple ioreg (``gpu_apple``).
"""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvtop.model.gpu_snapshots import GpuBackend, GpuDevice, GpuProblem, GpuSnapshot, SystemMemory
from kvtop.sources.gpu_apple import IOREG_COMMAND, IOREG_TIMEOUT_S, read_apple_ioreg
from kvtop.sources.gpu_nvml import (
    NVML_TEMPERATURE_GPU,
    GpuLost,
    NvmlFatal,
    _int,
    _merge_processes,
    _percent,
    _text,
    init_status,
    nvml_query,
)
from kvtop.sources.gpu_sysfs import read_amd_sysfs, read_intel_sysfs

STATUS_NO_PYNVML = "GPU telemetry: not available (the nvidia-ml-py package, module pynvml, is not installed)"


UNIFIED_NVML_NOTE = (
    "NVML reports no memory for this GPU (Not Supported): it shares system RAM (unified memory,"
    " as on GB10 / DGX Spark and Jetson); total and available are the system's (/proc/meminfo)"
)


def read_system_memory(psutil_module: Any) -> SystemMemory | None:
    """RAM and swap from psutil; None when it cannot tell."""
    if psutil_module is None:
        return None
    ram = swap = None
    try:
        ram = psutil_module.virtual_memory()
    except Exception:  # noqa: BLE001, S110 - an odd /proc must not cost the GPU sample
        pass
    try:
        swap = psutil_module.swap_memory()
    except Exception:  # noqa: BLE001, S110 - likewise
        pass
    if ram is None and swap is None:
        return None
    return SystemMemory(
        ram_total_bytes=_int(getattr(ram, "total", None)),
        ram_available_bytes=_int(getattr(ram, "available", None)),
        ram_used_bytes=_int(getattr(ram, "used", None)),
        swap_total_bytes=_int(getattr(swap, "total", None)),
        swap_used_bytes=_int(getattr(swap, "used", None)),
    )


class GpuSource:
    """Samples every GPU once per call; never raises, always returns a ``GpuSnapshot``.

    Args:
        nvml: A ``pynvml``-like module (tests pass a fake); None imports ``pynvml`` lazily.
        sysfs_root: Where ``class/drm`` lives (tests build a fake tree in ``tmp_path``).
        proc_root: Where ``<pid>/fdinfo`` lives, for Intel GPUs' VRAM use from DRM fdinfo
            (``gpu_fdinfo``); None: not read.
        platform: ``sys.platform`` (tests pass ``darwin``).
        psutil_module: The ``psutil`` module or a fake; None imports it.
        clock: Wall-clock time for ``taken_at``.
        amd: Read AMD and Intel GPUs from sysfs when NVML has none.
        ioreg: macOS: returns ``ioreg -r -d 1 -w 0 -c AGXAccelerator``'s output (tests pass recorded
            output); it may raise ``OSError`` (no ``ioreg``) or ``subprocess.SubprocessError``.
            None runs the command (``IOREG_TIMEOUT_S`` deadline).
    """

    def __init__(
        self,
        *,
        nvml: Any = None,
        sysfs_root: Path | str = "/sys",
        proc_root: Path | str | None = "/proc",
        platform: str | None = None,
        psutil_module: Any = None,
        clock: Callable[[], float] = time.time,
        amd: bool = True,
        ioreg: Callable[[], str] | None = None,
    ) -> None:
        self._ioreg = ioreg
        self._nvml: Any = nvml
        self._import_error: str | None = None
        self._sysfs_root = Path(sysfs_root)
        self._proc_root = Path(proc_root) if proc_root is not None else None
        self._platform = platform if platform is not None else sys.platform
        self._psutil: Any = psutil_module
        self._clock = clock
        self._amd = amd
        self._lock = threading.Lock()
        self._initialized = False
        self._reinit = False
        self._driver_version: str | None = None
        self._seen: dict[str, GpuDevice] = {}
        """Devices seen so far by UUID (or bus id), to report one that vanishes."""

    async def sample(self) -> GpuSnapshot:
        """One complete sample, read in a worker thread."""
        return await asyncio.to_thread(self.sample_sync)

    async def aclose(self) -> None:
        """Shut NVML down (it is initialised again if ``sample`` is called later)."""
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """Blocking ``aclose``."""
        with self._lock:
            self._shutdown()

    def sample_sync(self) -> GpuSnapshot:
        """Blocking ``sample``: never raises."""
        with self._lock:
            now = self._clock()
            system = read_system_memory(self._psutil_module())
            try:
                return self._sample(now, system)
            except Exception as exc:  # noqa: BLE001 - the GPU panel must say why, not crash kvtop
                self._shutdown()
                return GpuSnapshot(
                    taken_at=now,
                    status=f"GPU telemetry: error ({type(exc).__name__}: {exc})",
                    problem="error",
                    system=system,
                )

    # ----------------------------------------------------------------------------------------

    def _psutil_module(self) -> Any:
        if self._psutil is None:
            try:
                self._psutil = importlib.import_module("psutil")
            except ImportError:
                self._psutil = False
        return self._psutil or None

    def _module(self) -> Any:
        if self._nvml is None and self._import_error is None:
            try:
                with warnings.catch_warnings():  # the pynvml shim warns that it is deprecated
                    warnings.simplefilter("ignore")
                    self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                self._import_error = str(exc)
        return self._nvml

    def _shutdown(self) -> None:
        if self._initialized and self._nvml is not None:
            try:
                nvml_query(self._nvml, "nvmlShutdown")
            except NvmlFatal:
                pass
        self._initialized = False

    def _fallback(
        self, now: float, system: SystemMemory | None, status: str, problem: GpuProblem, notes: tuple[str, ...] = ()
    ) -> GpuSnapshot:
        """No NVML: AMD and Intel through sysfs if there are any, otherwise the NVML status."""
        if self._amd and self._platform.startswith("linux"):
            amd, others = read_amd_sysfs(self._sysfs_root)
            intel, intel_notes = read_intel_sysfs(self._sysfs_root, self._proc_root)
            notes = (*notes, *intel_notes)
            vendors = sorted(set(o for o in others if o not in ("NVIDIA", "Intel")))
            if vendors:
                notes = (
                    *notes,
                    f"{', '.join(vendors)} GPU found: not supported (kvtop reads NVIDIA through NVML,"
                    " AMD and Intel through sysfs, Apple through ioreg)",
                )
            devices = [*amd, *(replace(d, index=len(amd) + d.index) for d in intel)]
            if devices:
                kinds = [
                    f"{len(group)} {label} GPU{'s' if len(group) != 1 else ''}"
                    for group, label in ((amd, "AMD"), (intel, "Intel"))
                    if group
                ]
                intel_use = any(d.memory_used_bytes is not None for d in intel)  # from DRM fdinfo (gpu_fdinfo)
                what = (
                    "no per-process GPU memory"
                    if not intel
                    else "AMD: no per-process GPU memory; Intel: VRAM use from DRM fdinfo"
                    if amd and intel_use
                    else "no per-process GPU memory; Intel: VRAM size only"
                    if amd
                    else "VRAM use and per-process memory from DRM fdinfo"
                    if intel_use
                    else "VRAM size only, no use or per-process memory"
                )
                backend: GpuBackend = "sysfs" if amd and intel else "amd-sysfs" if amd else "intel-sysfs"
                return GpuSnapshot(
                    taken_at=now,
                    ok=True,
                    backend=backend,
                    devices=tuple(devices),
                    system=system,
                    status=f"GPU telemetry: {', '.join(kinds)} (sysfs; {what})",
                    notes=notes,
                )
        return GpuSnapshot(taken_at=now, status=status, problem=problem, system=system, notes=notes)

    def _run_ioreg(self) -> str:
        if self._ioreg is not None:
            return self._ioreg()
        done = subprocess.run(
            IOREG_COMMAND,
            capture_output=True,
            text=True,
            timeout=IOREG_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
            errors="replace",
        )
        if done.returncode != 0 and not done.stdout:
            raise subprocess.SubprocessError(f"ioreg exited {done.returncode}: {done.stderr.strip()[:200]}")
        return done.stdout

    def _sample_apple(self, now: float, system: SystemMemory | None) -> GpuSnapshot:
        """macOS: Apple Silicon GPUs through ``ioreg`` (no sudo), unified memory from psutil."""
        try:
            text = self._run_ioreg()
        except FileNotFoundError:
            return GpuSnapshot(
                taken_at=now,
                status="GPU telemetry: not available (the ioreg command is not found)",
                problem="not_supported",
                system=system,
            )
        except subprocess.TimeoutExpired:
            return GpuSnapshot(
                taken_at=now,
                status=f"GPU telemetry: ioreg did not answer within {IOREG_TIMEOUT_S:g} s; kvtop keeps trying",
                problem="error",
                system=system,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return GpuSnapshot(
                taken_at=now,
                status=f"GPU telemetry: ioreg failed ({exc}); kvtop keeps trying",
                problem="error",
                system=system,
            )
        devices = read_apple_ioreg(text, system)
        if not devices:
            return GpuSnapshot(
                taken_at=now,
                status=(
                    "GPU telemetry: no Apple Silicon GPU statistics (ioreg lists no"
                    " AGXAccelerator; an Intel Mac's GPU is not supported)"
                ),
                problem="not_supported",
                system=system,
            )
        n = len(devices)
        return GpuSnapshot(
            taken_at=now,
            ok=True,
            backend="ioreg",
            devices=tuple(devices),
            system=system,
            status=f"GPU telemetry: {n} Apple GPU{'s' if n != 1 else ''} (ioreg; unified memory:"
            " shares system RAM; no per-process GPU memory)",
        )

    def _sample(self, now: float, system: SystemMemory | None) -> GpuSnapshot:
        if self._platform == "darwin":
            return self._sample_apple(now, system)
        nvml = self._module()
        if nvml is None:
            return self._fallback(now, system, STATUS_NO_PYNVML, "no_pynvml")
        if self._reinit:
            self._shutdown()
            self._reinit = False
        if not self._initialized:
            try:
                nvml_query(nvml, "nvmlInit", required=True)
            except NvmlFatal as exc:
                status, problem = init_status(exc.code, exc.text)
                return self._fallback(now, system, status, problem)
            self._initialized = True
            self._driver_version = _text(nvml_query(nvml, "nvmlSystemGetDriverVersion"))
        try:
            return self._read_nvml(nvml, now, system)
        except NvmlFatal as exc:  # the driver went away mid-sample: say so, start over next time
            self._shutdown()
            status, problem = init_status(exc.code, exc.text)
            return self._fallback(now, system, status, problem)

    def _read_nvml(self, nvml: Any, now: float, system: SystemMemory | None) -> GpuSnapshot:
        count = _int(nvml_query(nvml, "nvmlDeviceGetCount"))
        if count is None:
            raise NvmlFatal(None, "nvmlDeviceGetCount failed")
        devices: list[GpuDevice] = []
        for i in range(count):
            try:
                devices.append(self._read_device(nvml, i, system))
            except GpuLost as exc:
                self._reinit = True  # re-enumerate next time: the device may come back
                old = self._seen_at(i)
                devices.append(
                    GpuDevice(
                        index=i,
                        name=old.name if old else None,
                        uuid=old.uuid if old else None,
                        bus_id=old.bus_id if old else None,
                        error=f"GPU is lost (NVML: {exc.text}): the driver lost contact with it;"
                        " kvtop keeps trying (it may need a reset or a reboot)",
                    )
                )
        present = {self._key(d) for d in devices if self._key(d)}
        vanished: list[GpuDevice] = []
        for key, old in self._seen.items():
            if key not in present:
                vanished.append(
                    GpuDevice(
                        index=old.index,
                        name=old.name,
                        uuid=old.uuid,
                        bus_id=old.bus_id,
                        error="vanished: NVML no longer lists this GPU (fell off the bus, unbound or reset)",
                    )
                )
        for d in devices:
            seen_key = self._key(d)
            if seen_key and d.error is None:
                self._seen[seen_key] = d
        lost = [d for d in devices if d.error is not None]
        working = [d for d in devices if d.error is None]
        all_devices = tuple(sorted(devices + vanished, key=lambda d: (d.index, d.error is not None)))
        driver = f", driver {self._driver_version}" if self._driver_version else ""
        n = len(working)
        problem: GpuProblem | None = None
        if count == 0 and not vanished:
            status, problem = "GPU telemetry: NVIDIA driver loaded, but it lists no GPU", "no_devices"
        else:
            status = f"GPU telemetry: {n} NVIDIA GPU{'s' if n != 1 else ''} (NVML{driver})"
            shared = [d for d in working if d.unified_memory]
            if shared:
                status += (
                    f"; GPU {', '.join(str(d.index) for d in shared)} shares system RAM (unified memory:"
                    " memory figures from /proc/meminfo)"
                )
            trouble = [f"GPU {d.index} is lost" for d in lost] + [
                f"GPU {d.index} ({d.name or d.uuid}) vanished" for d in vanished
            ]
            if trouble:
                status += "; " + "; ".join(trouble)
                problem = "lost" if lost else "vanished"
        return GpuSnapshot(
            taken_at=now,
            status=status,
            ok=n > 0,
            backend="nvml",
            problem=problem,
            driver_version=self._driver_version,
            devices=all_devices,
            system=system,
        )

    @staticmethod
    def _key(d: GpuDevice) -> str | None:
        return d.uuid or d.bus_id

    def _seen_at(self, index: int) -> GpuDevice | None:
        return next((d for d in self._seen.values() if d.index == index), None)

    def _read_device(self, nvml: Any, i: int, system: SystemMemory | None = None) -> GpuDevice:
        handle = nvml_query(nvml, "nvmlDeviceGetHandleByIndex", i)
        if handle is None:
            old = self._seen_at(i)
            return GpuDevice(
                index=i,
                name=old.name if old else None,
                uuid=old.uuid if old else None,
                error="not accessible: NVML gives no handle for it (permissions or a bad state)",
            )

        def q(func: str, *args: Any, **kwargs: Any) -> Any:
            return nvml_query(nvml, func, handle, *args, **kwargs)

        name = _text(q("nvmlDeviceGetName"))
        uuid = _text(q("nvmlDeviceGetUUID"))
        pci = q("nvmlDeviceGetPciInfo")
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        reserved: int | None = None
        mem = None
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:  # v2 counts the driver's reserved memory apart, not as free
            mem = q("nvmlDeviceGetMemoryInfo", version=version)
            if mem is not None:
                reserved = _int(getattr(mem, "reserved", None))
        if mem is None:
            mem = q("nvmlDeviceGetMemoryInfo")
        util = q("nvmlDeviceGetUtilizationRates")
        compute = q("nvmlDeviceGetComputeRunningProcesses")
        if compute is None:
            compute = q("nvmlDeviceGetComputeRunningProcesses_v2")
        graphics = q("nvmlDeviceGetGraphicsRunningProcesses")
        if graphics is None:
            graphics = q("nvmlDeviceGetGraphicsRunningProcesses_v2")
        processes = _merge_processes(compute, graphics)
        note: str | None = None
        if processes is None:
            note = "the driver does not list processes on this GPU"
        elif any(p.used_memory_bytes is None for p in processes):
            note = "the driver does not report per-process GPU memory here (Windows WDDM / WSL2)"
        total, used, free = (
            _int(getattr(mem, "total", None)),
            _int(getattr(mem, "used", None)),
            _int(getattr(mem, "free", None)),
        )
        unified = mem is None and system is not None and system.ram_total_bytes is not None
        if unified and system is not None:  # GB10 / DGX Spark, Jetson: NotSupported; the GPU shares RAM
            total, free, used = system.ram_total_bytes, system.ram_available_bytes, system.ram_in_use_bytes
        return GpuDevice(
            index=i,
            vendor="nvidia",
            name=name,
            uuid=uuid,
            bus_id=bus_id,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_free_bytes=free,
            memory_reserved_bytes=reserved,
            unified_memory=unified,
            memory_note=UNIFIED_NVML_NOTE if unified else None,
            gpu_util_percent=_percent(getattr(util, "gpu", None)),
            memory_util_percent=_percent(getattr(util, "memory", None)),
            temperature_c=_int(q("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)),
            power_draw_mw=_int(q("nvmlDeviceGetPowerUsage")),
            power_limit_mw=_int(q("nvmlDeviceGetEnforcedPowerLimit")),
            processes=processes,
            processes_note=note,
        )
