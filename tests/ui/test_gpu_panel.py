"""The GPU panel: its text at 80 and 160 columns, its colours from the theme, and SVG snapshots
(just the widget, in a tiny app with kvtop's themes) of a shared two-GPU server with a foreign
process, of a machine without NVIDIA, and of a lost GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.app import App, ComposeResult

from kvtop.model.gpu import GpuPanelData, gpu_panel_data
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, SystemMemory
from kvtop.sources.gpu_nvml import STATUS_NO_LIBRARY
from kvtop.ui.themes import DEFAULT_THEME, default_variables, load_themes
from kvtop.ui.widgets.gpu_panel import GpuPanel, gpu_detail_rows, panel_text
from tests.fakes.nvml import GiB
from tests.fakes.scenario import TRAINER_PID, XORG_PID, demo_models, shared_nvml, shared_panel_data, shared_sample

COLORS = default_variables()
NO_GPU = GpuPanelData(
    status=STATUS_NO_LIBRARY,
    ok=False,
    system=SystemMemory(
        ram_total_bytes=64 * GiB,
        ram_available_bytes=60 * GiB,
        ram_used_bytes=4 * GiB,
        swap_total_bytes=0,
        swap_used_bytes=0,
    ),
)


def _text(data: GpuPanelData, width: int) -> Any:
    return panel_text(
        data.views, data.status, width, COLORS, system=data.system, notes=data.notes, usages=data.usages, ok=data.ok
    )


def test_compact_is_one_line_per_gpu(tmp_path: Path) -> None:
    lines = _text(shared_panel_data(tmp_path), 80).plain.splitlines()
    assert len(lines) == 3  # two GPUs and RAM/swap
    assert lines[0].startswith("GPU0 RTX A6000 ") and lines[1].startswith("GPU1 RTX 4090 ")
    assert "14G/48G" in lines[0] and "45%" in lines[0] and "61°C" in lines[0] and "250W" in lines[0]
    assert lines[2] == "RAM 24G/64G · swap 256M/8.0G"  # total − available: the memory map's used
    assert all(cell_len(line) <= 78 for line in lines)


def test_wide_has_split_foreign_processes_and_measured_vram(tmp_path: Path) -> None:
    text = _text(shared_panel_data(tmp_path), 160).plain
    lines = text.splitlines()
    assert all(cell_len(line) <= 158 for line in lines)
    assert lines[0].startswith("GPU 0  RTX A6000") and "61°C" in lines[0] and "250/300 W" in lines[0]
    assert "█ qwen3:1.7b-q4_K_M 2.0 GiB   █ gemma4:latest 3.5 GiB   ▄ other processes 8.0 GiB" in lines[1]
    assert f"PID {TRAINER_PID}" in text and "alice  python train.py --epochs 3" in text
    assert f"PID {XORG_PID}" in text and "Xorg  (access denied: cmdline and username not readable)" in text
    assert "gemma4:latest  measured 5.2 GiB vs size_vram 5.0 GiB (+290 MiB CUDA context and overhead)" in text
    assert "runner PID 4102" in text
    assert lines[-1] == "RAM 24.0 GiB/64.0 GiB used · 40.0 GiB free · swap 256 MiB/8.0 GiB"


def test_colours_come_from_the_theme(tmp_path: Path) -> None:
    text = _text(shared_panel_data(tmp_path), 160)
    styles = {str(span.style) for span in text.spans}
    assert COLORS["kv-warn"] in styles and COLORS["kv-free"] in styles and COLORS["kv-weights"] in styles
    bare = {" ".join(w for w in s.split() if w not in ("bold", "dim", "reverse")) for s in styles}
    assert all(s in COLORS.values() or s == "" for s in bare), styles


def test_strip_speaks_the_memory_maps_glyphs_and_colours(tmp_path: Path) -> None:
    """From 120×36 the strip and the map show together; ▓ ▒ are the map's KV and compute,
    so the strip's other Ollama / other processes take the map's ▚ ▄, in the map's colours."""
    from kvtop.ui.widgets import gpu_panel, memory_map

    for kind in ("ollama", "other", "unattributed", "free"):
        assert gpu_panel.GLYPHS[kind] == memory_map.GLYPHS[kind]
        assert gpu_panel.KIND_VARS[kind] == memory_map.KIND_VARS[kind]
    assert gpu_panel.GLYPHS["model"] == memory_map.GLYPHS["weights"] == "█"
    assert not {"▓", "▒"} & set(gpu_panel.GLYPHS.values())
    text = _text(shared_panel_data(tmp_path), 80)
    first = text.plain.splitlines()[0]
    assert first.startswith("GPU0 RTX A6000 ████▄▄▄▄▄▄·░") and "▓" not in text.plain and "▒" not in text.plain
    # every runner in the weights colour (amber would be the map's KV cache), the second one dim
    runners = [str(s.style) for s in text.spans if "█" in text.plain[s.start : s.end]]
    weights = COLORS["kv-weights"]
    assert runners and set(runners) <= {weights, f"dim {weights}"} and f"dim {weights}" in runners
    assert COLORS["kv-kv"] not in {str(s.style) for s in text.spans}
    # a runner wide enough carries its name, as in the map
    assert "qwe…8_0" in text.plain.splitlines()[1]
    # unattributed memory is a difference kvtop computes: estimated (~), as the map marks it
    wide = _text(shared_panel_data(tmp_path), 160).plain.splitlines()
    assert "· driver, reserved and unlisted ~1.0 GiB   ░ free 33.5 GiB" in wide[1]


