"""The GPU panel says when a GPU shares system RAM: NVIDIA GB10 (NVML memory info Not Supported,
the fake pynvml) and Apple Silicon (recorded ioreg output), at 80 and 160 columns, plus SVG
snapshots; an Intel card shows its VRAM size and why nothing else is known."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.cells import cell_len

from kvtop.core.glyphs import to_ascii
from kvtop.model.gpu import GpuPanelData, gpu_panel_data
from kvtop.report import gpu_text_lines
from kvtop.model.views import AppState
from kvtop.sources.gpu import GpuSource
from kvtop.ui.widgets.gpu_panel import GpuPanel, panel_text
from tests.fakes.nvml import FakeGpu, FakeNvml, GiB, missing_library
from tests.fakes.sysfs import add_intel_card
from tests.ui.test_gpu_panel import COLORS, PanelApp

IOREG = Path(__file__).resolve().parents[1] / "fixtures" / "ioreg" / "m1-pro-macbook-pro-16-monterey.txt"
PSUTIL = SimpleNamespace(
    virtual_memory=lambda: SimpleNamespace(total=128 * GiB, available=90 * GiB, used=36 * GiB),
    swap_memory=lambda: SimpleNamespace(total=0, used=0),
)


def _gb10(tmp_path: Path) -> GpuPanelData:
    fake = FakeNvml(
        [
            FakeGpu(
                name="NVIDIA GB10",
                uuid="GPU-gb10-0000",
                unsupported={"nvmlDeviceGetMemoryInfo"},
                compute=[(4101, 9 * GiB)],
            )
        ]
    )
    snap = GpuSource(
        nvml=fake.module, sysfs_root=tmp_path, platform="linux", psutil_module=PSUTIL, clock=lambda: 1000.0
    ).sample_sync()
    return gpu_panel_data(snap, None, ())


def _apple(tmp_path: Path) -> GpuPanelData:
    text = IOREG.read_text(encoding="utf-8")
    snap = GpuSource(
        sysfs_root=tmp_path, platform="darwin", psutil_module=PSUTIL, ioreg=lambda: text, clock=lambda: 1000.0
    ).sample_sync()
    return gpu_panel_data(snap, None, ())


def _text(data: GpuPanelData, width: int) -> str:
    return panel_text(
        data.views, data.status, width, COLORS, system=data.system, notes=data.notes, usages=data.usages, ok=data.ok
    ).plain


def test_gb10_shares_system_ram_at_80_and_160(tmp_path: Path) -> None:
    data = _gb10(tmp_path)
    narrow = _text(data, 80).splitlines()
    assert (
        narrow[0].startswith("GPU0 GB10 ") and "RAM 38G/128G" in narrow[0]
    )  # RAM in use (total − available), as the RAM line and the memory map
    assert all(cell_len(line) <= 78 for line in narrow)
    wide = _text(data, 160)
    assert "shares system RAM: 38.0 GiB/128 GiB used · 90.0 GiB available" in wide
    assert "NVML reports no memory for this GPU (Not Supported): it shares system RAM" in wide
    assert "▄ other processes 9.0 GiB   · rest of the RAM in use ~29.0 GiB   ░ free 90.0 GiB" in wide
    assert all(cell_len(line) <= 158 for line in wide.splitlines())


def test_apple_gpu_shows_what_it_holds(tmp_path: Path) -> None:
    data = _apple(tmp_path)
    narrow = _text(data, 80).splitlines()
    assert narrow[0].startswith("Apple0 ") and "GPU 325M/128G" in narrow[0] and "  2%" in narrow[0]
    assert all(cell_len(line) <= 78 for line in narrow)
    wide = _text(data, 160)
    assert "shares RAM: 90.0 GiB of 128 GiB available · GPU holds 325 MiB (1.1 GiB alloc.)" in wide
    assert all(cell_len(line) <= 158 for line in wide.splitlines())
    assert "macOS gives no per-process GPU memory without sudo" in wide


def test_intel_card_shows_its_size_and_why_nothing_more(tmp_path: Path, monkeypatch: Any) -> None:
    missing_library().install(monkeypatch)
    add_intel_card(tmp_path, 0, tiles=(12 * GiB,))
    snap = GpuSource(sysfs_root=tmp_path, platform="linux", psutil_module=PSUTIL, clock=lambda: 1.0).sample_sync()
    wide = _text(gpu_panel_data(snap, None, ()), 160)
    assert wide.splitlines()[0].startswith("GPU telemetry: 1 Intel GPU") or "Intel 0" in wide
    assert "Intel 0" in wide and "12.0 GiB" in wide
    assert "the kernel exposes no VRAM use for Intel GPUs" in wide


def test_once_text_says_the_gpu_shares_ram(tmp_path: Path) -> None:
    data = _gb10(tmp_path)
    fake = FakeNvml([FakeGpu(name="NVIDIA GB10", unsupported={"nvmlDeviceGetMemoryInfo"})])
    snap = GpuSource(nvml=fake.module, sysfs_root=tmp_path, platform="linux", psutil_module=PSUTIL).sample_sync()
    lines = gpu_text_lines(AppState(host_url="http://127.0.0.1:11434", gpu=snap))
    # the GPU panel's and the memory map's form, also in ASCII (LC_ALL=C)
    assert lines[1].startswith("GPU 0 NVIDIA GB10 (shares system RAM): 38.0 GiB/128 GiB used · 90.0 GiB free")
    assert to_ascii(lines[1], keep_cells=False).startswith(
        "GPU 0 NVIDIA GB10 (shares system RAM): 38.0 GiB/128 GiB used . 90.0 GiB free"
    )
    assert lines[2].startswith("  NVML reports no memory for this GPU (Not Supported)")
    assert data.ok


async def test_the_mounted_panel_says_it(tmp_path: Path) -> None:
    app = PanelApp(_gb10(tmp_path), 160)
    async with app.run_test(size=(160, 24)) as pilot:
        await pilot.pause()
        assert "shares system RAM" in app.query_one(GpuPanel).render().plain


def _snap(data: GpuPanelData, size: tuple[int, int], snap_compare: Any) -> bool:
    async def run_before(pilot: Any) -> None:
        await pilot.pause(0.1)

    result: bool = snap_compare(PanelApp(data, size[0]), terminal_size=size, run_before=run_before)
    return result


def test_gb10_panel_160x48(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(_gb10(tmp_path), (160, 48), snap_compare)


def test_apple_panel_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(_apple(tmp_path), (80, 24), snap_compare)
