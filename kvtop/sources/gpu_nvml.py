"""NVIDIA GPUs through NVML (``pynvml``): the return codes kvtop tells apart, :func:`nvml_query` (a
field the driver does not support becomes None, never an exception; only "NVML is gone" and "this
GPU is gone" leave it, as :class:`NvmlUnavailable` / :class:`GpuLost`), the plain-words line for an
initialisation failure, and the merge of NVML's compute and graphics process lists.
"""

from __future__ import annotations

from typing import Any

from kvtop.model.gpu_snapshots import GpuProblem, GpuProcess


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

UNAVAILABLE_CODES = frozenset(
    {
        NVML_ERROR_UNINITIALIZED,
        NVML_ERROR_DRIVER_NOT_LOADED,
        NVML_ERROR_LIBRARY_NOT_FOUND,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)
"""Errors after which no NVML call can work until NVML is initialised again."""

LOST_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED})
"""Errors that mean one device is gone."""


STATUS_NO_LIBRARY = "GPU telemetry: no NVIDIA driver (NVML library not found)"


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
        return (
            "GPU telemetry: NVIDIA driver/library version mismatch (the kernel module and libnvidia-ml"
            " differ, usually after a driver upgrade: reboot or reload the nvidia module)"
        ), "version_mismatch"
    if code == NVML_ERROR_NO_PERMISSION:
        return "GPU telemetry: no permission to use the NVIDIA driver (NVML: Insufficient Permissions)", "no_permission"
    if code in LOST_CODES:
        return f"GPU telemetry: a GPU is lost (NVML: {text}); kvtop keeps trying", "lost"
    if code == NVML_ERROR_UNINITIALIZED:
        return "GPU telemetry: NVML stopped working (Uninitialized); kvtop keeps trying", "error"
    return f"GPU telemetry: NVML failed ({text}); kvtop keeps trying", "error"


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
