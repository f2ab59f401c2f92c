"""Build a fake ``/sys/class/drm`` tree in ``tmp_path`` (AMD cards, connectors, other vendors)."""

from __future__ import annotations

from pathlib import Path

GiB = 1024**3


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def add_amd_card(
    root: Path,
    card: int,
    *,
    total: int = 16 * GiB,
    used: int = 5 * GiB,
    busy: int = 37,
    mem_busy: int | None = 12,
    temp_mc: int | None = 54000,
    power_uw: int | None = 120_000_000,
    cap_uw: int | None = 250_000_000,
    product: str | None = None,
    slot: str = "0000:03:00.0",
    power_file: str = "power1_average",
    device_id: str = "0x744c",
) -> Path:
    """An amdgpu card: ``cardN/device/{vendor,mem_info_vram_total,…}`` plus a hwmon dir and a connector."""
    dev = root / "class" / "drm" / f"card{card}" / "device"
    _write(dev / "vendor", "0x1002")
    _write(dev / "device", device_id)
    _write(dev / "mem_info_vram_total", str(total))
    _write(dev / "mem_info_vram_used", str(used))
    _write(dev / "gpu_busy_percent", str(busy))
    if mem_busy is not None:
        _write(dev / "mem_busy_percent", str(mem_busy))
    _write(dev / "uevent", f"DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME={slot}")
    hw = dev / "hwmon" / f"hwmon{card + 2}"
    if temp_mc is not None:
        _write(hw / "temp1_input", str(temp_mc))
    if power_uw is not None:
        _write(hw / power_file, str(power_uw))
    if cap_uw is not None:
        _write(hw / "power1_cap", str(cap_uw))
    if product is not None:
        _write(dev / "product_name", product)
    (root / "class" / "drm" / f"card{card}-DP-1").mkdir(parents=True, exist_ok=True)  # a connector, not a card
    return dev


def add_other_card(root: Path, card: int, vendor: str = "0x8086") -> Path:
    """A card of another vendor (Intel by default): no VRAM counters kvtop reads."""
    dev = root / "class" / "drm" / f"card{card}" / "device"
    _write(dev / "vendor", vendor)
    return dev


def add_intel_card(
    root: Path,
    card: int,
    *,
    driver: str = "xe",
    tiles: tuple[int, ...] = (),
    tile_subdir: str = "",
    lmem_total: int | None = None,
    device_id: str = "0xe20b",
    slot: str = "0000:03:00.0",
    temp_mc: int | None = None,
    power_uw: int | None = None,
) -> Path:
    """An Intel card: ``cardN/device/{vendor,device,uevent}``, its ``driver`` link, and what the
    kernel exposes of its memory: xe's ``device/tileN[/<tile_subdir>]/physical_vram_size_bytes``
    per tile, or the out-of-tree i915's ``cardN/lmem_total_bytes``; neither for mainline i915."""
    card_dir = root / "class" / "drm" / f"card{card}"
    dev = card_dir / "device"
    _write(dev / "vendor", "0x8086")
    _write(dev / "device", device_id)
    _write(dev / "uevent", f"DRIVER={driver}\nPCI_CLASS=30000\nPCI_SLOT_NAME={slot}")
    target = root / "bus" / "pci" / "drivers" / driver
    target.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(target)
    for n, size in enumerate(tiles):
        _write(
            dev / f"tile{n}" / tile_subdir / "physical_vram_size_bytes"
            if tile_subdir
            else dev / f"tile{n}" / "physical_vram_size_bytes",
            str(size),
        )
    if lmem_total is not None:
        _write(card_dir / "lmem_total_bytes", str(lmem_total))
    hw = dev / "hwmon" / f"hwmon{card + 2}"
    if temp_mc is not None:
        _write(hw / "temp1_input", str(temp_mc))
    if power_uw is not None:
        _write(hw / "power1_input", str(power_uw))
    return dev
