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
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvtop.model.gpu import GpuBackend, GpuDevice, GpuProblem, GpuProcess, GpuSnapshot, SystemMemory

# NVML return codes (nvml.h; stable across driver releases)
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

NVML_TEMPERATURE_GPU = 0
_U64_NOT_AVAILABLE = 2**64 - 1
"""``NVML_VALUE_NOT_AVAILABLE`` for unsigned long long fields."""

UNAVAILABLE_CODES = frozenset({
    NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
})
"""Errors after which no NVML call can work until NVML is initialised again."""

LOST_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED})
"""Errors that mean one device is gone."""

AMD_VENDOR_ID = "0x1002"
OTHER_VENDORS = {"0x8086": "Intel", "0x10de": "NVIDIA", "0x106b": "Apple"}

STATUS_NO_LIBRARY = "GPU telemetry: no NVIDIA driver (NVML library not found)"
STATUS_NO_PYNVML = "GPU telemetry: not available (the nvidia-ml-py package, module pynvml, is not installed)"
STATUS_MACOS = "GPU telemetry: not supported on macOS (Apple GPUs have no NVML; kvtop reads NVIDIA and AMD GPUs)"
"""Kept for callers that name it; macOS is now read through ``ioreg`` (:func:`read_apple_ioreg`)."""

INTEL_VENDOR_ID = "0x8086"
IOREG_COMMAND = ("ioreg", "-r", "-d", "1", "-w", "0", "-c", "AGXAccelerator")
"""Apple Silicon's GPU statistics: the AGXAccelerator nodes (one per GPU; subclasses such as
``AGXAcceleratorG13X`` match too), one level deep, lines not cut; no sudo needed."""
IOREG_TIMEOUT_S = 2.0

UNIFIED_NVML_NOTE = ("NVML reports no memory for this GPU (Not Supported): it shares system RAM (unified memory,"
                     " as on GB10 / DGX Spark and Jetson); total and available are the system's (/proc/meminfo)")


