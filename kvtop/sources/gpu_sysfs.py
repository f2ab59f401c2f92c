"""AMD and Intel GPUs through sysfs (``/sys/class/drm/card*/device``): memory, utilisation, hwmon
temperature and power, without a vendor library.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvtop.model.gpu_snapshots import GpuDevice
from kvtop.sources.gpu_nvml import _percent  # the value rules NVML's fields follow (not-available sentinels)


AMD_VENDOR_ID = "0x1002"
OTHER_VENDORS = {"0x8086": "Intel", "0x10de": "NVIDIA", "0x106b": "Apple"}


INTEL_VENDOR_ID = "0x8086"


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
        bus_id = next(
            (line.split("=", 1)[1] for line in uevent.splitlines() if line.startswith("PCI_SLOT_NAME=")), None
        )
        name = _read_file(dev / "product_name") or f"AMD GPU {(_read_file(dev / 'device') or '?')} ({card.name})"
        devices.append(
            GpuDevice(
                index=len(devices),
                vendor="amd",
                name=name,
                bus_id=bus_id,
                memory_total_bytes=total,
                memory_used_bytes=used,
                memory_free_bytes=max(0, total - used) if total is not None and used is not None else None,
                gpu_util_percent=_percent(_read_int(dev / "gpu_busy_percent")),
                memory_util_percent=_percent(_read_int(dev / "mem_busy_percent")),
                temperature_c=temp_mc // 1000 if temp_mc is not None else None,
                power_draw_mw=power_uw // 1000 if power_uw is not None else None,
                power_limit_mw=cap_uw // 1000 if cap_uw is not None and cap_uw > 0 else None,
                processes=None,
                processes_note="sysfs gives no per-process VRAM for AMD GPUs",
            )
        )
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
            reason = (
                "the i915 driver exposes no GPU memory in sysfs (an integrated GPU uses system RAM; "
                "mainline i915 has no VRAM counters)"
                if driver in ("i915", None)
                else f"the {driver} driver exposes no VRAM size in sysfs"
            )
            notes.append(f"{name}: not supported: {reason}")
            continue
        temp_mc, power_uw, cap_uw = _hwmon(dev)
        uevent = _read_file(dev / "uevent") or ""
        bus_id = next(
            (line.split("=", 1)[1] for line in uevent.splitlines() if line.startswith("PCI_SLOT_NAME=")), None
        )
        devices.append(
            GpuDevice(
                index=len(devices),
                vendor="intel",
                name=name,
                bus_id=bus_id,
                memory_total_bytes=total,
                temperature_c=temp_mc // 1000 if temp_mc is not None else None,
                power_draw_mw=power_uw // 1000 if power_uw is not None else None,
                power_limit_mw=cap_uw // 1000 if cap_uw is not None and cap_uw > 0 else None,
                memory_note=f"VRAM size from sysfs {where}; the kernel exposes no VRAM use for Intel GPUs",
                processes=None,
                processes_note="sysfs gives no per-process GPU memory for Intel GPUs",
            )
        )
    return devices, notes
