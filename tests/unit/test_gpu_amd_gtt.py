"""AMD APUs (Strix Halo etc.): the GTT pool is the model's memory when the VRAM carve-out is small
(issue 25, Platforms). A 2 GiB carve-out must not read "99 % full": the figures are VRAM + GTT,
marked as such on every face. Fake sysfs trees in tmp_path with the files the amdgpu driver
writes (``mem_info_vram_*``, ``mem_info_gtt_*``, ``gpu_metrics``; docs/gpu-memory.md).
"""

from __future__ import annotations

import struct
from pathlib import Path

from kvtop.model.gpu import gpu_device_json, gpu_views
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.sources.gpu_sysfs import amd_memory_pools, read_amd_sysfs
from kvtop.ui.widgets.gpu_panel import compact_line
from tests.fakes.sysfs import GiB, add_amd_card

MiB = 1024**2


def _apu(root: Path, *, vram_used: int = 2_126_512_128, gtt_used: int = 21_915_045_888, revision: int = 3) -> Path:
    """A Strix Halo–like APU (Radeon 8060S, PCI id 0x1586) with a 2 GiB carve-out and ~62 GiB GTT
    (the kernel's default GTT size is half the RAM: 124 GiB usable on a 128 GB machine)."""
    dev = add_amd_card(
        root, 1, total=2 * GiB, used=vram_used, product="AMD Radeon 8060S", slot="0000:c5:00.0", device_id="0x1586"
    )
    (dev / "mem_info_gtt_total").write_text("66655879168\n", encoding="utf-8")
    (dev / "mem_info_gtt_used").write_text(f"{gtt_used}\n", encoding="utf-8")
    # metrics_table_header {u16 structure_size; u8 format_revision; u8 content_revision} + the table
    (dev / "gpu_metrics").write_bytes(struct.pack("<HBB", 264, revision, 0) + bytes(260))
    return dev


def test_a_small_carve_out_is_summed_with_gtt(tmp_path: Path) -> None:
    _apu(tmp_path)
    (d,), _ = read_amd_sysfs(tmp_path)
    assert d.memory_pool == "vram+gtt"
    assert d.memory_total_bytes == 2 * GiB + 66_655_879_168
    assert d.memory_used_bytes == 2_126_512_128 + 21_915_045_888
    assert d.memory_free_bytes == d.memory_total_bytes - d.memory_used_bytes
    assert (d.vram_total_bytes, d.vram_used_bytes) == (2 * GiB, 2_126_512_128)
    assert (d.gtt_total_bytes, d.gtt_used_bytes) == (66_655_879_168, 21_915_045_888)
    ratio = d.memory_used_bytes / d.memory_total_bytes
    assert 0.34 < ratio < 0.36  # not the carve-out's 99 %
    assert d.memory_note is not None and d.memory_note.startswith("VRAM+GTT (APU: a VRAM carve-out, models in GTT)")
    assert "VRAM 2.0 GiB / 2.0 GiB + GTT 20.4 GiB / 62.1 GiB" in d.memory_note


def test_every_face_marks_the_pool(tmp_path: Path) -> None:
    _apu(tmp_path)
    devices, _ = read_amd_sysfs(tmp_path)
    snap = GpuSnapshot(
        taken_at=1.0, ok=True, backend="amd-sysfs", devices=tuple(devices), status="GPU telemetry: 1 AMD GPU"
    )
    (view,) = gpu_views(snap, None, ())
    doc = gpu_device_json(view)
    assert doc["memory"]["pool"] == "vram+gtt"
    assert doc["memory"]["gtt_total"] == 66_655_879_168 and doc["memory"]["vram_total"] == 2 * GiB
    line = compact_line(view, 100, 16, {}, {}).plain
    assert "V+GTT 22G/64G" in line


def test_a_discrete_card_keeps_its_vram_figures(tmp_path: Path) -> None:
    dev = add_amd_card(tmp_path, 0, total=24 * GiB, used=23 * GiB, product="AMD Radeon RX 7900 XTX")
    (dev / "mem_info_gtt_total").write_text(f"{32 * GiB}\n", encoding="utf-8")
    (dev / "mem_info_gtt_used").write_text(f"{180 * MiB}\n", encoding="utf-8")
    (dev / "gpu_metrics").write_bytes(struct.pack("<HBB", 120, 1, 3) + bytes(116))  # gpu_metrics_v1_3: discrete
    (d,), _ = read_amd_sysfs(tmp_path)
    assert d.memory_pool == "vram" and d.memory_note is None
    assert (d.memory_total_bytes, d.memory_used_bytes) == (24 * GiB, 23 * GiB)
    assert (d.gtt_total_bytes, d.gtt_used_bytes) == (32 * GiB, 180 * MiB)
    assert d.vram_total_bytes is None


def test_gtt_holding_more_than_the_vram_is_summed_without_gpu_metrics() -> None:
    pools = amd_memory_pools(512 * MiB, 500 * MiB, 15 * GiB, 6 * GiB, None)
    assert pools["memory_pool"] == "vram+gtt"
    assert pools["memory_total_bytes"] == 512 * MiB + 15 * GiB
    assert pools["memory_note"].startswith("VRAM+GTT (GTT holds more than the VRAM)")


def test_no_gtt_counters_means_the_vram_alone() -> None:
    pools = amd_memory_pools(8 * GiB, 1 * GiB, None, None, 3)
    assert pools["memory_pool"] == "vram" and pools["memory_total_bytes"] == 8 * GiB
    assert pools["gtt_total_bytes"] is None