class NvmlFatal(Exception):
    """An NVML error that a default value cannot stand in for."""

    def __init__(self, code: int | None, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


class NvmlUnavailable(NvmlFatal):
    """NVML as a whole does not work (library missing, driver not loaded, mismatch…)."""


class GpuLost(NvmlFatal):
    """One device stopped answering (``NVMLError_GpuIsLost``, reset required)."""


def _error_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ calls into the library
        text = ""
    return text or type(exc).__name__


def nvml_query(nvml: Any, func: str, *args: Any, required: bool = False, **kwargs: Any) -> Any:
    """Call ``nvml.<func>(*args, **kwargs)``: the one guarded NVML call (nitop's ``nvmlQuery``).

    Returns the result, or None when the function is missing from this ``pynvml``, the driver
    does not have it (``FunctionNotFound``, ``NVMLLibraryMismatchError``), the device does not
    support it (``NotSupported``) or any other per-field error.

    Raises:
        GpuLost: ``GpuIsLost`` / ``ResetRequired``: the device is gone.
        NvmlUnavailable: NVML itself is unusable (library not found, driver not loaded,
            driver/library mismatch, uninitialised).
        NvmlFatal: Any other NVML error, only when ``required`` (used for ``nvmlInit``).
    """
    fn = getattr(nvml, func, None)
    if not callable(fn):
        if required:
            raise NvmlFatal(None, f"pynvml has no {func}")
        return None
    nvml_error: Any = getattr(nvml, "NVMLError", None)
    mismatch_error: Any = getattr(nvml, "NVMLLibraryMismatchError", None)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - classified below; nothing escapes unclassified
        if isinstance(nvml_error, type) and isinstance(exc, nvml_error):
            code = getattr(exc, "value", None)
            text = _error_text(exc)
            if code in LOST_CODES:
                raise GpuLost(code, text) from None
            if code in UNAVAILABLE_CODES:
                raise NvmlUnavailable(code, text) from None
            if required:
                raise NvmlFatal(code, text) from None
            return None
        if isinstance(mismatch_error, type) and isinstance(exc, mismatch_error):
            if required:
                raise NvmlFatal(None, _error_text(exc)) from None
            return None
        if required:
            raise NvmlFatal(None, f"{type(exc).__name__}: {_error_text(exc)}") from None
        return None  # ctypes/decoding trouble in one field: that field is not available


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = str(value).strip("\x00").strip()
    return text or None


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if n < 0 or n >= _U64_NOT_AVAILABLE:
        return None
    return n


def _percent(value: Any) -> int | None:
    n = _int(value)
    return n if n is not None and n <= 100 else None


def init_status(code: int | None, text: str) -> tuple[str, GpuProblem]:
    """The panel's line and the problem kind for an NVML initialisation failure."""
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return STATUS_NO_LIBRARY, "no_library"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "GPU telemetry: NVIDIA driver not loaded (NVML: Driver Not Loaded)", "no_driver"
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return ("GPU telemetry: NVIDIA driver/library version mismatch (the kernel module and libnvidia-ml"
                " differ, usually after a driver upgrade: reboot or reload the nvidia module)"), "version_mismatch"
    if code == NVML_ERROR_NO_PERMISSION:
        return "GPU telemetry: no permission to use the NVIDIA driver (NVML: Insufficient Permissions)", "no_permission"
    if code in LOST_CODES:
        return f"GPU telemetry: a GPU is lost (NVML: {text}); kvtop keeps trying", "lost"
    if code == NVML_ERROR_UNINITIALIZED:
        return "GPU telemetry: NVML stopped working (Uninitialized); kvtop keeps trying", "error"
    return f"GPU telemetry: NVML failed ({text}); kvtop keeps trying", "error"


def _read_file(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_file(path)
    if text is None:
        return None
    try:
        return int(text.split()[0], 0) if text else None
    except (ValueError, IndexError):
        return None


def _card_dirs(sysfs_root: Path) -> list[Path]:
    drm = sysfs_root / "class" / "drm"
    try:
        entries = list(drm.iterdir())
    except OSError:
        return []
    cards = [e for e in entries if e.name.startswith("card") and e.name[4:].isdigit()]
    return sorted(cards, key=lambda e: int(e.name[4:]))


def read_amd_sysfs(sysfs_root: Path) -> tuple[list[GpuDevice], list[str]]:
    """AMD GPUs under ``<sysfs_root>/class/drm/card*/device`` and the vendors of any other cards.

    ``mem_info_vram_total``/``mem_info_vram_used`` are bytes, ``gpu_busy_percent`` and
    ``mem_busy_percent`` percent; hwmon ``temp1_input`` is m°C and ``power1_average`` (or
    ``power1_input``) and ``power1_cap`` µW. sysfs has no per-process VRAM, so ``processes``
    is None.
    """
    devices: list[GpuDevice] = []
    others: list[str] = []
    for card in _card_dirs(sysfs_root):
        dev = card / "device"
        vendor = (_read_file(dev / "vendor") or "").lower()
        if vendor != AMD_VENDOR_ID:
            if vendor:
                others.append(OTHER_VENDORS.get(vendor, f"vendor {vendor}"))
            continue
        total = _read_int(dev / "mem_info_vram_total")
        used = _read_int(dev / "mem_info_vram_used")
        if total is None and used is None:
            others.append("AMD (no VRAM counters)")
            continue
        temp_mc, power_uw, cap_uw = _hwmon(dev)
        uevent = _read_file(dev / "uevent") or ""
        bus_id = next((line.split("=", 1)[1] for line in uevent.splitlines() if line.startswith("PCI_SLOT_NAME=")), None)
        name = _read_file(dev / "product_name") or f"AMD GPU {(_read_file(dev / 'device') or '?')} ({card.name})"
        devices.append(GpuDevice(
            index=len(devices), vendor="amd", name=name, bus_id=bus_id,
            memory_total_bytes=total, memory_used_bytes=used,
            memory_free_bytes=max(0, total - used) if total is not None and used is not None else None,
            gpu_util_percent=_percent(_read_int(dev / "gpu_busy_percent")),
            memory_util_percent=_percent(_read_int(dev / "mem_busy_percent")),
            temperature_c=temp_mc // 1000 if temp_mc is not None else None,
            power_draw_mw=power_uw // 1000 if power_uw is not None else None,
            power_limit_mw=cap_uw // 1000 if cap_uw is not None and cap_uw > 0 else None,
            processes=None, processes_note="sysfs gives no per-process VRAM for AMD GPUs",
        ))
    return devices, others


def _hwmon(dev: Path) -> tuple[int | None, int | None, int | None]:
    """(temperature m°C, power draw µW, power cap µW) from the first hwmon dirs that have them."""
    temp_mc = power_uw = cap_uw = None
    try:
        hwmons = sorted((dev / "hwmon").iterdir())
    except OSError:
        hwmons = []
    for h in hwmons:
        temp_mc = temp_mc if temp_mc is not None else _read_int(h / "temp1_input")
        if power_uw is None:
            power_uw = _read_int(h / "power1_average")
            if power_uw is None:
                power_uw = _read_int(h / "power1_input")
        cap_uw = cap_uw if cap_uw is not None else _read_int(h / "power1_cap")
    return temp_mc, power_uw, cap_uw


def _driver(dev: Path) -> str | None:
    try:
        return Path(os.readlink(dev / "driver")).name or None
    except OSError:
        return None


def _xe_vram_bytes(dev: Path) -> int | None:
    """xe: the sum of ``tileN/physical_vram_size_bytes`` (kernel ``drivers/gpu/drm/xe/xe_tile_sysfs.c``;
    igt-gpu-tools ``tests/intel/xe_sysfs_tile.c`` reads it; some kernels put it under
    ``tileN/memory/``), tile 0 up to the first tile without it; None when there is none."""
    total = 0
    for n in range(64):
        tile = dev / f"tile{n}"
        size = _read_int(tile / "physical_vram_size_bytes")
        if size is None:
            size = _read_int(tile / "memory" / "physical_vram_size_bytes")
        if size is None:
            break
        total += size
    return total or None


def read_intel_sysfs(sysfs_root: Path) -> tuple[list[GpuDevice], list[str]]:
    """Intel GPUs under ``<sysfs_root>/class/drm/card*/device`` (vendor ``0x8086``).

    The kernel exposes an Intel GPU's memory size only, never its use: the ``xe`` driver in
    ``device/tileN/physical_vram_size_bytes`` (physical VRAM, reserved pages included), Intel's
    out-of-tree i915 in ``cardN/lmem_total_bytes``; mainline i915 exposes none, and an integrated
    GPU has no memory of its own (it uses system RAM). A card with a size becomes a device with
    ``memory_total_bytes`` only (used, free and per-process memory not known, ``memory_note`` says
    why); one without becomes a note saying it is not supported and why.

    Returns:
        (devices, notes): devices indexed from 0 in card order, and one sentence per Intel card
        that cannot be read.
    """
    devices: list[GpuDevice] = []
    notes: list[str] = []
    for card in _card_dirs(sysfs_root):
        dev = card / "device"
        if (_read_file(dev / "vendor") or "").lower() != INTEL_VENDOR_ID:
            continue
        driver = _driver(dev)
        total = _xe_vram_bytes(dev)
        where = "tileN/physical_vram_size_bytes (xe)"
        if total is None:
            total = _read_int(card / "lmem_total_bytes")
            where = "lmem_total_bytes (i915)"
        name = f"Intel GPU {_read_file(dev / 'device') or '?'} ({card.name}{', ' + driver if driver else ''})"
        if not total:
            reason = ("the i915 driver exposes no GPU memory in sysfs (an integrated GPU uses system RAM; "
                      "mainline i915 has no VRAM counters)" if driver in ("i915", None) else
                      f"the {driver} driver exposes no VRAM size in sysfs")
            notes.append(f"{name}: not supported: {reason}")
            continue
        temp_mc, power_uw, cap_uw = _hwmon(dev)
        uevent = _read_file(dev / "uevent") or ""
        bus_id = next((line.split("=", 1)[1] for line in uevent.splitlines() if line.startswith("PCI_SLOT_NAME=")), None)
        devices.append(GpuDevice(
            index=len(devices), vendor="intel", name=name, bus_id=bus_id, memory_total_bytes=total,
            temperature_c=temp_mc // 1000 if temp_mc is not None else None,
            power_draw_mw=power_uw // 1000 if power_uw is not None else None,
            power_limit_mw=cap_uw // 1000 if cap_uw is not None and cap_uw > 0 else None,
            memory_note=f"VRAM size from sysfs {where}; the kernel exposes no VRAM use for Intel GPUs",
            processes=None, processes_note="sysfs gives no per-process GPU memory for Intel GPUs",
        ))
    return devices, notes


_IOREG_NODE = re.compile(r"^[ |]*\+-o (\S+)", re.MULTILINE)
_IOREG_STATS = re.compile(r'"PerformanceStatistics" = \{([^}]*)\}')
_IOREG_NUMBER = re.compile(r'"([^"]+)"=(-?\d+)')
_IOREG_MODEL = re.compile(r'"model" = "([^"]*)"')
_IOREG_CORES = re.compile(r'"gpu-core-count" = (\d+)')


def parse_ioreg(text: str) -> list[dict[str, Any]]:
    """The AGXAccelerator nodes of ``ioreg -r -d 1 -w 0 -c AGXAccelerator`` output.

    Each node is ``{"class": "AGXAcceleratorG13X", "model": "Apple M4" | None, "cores": int | None,
    "stats": {key: int}}`` where ``stats`` is its ``PerformanceStatistics`` dictionary's numeric
    entries (``"In use system memory"`` bytes, ``"Alloc system memory"`` bytes,
    ``"Device Utilization %"`` percent, …). A node without PerformanceStatistics is left out.
    Format: ioreg's text form, e.g. ``"PerformanceStatistics" = {"Alloc system memory"=1214005248,…}``
    (tests/fixtures/ioreg/README.md says where the recorded outputs come from).
    """
    nodes: list[dict[str, Any]] = []
    starts = [(m.start(), m.group(1)) for m in _IOREG_NODE.finditer(text)]
    for i, (start, cls) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        body = text[start:end]
        stats = _IOREG_STATS.search(body)
        if stats is None:
            continue
        model = _IOREG_MODEL.search(body)
        cores = _IOREG_CORES.search(body)
        nodes.append({"class": cls, "model": model.group(1) if model else None,
                      "cores": int(cores.group(1)) if cores else None,
                      "stats": {k: int(v) for k, v in _IOREG_NUMBER.findall(stats.group(1))}})
    return nodes


def read_apple_ioreg(text: str, system: SystemMemory | None) -> list[GpuDevice]:
    """Apple Silicon GPUs from ``ioreg`` output (:func:`parse_ioreg`): unified memory.

    ``memory_total_bytes`` and ``memory_free_bytes`` are the system's RAM and RAM available
    (psutil), ``memory_used_bytes`` what the GPU holds ("In use system memory"),
    ``memory_allocated_bytes`` what its driver allocated ("Alloc system memory"),
    ``gpu_util_percent`` "Device Utilization %". No per-process GPU memory, temperature or power
    (those need ``powermetrics``, i.e. sudo).
    """
    devices: list[GpuDevice] = []
    for node in parse_ioreg(text):
        stats = node["stats"]
        name = node["model"] or f"Apple GPU ({node['class']})"
        if node["cores"]:
            name += f", {node['cores']} GPU cores"
        total = system.ram_total_bytes if system is not None else None
        free = system.ram_available_bytes if system is not None else None
        devices.append(GpuDevice(
            index=len(devices), vendor="apple", name=name, memory_total_bytes=total,
            memory_used_bytes=_int(stats.get("In use system memory")), memory_free_bytes=free,
            memory_allocated_bytes=_int(stats.get("Alloc system memory")),
            gpu_util_percent=_percent(stats.get("Device Utilization %")), unified_memory=True,
            memory_note="unified memory: the GPU shares system RAM (total and available: psutil; in use and "
                        "allocated by the GPU: ioreg PerformanceStatistics)",
            processes=None, processes_note="macOS gives no per-process GPU memory without sudo",
        ))
    return devices


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


def _merge_processes(compute: Any, graphics: Any) -> tuple[GpuProcess, ...] | None:
    """One entry per PID from NVML's compute and graphics lists; None when neither is available."""
    if compute is None and graphics is None:
        return None
    by_pid: dict[int, tuple[int | None, list[str]]] = {}
    for kind, items in (("compute", compute), ("graphics", graphics)):
        for item in items or ():
            pid = _int(getattr(item, "pid", None))
            if pid is None:
                continue
            mem = _int(getattr(item, "usedGpuMemory", None))
            old_mem, kinds = by_pid.get(pid, (None, []))
            if kind not in kinds:
                kinds = [*kinds, kind]
            best = mem if old_mem is None else (old_mem if mem is None else max(mem, old_mem))
            by_pid[pid] = (best, kinds)
    return tuple(GpuProcess(pid, mem, tuple(kinds)) for pid, (mem, kinds) in sorted(by_pid.items()))


class GpuSource:
    """Samples every GPU once per call; never raises, always returns a ``GpuSnapshot``.

    Args:
        nvml: A ``pynvml``-like module (tests pass a fake); None imports ``pynvml`` lazily.
        sysfs_root: Where ``class/drm`` lives (tests build a fake tree in ``tmp_path``).
        platform: ``sys.platform`` (tests pass ``darwin``).
        psutil_module: The ``psutil`` module or a fake; None imports it.
        clock: Wall-clock time for ``taken_at``.
        amd: Read AMD and Intel GPUs from sysfs when NVML has none.
        ioreg: macOS: returns ``ioreg -r -d 1 -w 0 -c AGXAccelerator``'s output (tests pass recorded
            output); it may raise ``OSError`` (no ``ioreg``) or ``subprocess.SubprocessError``.
            None runs the command (``IOREG_TIMEOUT_S`` deadline).
    """

    def __init__(self, *, nvml: Any = None, sysfs_root: Path | str = "/sys", platform: str | None = None,
                 psutil_module: Any = None, clock: Callable[[], float] = time.time, amd: bool = True,
                 ioreg: Callable[[], str] | None = None) -> None:
        self._ioreg = ioreg
        self._nvml: Any = nvml
        self._import_error: str | None = None
        self._sysfs_root = Path(sysfs_root)
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
                return GpuSnapshot(taken_at=now, status=f"GPU telemetry: error ({type(exc).__name__}: {exc})",
                                   problem="error", system=system)

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

    def _fallback(self, now: float, system: SystemMemory | None, status: str, problem: GpuProblem,
                  notes: tuple[str, ...] = ()) -> GpuSnapshot:
        """No NVML: AMD and Intel through sysfs if there are any, otherwise the NVML status."""
        if self._amd and self._platform.startswith("linux"):
            amd, others = read_amd_sysfs(self._sysfs_root)
            intel, intel_notes = read_intel_sysfs(self._sysfs_root)
            notes = (*notes, *intel_notes)
            vendors = sorted(set(o for o in others if o not in ("NVIDIA", "Intel")))
            if vendors:
                notes = (*notes, f"{', '.join(vendors)} GPU found: not supported (kvtop reads NVIDIA through NVML,"
                                 " AMD and Intel through sysfs, Apple through ioreg)")
            devices = [*amd, *(replace(d, index=len(amd) + d.index) for d in intel)]
            if devices:
                kinds = [f"{len(group)} {label} GPU{'s' if len(group) != 1 else ''}"
                         for group, label in ((amd, "AMD"), (intel, "Intel")) if group]
                what = "no per-process GPU memory" if not intel else \
                    "no per-process GPU memory; Intel: VRAM size only" if amd else "VRAM size only, no use or per-process memory"
                backend: GpuBackend = "sysfs" if amd and intel else "amd-sysfs" if amd else "intel-sysfs"
                return GpuSnapshot(
                    taken_at=now, ok=True, backend=backend, devices=tuple(devices), system=system,
                    status=f"GPU telemetry: {', '.join(kinds)} (sysfs; {what})", notes=notes,
                )
        return GpuSnapshot(taken_at=now, status=status, problem=problem, system=system, notes=notes)

    def _run_ioreg(self) -> str:
        if self._ioreg is not None:
            return self._ioreg()
        done = subprocess.run(IOREG_COMMAND, capture_output=True, text=True, timeout=IOREG_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False, errors="replace")
        if done.returncode != 0 and not done.stdout:
            raise subprocess.SubprocessError(f"ioreg exited {done.returncode}: {done.stderr.strip()[:200]}")
        return done.stdout

    def _sample_apple(self, now: float, system: SystemMemory | None) -> GpuSnapshot:
        """macOS: Apple Silicon GPUs through ``ioreg`` (no sudo), unified memory from psutil."""
        try:
            text = self._run_ioreg()
        except FileNotFoundError:
            return GpuSnapshot(taken_at=now, status="GPU telemetry: not available (the ioreg command is not found)",
                               problem="not_supported", system=system)
        except subprocess.TimeoutExpired:
            return GpuSnapshot(taken_at=now, status=f"GPU telemetry: ioreg did not answer within {IOREG_TIMEOUT_S:g} s;"
                                                    " kvtop keeps trying", problem="error", system=system)
        except (OSError, subprocess.SubprocessError) as exc:
            return GpuSnapshot(taken_at=now, status=f"GPU telemetry: ioreg failed ({exc}); kvtop keeps trying",
                               problem="error", system=system)
        devices = read_apple_ioreg(text, system)
        if not devices:
            return GpuSnapshot(taken_at=now, status=("GPU telemetry: no Apple Silicon GPU statistics (ioreg lists no"
                                                     " AGXAccelerator; an Intel Mac's GPU is not supported)"),
                               problem="not_supported", system=system)
        n = len(devices)
        return GpuSnapshot(taken_at=now, ok=True, backend="ioreg", devices=tuple(devices), system=system,
                           status=f"GPU telemetry: {n} Apple GPU{'s' if n != 1 else ''} (ioreg; unified memory:"
                                  " shares system RAM; no per-process GPU memory)")

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
                devices.append(GpuDevice(
                    index=i, name=old.name if old else None, uuid=old.uuid if old else None,
                    bus_id=old.bus_id if old else None,
                    error=f"GPU is lost (NVML: {exc.text}): the driver lost contact with it;"
                          " kvtop keeps trying (it may need a reset or a reboot)",
                ))
        present = {self._key(d) for d in devices if self._key(d)}
        vanished: list[GpuDevice] = []
        for key, old in self._seen.items():
            if key not in present:
                vanished.append(GpuDevice(
                    index=old.index, name=old.name, uuid=old.uuid, bus_id=old.bus_id,
                    error="vanished: NVML no longer lists this GPU (fell off the bus, unbound or reset)",
                ))
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
                status += (f"; GPU {', '.join(str(d.index) for d in shared)} shares system RAM (unified memory:"
                           " memory figures from /proc/meminfo)")
            trouble = [f"GPU {d.index} is lost" for d in lost] + [f"GPU {d.index} ({d.name or d.uuid}) vanished"
                                                                for d in vanished]
            if trouble:
                status += "; " + "; ".join(trouble)
                problem = "lost" if lost else "vanished"
        return GpuSnapshot(taken_at=now, status=status, ok=n > 0, backend="nvml", problem=problem,
                           driver_version=self._driver_version, devices=all_devices, system=system)

    @staticmethod
    def _key(d: GpuDevice) -> str | None:
        return d.uuid or d.bus_id

    def _seen_at(self, index: int) -> GpuDevice | None:
        return next((d for d in self._seen.values() if d.index == index), None)

    def _read_device(self, nvml: Any, i: int, system: SystemMemory | None = None) -> GpuDevice:
        handle = nvml_query(nvml, "nvmlDeviceGetHandleByIndex", i)
        if handle is None:
            old = self._seen_at(i)
            return GpuDevice(index=i, name=old.name if old else None, uuid=old.uuid if old else None,
                             error="not accessible: NVML gives no handle for it (permissions or a bad state)")

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
        total, used, free = (_int(getattr(mem, "total", None)), _int(getattr(mem, "used", None)),
                             _int(getattr(mem, "free", None)))
        unified = mem is None and system is not None and system.ram_total_bytes is not None
        if unified and system is not None:  # GB10 / DGX Spark, Jetson: NotSupported; the GPU shares RAM
            total, free, used = system.ram_total_bytes, system.ram_available_bytes, system.ram_in_use_bytes
        return GpuDevice(
            index=i, vendor="nvidia", name=name, uuid=uuid, bus_id=bus_id,
            memory_total_bytes=total, memory_used_bytes=used, memory_free_bytes=free,
            memory_reserved_bytes=reserved, unified_memory=unified,
            memory_note=UNIFIED_NVML_NOTE if unified else None,
            gpu_util_percent=_percent(getattr(util, "gpu", None)),
            memory_util_percent=_percent(getattr(util, "memory", None)),
            temperature_c=_int(q("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)),
            power_draw_mw=_int(q("nvmlDeviceGetPowerUsage")),
            power_limit_mw=_int(q("nvmlDeviceGetEnforcedPowerLimit")),
            processes=processes, processes_note=note,
        )

