"""Apple Silicon GPUs through ``ioreg`` (no sudo): what the GPU holds in the shared RAM, what its
driver allocated and its utilisation, from the AGXAccelerator nodes' ``PerformanceStatistics``.
"""

from __future__ import annotations

import re
from typing import Any

from kvtop.model.gpu_snapshots import GpuDevice, SystemMemory
from kvtop.sources.gpu_nvml import _int, _percent  # the value rules NVML's fields follow (not-available sentinels)


IOREG_COMMAND = ("ioreg", "-r", "-d", "1", "-w", "0", "-c", "AGXAccelerator")
"""Apple Silicon's GPU statistics: the AGXAccelerator nodes (one per GPU; subclasses such as
``AGXAcceleratorG13X`` match too), one level deep, lines not cut; no sudo needed."""
IOREG_TIMEOUT_S = 2.0


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
        nodes.append(
            {
                "class": cls,
                "model": model.group(1) if model else None,
                "cores": int(cores.group(1)) if cores else None,
                "stats": {k: int(v) for k, v in _IOREG_NUMBER.findall(stats.group(1))},
            }
        )
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
        devices.append(
            GpuDevice(
                index=len(devices),
                vendor="apple",
                name=name,
                memory_total_bytes=total,
                memory_used_bytes=_int(stats.get("In use system memory")),
                memory_free_bytes=free,
                memory_allocated_bytes=_int(stats.get("Alloc system memory")),
                gpu_util_percent=_percent(stats.get("Device Utilization %")),
                unified_memory=True,
                memory_note="unified memory: the GPU shares system RAM (total and available: psutil; in use and "
                "allocated by the GPU: ioreg PerformanceStatistics)",
                processes=None,
                processes_note="macOS gives no per-process GPU memory without sudo",
            )
        )
    return devices
