"""A fake ``pynvml`` (nvidia-ml-py) module that behaves like the real one at its boundary.

Like the real module it has the ``NVML_ERROR_*`` codes, ``NVMLError`` whose constructor returns
the matching ``NVMLError_<Name>`` subclass (``NVMLError(15)`` is an ``NVMLError_GpuIsLost``),
``NVMLLibraryMismatchError`` from unversioned functions the driver lacks, ctypes structures for
memory, utilization and PCI info (``busId`` is bytes), ``nvmlFriendlyObject`` process entries
with ``usedGpuMemory`` None when not available, and functions that raise
``NVMLError_NotSupported``. Calls before ``nvmlInit`` raise ``NVMLError_Uninitialized``.

``FakeNvml`` holds the state a test drives: GPUs (two by default), a GPU lost mid-run, a GPU
that vanishes, the library missing, a driver/library mismatch.
"""

from __future__ import annotations

import ctypes
import string
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

NVML_SUCCESS = 0
ERROR_CODES = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "UNKNOWN": 999,
}
ERROR_TEXT = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
    16: "GPU requires restart",
    18: "RM has detected an NVML/RM version mismatch.",
    999: "Unknown Error",
}

GiB = 1024**3
MiB = 1024**2


class c_nvmlMemory_t(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class c_nvmlMemory_v2_t(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class c_nvmlUtilization_t(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_nvmlPciInfo_t(ctypes.Structure):
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class nvmlFriendlyObject:
    """What the real ``nvmlStructToFriendlyObject`` returns for a process entry."""

    def __init__(self, d: dict[str, Any]) -> None:
        for k, v in d.items():
            setattr(self, k, v)


@dataclass
class FakeGpu:
    """One fake device. ``unsupported``: functions that raise ``NotSupported`` on it."""

    name: str = "NVIDIA RTX A6000"
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    bus_id: str = "00000000:01:00.0"
    total: int = 48 * GiB
    reserved: int = 512 * MiB
    used: int = 0
    util_gpu: int = 45
    util_memory: int = 20
    temperature_c: int = 61
    power_mw: int = 250_000
    power_limit_mw: int = 300_000
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    no_memory_v2: bool = False
    no_processes_v3: bool = False
    lost: bool = False

    @property
    def free(self) -> int:
        return max(0, self.total - self.reserved - self.used)


@dataclass
class _Handle:
    gpu: FakeGpu


def two_gpus() -> list[FakeGpu]:
    """A shared server: GPU 0 with two Ollama runners and a foreign trainer, GPU 1 with one runner."""
    return [
        FakeGpu(
            name="NVIDIA RTX A6000",
            uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",
            bus_id="00000000:01:00.0",
            used=20 * GiB,
            compute=[(4101, 5 * GiB), (4102, 9 * GiB), (7777, 4 * GiB)],
        ),
        FakeGpu(
            name="NVIDIA GeForce RTX 4090",
            uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
            bus_id="00000000:02:00.0",
            total=24 * GiB,
            reserved=300 * MiB,
            used=7 * GiB,
            util_gpu=3,
            util_memory=1,
            temperature_c=78,
            power_mw=90_000,
            power_limit_mw=450_000,
            compute=[(4102, 6 * GiB)],
            graphics=[(1234, 300 * MiB)],
        ),
    ]


class FakeNvml:
    """State and module of a fake NVML. ``module`` is what ``import pynvml`` gives."""

    def __init__(
        self, gpus: list[FakeGpu] | None = None, *, driver: str = "550.54.15", init_error: int | None = None
    ) -> None:
        self.gpus: list[FakeGpu] = gpus if gpus is not None else two_gpus()
        self.driver = driver
        self.init_error = init_error
        """An ``NVML_ERROR_*`` code ``nvmlInit`` raises (12: library not found)."""
        self.driver_error: int | None = None
        """A code every call raises (the driver went away mid-run)."""
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        self.module: Any = self._build()

    # -- test controls ---------------------------------------------------------------------

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make ``import pynvml`` return this fake."""
        monkeypatch.setitem(sys.modules, "pynvml", self.module)

    def lose(self, index: int) -> None:
        """The device stops answering: every call on it raises ``NVMLError_GpuIsLost``."""
        self.gpus[index].lost = True

    def vanish(self, index: int) -> FakeGpu:
        """The device disappears from NVML's list (indices after it shift down)."""
        return self.gpus.pop(index)

    # -- the module ------------------------------------------------------------------------

    def _build(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        m.NVML_SUCCESS = NVML_SUCCESS  # type: ignore[attr-defined]
        for name, code in ERROR_CODES.items():
            setattr(m, f"NVML_ERROR_{name}", code)
        m.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
        m.nvmlMemory_v2 = 0x02000028  # type: ignore[attr-defined]
        m.c_nvmlMemory_t = c_nvmlMemory_t  # type: ignore[attr-defined]
        m.c_nvmlMemory_v2_t = c_nvmlMemory_v2_t  # type: ignore[attr-defined]

        class NVMLLibraryMismatchError(Exception):
            pass

        class NVMLError(Exception):
            _valClassMapping: dict[int, type] = {}

            def __new__(typ, value: int) -> Any:  # noqa: N804 - the real signature
                if typ == NVMLError:
                    typ = NVMLError._valClassMapping.get(value, typ)
                obj = Exception.__new__(typ)
                obj.value = value  # type: ignore[attr-defined]
                return obj

            def __str__(self) -> str:
                return ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")  # type: ignore[attr-defined]

            def __eq__(self, other: object) -> bool:
                return bool(self.value == getattr(other, "value", None))  # type: ignore[attr-defined]

            __hash__ = Exception.__hash__

        for name, code in ERROR_CODES.items():
            class_name = "NVMLError_" + string.capwords(name, "_").replace("_", "")

            def gen_new(val: int) -> Callable[..., Any]:
                def new(typ: type, *args: Any) -> Any:
                    return NVMLError.__new__(typ, val)

                return new

            cls = type(class_name, (NVMLError,), {"__new__": gen_new(code)})
            cls.__module__ = "pynvml"
            setattr(m, class_name, cls)
            NVMLError._valClassMapping[code] = cls
        m.NVMLError = NVMLError  # type: ignore[attr-defined]
        m.NVMLLibraryMismatchError = NVMLLibraryMismatchError  # type: ignore[attr-defined]

        def fail(code: int) -> None:
            raise NVMLError(code)

        def check() -> None:
            if self.driver_error is not None:
                fail(self.driver_error)
            if not self.initialized:
                fail(ERROR_CODES["UNINITIALIZED"])

        def dev(handle: _Handle, func: str) -> FakeGpu:
            check()
            gpu = handle.gpu
            if gpu.lost:
                fail(ERROR_CODES["GPU_IS_LOST"])
            if gpu not in self.gpus:
                fail(ERROR_CODES["INVALID_ARGUMENT"])
            if func in gpu.unsupported:
                fail(ERROR_CODES["NOT_SUPPORTED"])
            return gpu

        def nvmlInit() -> None:
            self.init_calls += 1
            if self.init_error is not None:
                fail(self.init_error)
            if self.driver_error is not None:
                fail(self.driver_error)
            self.initialized = True

        def nvmlShutdown() -> None:
            check()
            self.shutdown_calls += 1
            self.initialized = False

        def nvmlSystemGetDriverVersion() -> str:
            check()
            return self.driver

        def nvmlDeviceGetCount() -> int:
            check()
            return len(self.gpus)

        def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
            check()
            if not 0 <= index < len(self.gpus):
                fail(ERROR_CODES["INVALID_ARGUMENT"])
            gpu = self.gpus[index]
            if gpu.lost:
                fail(ERROR_CODES["GPU_IS_LOST"])
            return _Handle(gpu)

        def nvmlDeviceGetName(handle: _Handle) -> str:
            return dev(handle, "nvmlDeviceGetName").name

        def nvmlDeviceGetUUID(handle: _Handle) -> str:
            return dev(handle, "nvmlDeviceGetUUID").uuid

        def nvmlDeviceGetPciInfo(handle: _Handle) -> c_nvmlPciInfo_t:
            gpu = dev(handle, "nvmlDeviceGetPciInfo")
            info = c_nvmlPciInfo_t()
            info.busId = gpu.bus_id.encode()
            return info

        def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> Any:
            gpu = dev(handle, "nvmlDeviceGetMemoryInfo")
            if not version:
                # v1: the reserved memory is counted as used
                return c_nvmlMemory_t(total=gpu.total, free=gpu.free, used=gpu.used + gpu.reserved)
            if gpu.no_memory_v2:
                fail(ERROR_CODES["FUNCTION_NOT_FOUND"])
            return c_nvmlMemory_v2_t(
                version=version, total=gpu.total, reserved=gpu.reserved, free=gpu.free, used=gpu.used
            )

        def nvmlDeviceGetUtilizationRates(handle: _Handle) -> c_nvmlUtilization_t:
            gpu = dev(handle, "nvmlDeviceGetUtilizationRates")
            return c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_memory)

        def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
            gpu = dev(handle, "nvmlDeviceGetTemperature")
            if sensor != 0:
                fail(ERROR_CODES["INVALID_ARGUMENT"])
            return gpu.temperature_c

        def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
            return dev(handle, "nvmlDeviceGetPowerUsage").power_mw

        def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
            return dev(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

        def procs(entries: list[tuple[int, int | None]]) -> list[nvmlFriendlyObject]:
            return [
                nvmlFriendlyObject(
                    {"pid": pid, "usedGpuMemory": mem, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}
                )
                for pid, mem in entries
            ]

        def running(kind: str, versioned: bool) -> Callable[[_Handle], list[nvmlFriendlyObject]]:
            func = f"nvmlDeviceGet{kind}RunningProcesses"

            def get(handle: _Handle) -> list[nvmlFriendlyObject]:
                gpu = dev(handle, func)
                if not versioned and gpu.no_processes_v3:
                    raise NVMLLibraryMismatchError(f"Unversioned function called ... use {func}_v2")
                return procs(gpu.compute if kind == "Compute" else gpu.graphics)

            return get

        for fn in (
            nvmlInit,
            nvmlShutdown,
            nvmlSystemGetDriverVersion,
            nvmlDeviceGetCount,
            nvmlDeviceGetHandleByIndex,
            nvmlDeviceGetName,
            nvmlDeviceGetUUID,
            nvmlDeviceGetPciInfo,
            nvmlDeviceGetMemoryInfo,
            nvmlDeviceGetUtilizationRates,
            nvmlDeviceGetTemperature,
            nvmlDeviceGetPowerUsage,
            nvmlDeviceGetEnforcedPowerLimit,
        ):
            setattr(m, fn.__name__, fn)
        m.nvmlDeviceGetComputeRunningProcesses = running("Compute", False)  # type: ignore[attr-defined]
        m.nvmlDeviceGetComputeRunningProcesses_v2 = running("Compute", True)  # type: ignore[attr-defined]
        m.nvmlDeviceGetGraphicsRunningProcesses = running("Graphics", False)  # type: ignore[attr-defined]
        m.nvmlDeviceGetGraphicsRunningProcesses_v2 = running("Graphics", True)  # type: ignore[attr-defined]
        return m


def missing_library() -> FakeNvml:
    """NVML as on a machine without the NVIDIA driver: ``nvmlInit`` raises ``LibraryNotFound``."""
    return FakeNvml([], init_error=ERROR_CODES["LIBRARY_NOT_FOUND"])