def test_no_gpu_is_one_line() -> None:
    lines = _text(NO_GPU, 80).plain.splitlines()
    assert lines == ["GPU telemetry: no NVIDIA driver (NVML library not found) · RAM 4.0G/64G"]
    wide = _text(NO_GPU, 160).plain.splitlines()
    assert wide == ["GPU telemetry: no NVIDIA driver (NVML library not found) · RAM 4.0G/64G"]
    assert NO_GPU.system is not None
    with_swap = dataclasses.replace(NO_GPU, system=dataclasses.replace(NO_GPU.system, swap_total_bytes=8 * GiB))
    assert _text(with_swap, 80).plain.splitlines() == [
        "GPU telemetry: no NVIDIA driver (NVML library not found)",
        "RAM 4.0G/64G · swap 0B/8.0G",
    ]


def test_lost_gpu_line(tmp_path: Path) -> None:
    nvml = shared_nvml()
    gpu, procs, models = shared_sample(tmp_path, nvml)
    from kvtop.sources.gpu import GpuSource
    from tests.fakes.scenario import FAKE_PSUTIL

    source = GpuSource(nvml=nvml.module, sysfs_root=tmp_path, platform="linux", psutil_module=FAKE_PSUTIL)
    source.sample_sync()
    nvml.lose(1)
    data = gpu_panel_data(source.sample_sync(), procs, models)
    for width in (80, 160):
        text = _text(data, width).plain
        assert "GPU is lost" in text and "✖" in text
        assert "RTX A6000" in text


def test_namespace_note_is_shown(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    procs = dataclasses.replace(
        procs, namespace=dataclasses.replace(procs.namespace, mismatch=True, note="host PIDs: names not shown")
    )
    for width in (80, 160):
        assert _text(gpu_panel_data(gpu, procs, models), width).plain.splitlines()[-1] == "host PIDs: names not shown"


def test_detail_rows(tmp_path: Path) -> None:
    data = shared_panel_data(tmp_path)
    gemma = next(u for u in data.usages if u.name == "gemma4:latest")
    rows = gpu_detail_rows(gemma, data.status, data.ok)
    labels = [r[0] for r in rows]
    assert labels == ["telemetry", "runner PID", "measured VRAM", "  on GPU 0", "  on GPU 1", "size_vram", "difference"]
    assert rows[0][:2] == ("telemetry", "available")
    assert rows[1][1] == "4102" and rows[2][2] == "[reported]"
    assert rows[6][1].startswith("+")
    assert gpu_detail_rows(None, STATUS_NO_LIBRARY) == [("telemetry", "not available", "", STATUS_NO_LIBRARY)]


# --------------------------------------------------------------------------------------------
# the widget


class PanelApp(App[None]):
    """Just the panel, with kvtop's themes."""

    def __init__(self, data: GpuPanelData, width: int) -> None:
        super().__init__()
        self.data = data
        self.width = width

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return default_variables()

    def compose(self) -> ComposeResult:
        yield GpuPanel(id="gpu")

    def on_mount(self) -> None:
        for theme in load_themes().values():
            self.register_theme(theme)
        self.theme = DEFAULT_THEME
        self.query_one(GpuPanel).show_data(self.data, self.width)


async def test_show_redraws_only_on_change(tmp_path: Path) -> None:
    data = shared_panel_data(tmp_path)
    app = PanelApp(data, 80)
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(GpuPanel)
        await pilot.pause()
        assert panel.size.height == 3
        calls: list[bool] = []
        original = panel.refresh

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls.append(True)
            return original(*args, **kwargs)

        panel.refresh = counting  # type: ignore[method-assign]
        panel.show_data(data, 80)
        assert calls == []
        panel.show_data(data, 160)
        assert calls
        await pilot.pause()
        assert panel.size.height > 3


async def test_waiting_text_before_the_first_sample() -> None:
    class Empty(App[None]):
        def compose(self) -> ComposeResult:
            yield GpuPanel()

    app = Empty()
    async with app.run_test(size=(80, 10)):
        assert "waiting for the first sample" in app.query_one(GpuPanel).render().plain


def _snap(data: GpuPanelData, size: tuple[int, int], snap_compare: Any) -> bool:
    async def run_before(pilot: Any) -> None:
        await pilot.pause(0.1)

    result: bool = snap_compare(PanelApp(data, size[0]), terminal_size=size, run_before=run_before)
    return result


def test_panel_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(shared_panel_data(tmp_path), (80, 24), snap_compare)


def test_panel_160x48(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(shared_panel_data(tmp_path), (160, 48), snap_compare)


def test_panel_no_gpu_80x24(snap_compare: Any) -> None:
    assert _snap(NO_GPU, (80, 24), snap_compare)


def test_gpu_json_matches_panel_inputs(tmp_path: Path) -> None:
    """The panel and ``--once --json`` join the same samples (a sanity check of the test data)."""
    gpu, procs, models = shared_sample(tmp_path)
    assert isinstance(gpu, GpuSnapshot) and isinstance(procs, ProcSnapshot)
    assert gpu_panel_data(gpu, procs, models).views == gpu_panel_data(gpu, procs, demo_models()).views
