"""AMD and Intel GPUs through sysfs (``/sys/class/drm/card*/device``): memory, utilisation, hwmon
temperature and power, without a vendor library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess
from kvtop.model.known import ibytes
from kvtop.sources.gpu_fdinfo import DrmVram, read_drm_vram
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
        pools = amd_memory_pools(
            total,
            used,
            _read_int(dev / "mem_info_gtt_total"),
            _read_int(dev / "mem_info_gtt_used"),
            _gpu_metrics_revision(dev),
        )
        devices.append(
            GpuDevice(
                index=len(devices),
                vendor="amd",
                name=name,
                bus_id=bus_id,
                **pools,
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


APU_METRICS_REVISIONS = frozenset({2, 3})
"""``gpu_metrics`` format revisions of APUs: the kernel's ``gpu_metrics_v2_*`` (Renoir … Rembrandt)
and ``gpu_metrics_v3_0`` (Strix Point / Strix Halo) are the APU layouts, ``v1_*`` the discrete ones
(``drivers/gpu/drm/amd/include/kgd_pp_interface.h``; docs/gpu-memory.md)."""


def _gpu_metrics_revision(dev: Path) -> int | None:
    """``format_revision`` of ``device/gpu_metrics`` (the third byte of its header), None when absent."""
    try:
        with open(dev / "gpu_metrics", "rb") as f:
            head = f.read(4)
    except OSError:
        return None
    return head[2] if len(head) >= 4 else None


def amd_memory_pools(
    vram_total: int | None,
    vram_used: int | None,
    gtt_total: int | None,
    gtt_used: int | None,
    metrics_revision: int | None,
) -> dict[str, Any]:
    """An AMD GPU's memory figures from its VRAM and GTT pools (bytes; sysfs ``mem_info_*``).

    The pools are summed (``memory_pool="vram+gtt"``) when the GPU is an APU (``gpu_metrics``
    revision 2 or 3), whose VRAM is a BIOS carve-out (often 512 MiB–2 GiB) while models live in GTT
    (system RAM the GPU maps), or when GTT holds more than the whole VRAM could (GTT is the working
    pool). A 2 GiB carve-out then does not read "99 % full". Otherwise the figures are the VRAM
    (``memory_pool="vram"``), with GTT kept beside them; ``memory_note`` names the pools when summed.

    Returns:
        ``GpuDevice`` keyword arguments: ``memory_total/used/free_bytes``, ``memory_pool``,
        ``gtt_*``, ``vram_*`` (only when summed) and ``memory_note``.
    """
    out: dict[str, Any] = {"gtt_total_bytes": gtt_total, "gtt_used_bytes": gtt_used}
    apu = metrics_revision in APU_METRICS_REVISIONS
    spilled = gtt_used is not None and vram_total is not None and gtt_used > vram_total
    if gtt_total and vram_total is not None and (apu or spilled):
        total = vram_total + gtt_total
        used = (vram_used or 0) + (gtt_used or 0) if vram_used is not None or gtt_used is not None else None
        why = "APU: a VRAM carve-out, models in GTT" if apu else "GTT holds more than the VRAM"
        out.update(
            memory_pool="vram+gtt",
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_free_bytes=max(0, total - used) if used is not None else None,
            vram_total_bytes=vram_total,
            vram_used_bytes=vram_used,
            memory_note=(
                f"VRAM+GTT ({why}): VRAM {ibytes(vram_used)} / {ibytes(vram_total)}"
                f" + GTT {ibytes(gtt_used)} / {ibytes(gtt_total)} (system RAM the GPU maps)"
            ),
        )
        return out
    out.update(
        memory_pool="vram",
        memory_total_bytes=vram_total,
        memory_used_bytes=vram_used,
        memory_free_bytes=max(0, vram_total - vram_used) if vram_total is not None and vram_used is not None else None,
        memory_note=None,  # the driver's own VRAM counters; GTT is in gtt_* (JSON)
    )
    return out


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


INTEL_DRM_DRIVERS = frozenset({"i915", "xe"})
"""The ``drm-driver`` values of Intel GPUs in fdinfo."""


def _intel_use(total: int, where: str, use: DrmVram | None, hidden: int) -> dict[str, Any]:
    """An Intel card's use from its DRM clients (``gpu_fdinfo``), or why it is not known."""
    size = f"VRAM size from sysfs {where}"
    if use is None:
        why = (
            f"no DRM client with VRAM is visible in /proc/*/fdinfo ({hidden} processes kvtop may not read:"
            " run it as the server's user or root)"
            if hidden
            else "the kernel exposes no VRAM use for Intel GPUs"  # in sysfs; and no DRM client fdinfo has VRAM
        )
        return {
            "memory_note": f"{size}; {why}",
            "processes": None,
            "processes_note": "no per-process GPU memory: no DRM client fdinfo with VRAM is readable",
        }
    used = min(use.used_bytes, total)
    partial = f"; {use.unreadable} processes kvtop may not read are not counted" if use.unreadable else ""
    return {
        "memory_used_bytes": used,
        "memory_free_bytes": total - used,
        "memory_note": (
            f"{size}; in use: the sum of {use.clients} DRM client{'s' if use.clients != 1 else ''}'"
            f" drm-resident VRAM (per-process fdinfo){partial}"
        ),
        "processes": tuple(GpuProcess(pid=pid, used_memory_bytes=b) for pid, b in sorted(use.by_pid.items())),
        "processes_note": "from DRM fdinfo (drm-resident-<vram region>)" + partial,
    }


def read_intel_sysfs(sysfs_root: Path, proc_root: Path | None = None) -> tuple[list[GpuDevice], list[str]]:
    """Intel GPUs under ``<sysfs_root>/class/drm/card*/device`` (vendor ``0x8086``).

    The kernel exposes an Intel GPU's memory size only, never its use: the ``xe`` driver in
    ``device/tileN/physical_vram_size_bytes`` (physical VRAM, reserved pages included), Intel's
    out-of-tree i915 in ``cardN/lmem_total_bytes``; mainline i915 exposes none, and an integrated
    GPU has no memory of its own (it uses system RAM). A card with a size becomes a device with
    ``memory_total_bytes``; its use and per-process memory come from the DRM clients' fdinfo under
    ``proc_root`` (``gpu_fdinfo``: ``drm-resident-vram0`` …) where the kernel gives it and kvtop can
    read it, else they are not known and ``memory_note`` says why. A card without a size becomes a
    note saying it is not supported and why.

    Returns:
        (devices, notes): devices indexed from 0 in card order, and one sentence per Intel card
        that cannot be read.
    """
    devices: list[GpuDevice] = []
    notes: list[str] = []
    uses: dict[str, DrmVram] | None = None
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
        if uses is None:
            uses = read_drm_vram(proc_root, INTEL_DRM_DRIVERS) if proc_root is not None else {}
        use = uses.get(bus_id or "")
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
                **_intel_use(total, where, use, max((u.unreadable for u in uses.values()), default=0)),
            )
        )
    return devices, notes
