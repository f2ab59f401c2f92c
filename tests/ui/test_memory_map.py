"""The memory map widget: its text (full width, labels, marks, one line per device when compact),
SVG snapshots of five cases (one GPU and three models, two GPUs with a split model,
a spill, foreign processes, no GPU), and in the dashboard: clicking or hovering a model's stretch
selects it in the table, the map is computed and drawn only when its inputs change, and a hidden map
costs nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.app import App, ComposeResult

from kvtop.model.gpu_snapshots import GpuSnapshot, SystemMemory
from kvtop.model.memmap import MemoryMap, memory_map
from kvtop.sources.gpu_nvml import STATUS_NO_LIBRARY
from kvtop.ui.themes import DEFAULT_THEME, default_variables, load_themes
from kvtop.ui.widgets.memory_map import MemoryMapPanel, key_kinds, key_lines, map_text
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.nvml import GiB, MiB
from tests.fakes.scenario import shared_sample
from tests.ui.mapfakes import foreign_nvml, one_gpu_nvml, sample_with, settle, shared_app, with_devices

COLORS = default_variables()
Q4, GEMMA, Q8 = "qwen3:1.7b-q4_K_M", "gemma4:latest", "qwen3:1.7b-q8_0"


def two_gpus(tmp: Path) -> MemoryMap:
    return memory_map(*shared_sample(tmp))


def one_gpu(tmp: Path) -> MemoryMap:
    return memory_map(*sample_with(tmp, one_gpu_nvml()))


def spill(tmp: Path) -> MemoryMap:
    """gemma spilled, its CPU part as the runner log allocates it (weights on CPU, KV and compute on CUDA_Host)."""
    gpu, procs, models = shared_sample(tmp)
    models = with_devices(
        models,
        GEMMA,
        {
            "weights": {"CUDA0": 3 * GiB, "CUDA1": 1 * GiB, "CPU": 1_000_000_000},
            "kv": {"CUDA0": 64 * MiB, "CUDA1": 40 * MiB, "CUDA_Host": 8 * MiB},
            "compute": {"CUDA0": 200 * MiB, "CUDA1": 100 * MiB, "CUDA_Host": 20 * MiB},
        },
    )
    return memory_map(gpu, procs, models)


def foreign(tmp: Path) -> MemoryMap:
    gpu, procs, models = sample_with(tmp, foreign_nvml())
    return memory_map(gpu, procs, tuple(m for m in models if m.name == Q8))


def no_gpu(tmp: Path) -> MemoryMap:
    _gpu, _procs, models = shared_sample(tmp)
    system = SystemMemory(ram_total_bytes=64 * GiB, ram_available_bytes=48 * GiB, ram_used_bytes=16 * GiB)
    return memory_map(
        GpuSnapshot(taken_at=0.0, status=STATUS_NO_LIBRARY, problem="no_library", system=system), None, models
    )


def test_wide_text_full_width_with_names_and_marks(tmp_path: Path) -> None:
    text, hits = map_text(two_gpus(tmp_path), 118, COLORS, compact=False)
    lines = text.plain.splitlines()
    assert lines[0] == "GPU 0 NVIDIA RTX A6000  14.5 GiB/48.0 GiB used · 33.5 GiB free"  # used/total, as the GPU strip
    assert cell_len(lines[1]) == 118 and lines[1].endswith("░")  # the bar spans the width
    # the legend wraps at whole entries: nothing is cut (free memory is the title's, not repeated)
    assert lines[2] == (
        "█▓▒▐ qwen3:1.7b-q4_K_M W 1.3G KV ~448M C ~61M +~242M  ▇ gemma4:latest 3.5G  "
        "▄ alice python 8.0G  · unattributed ~1.0G"
    )
    assert "gemma4▇" in lines[1]  # a name too long for its stretch loses ":latest" before it is cut
    assert lines[3] == "GPU 1 NVIDIA GeForce RTX 4090  8.8 GiB/24.0 GiB used · 15.2 GiB free"
    assert "qwen3:1.7b-q8_0" in lines[4]  # the name written over its stretch of GPU 1's bar
    assert (
        lines[5] == "▇ gemma4:latest 1.8G  █▓▒▐ qwen3:1.7b-q8_0 W 2.0G KV ~3.5G C ~141M +~449M  ▄ Xorg 300M  "
        "· unattributed ~640M"
    )
    assert lines[6] == "RAM  24.0 GiB/64.0 GiB used · 40.0 GiB free"
    assert lines[8] == "▇ gemma4:latest 1.2G  · OS and other programs ~23G"  # reported, as the table
    # the key: only what the bars draw, every entry whole at 118 cells
    assert lines[9:] == [
        "~ estimated, no mark: allocated or reported  █ weights ▓ KV cache ▒ compute ▇ model (not split) ▐ unexplained",
        "▄ other processes · unattributed ░ free",
    ]
    assert all(cell_len(line) <= 118 and "…" not in line for line in lines[2:3] + lines[5:])
    assert {(h.y, h.model[0]) for h in hits} == {(1, Q4), (1, GEMMA), (4, GEMMA), (4, Q8), (7, GEMMA)}


def test_key_lists_only_the_kinds_drawn_and_wraps_at_whole_entries(tmp_path: Path) -> None:
    mm = no_gpu(tmp_path)
    assert key_kinds(mm) == ("weights", "kv", "compute", "model", "unattributed", "free")
    kinds = ("weights", "kv", "compute", "model", "overhead", "ollama", "other", "unattributed", "free")
    lines = [t.plain for t in key_lines(kinds, 78, COLORS)]
    assert lines == [
        "~ estimated, no mark: allocated or reported  █ weights ▓ KV cache ▒ compute",
        "▇ model (not split) ▐ unexplained ▚ other Ollama ▄ other processes",
        "· unattributed ░ free",
    ]
    assert [t.plain for t in key_lines((), 78, COLORS)] == ["~ estimated, no mark: allocated or reported"]


async def test_panel_height_follows_the_wrapped_lines(tmp_path: Path) -> None:
    mm = two_gpus(tmp_path)
    for width, key_rows in ((120, 2), (220, 1)):
        app = MapApp(mm, compact=False)
        async with app.run_test(size=(width, 30)) as pilot:
            await pilot.pause()
            panel = app.query_one(MemoryMapPanel)
            drawn = map_text(mm, width - 2, COLORS, compact=False)[0].plain.splitlines()
            assert panel.size.height == len(drawn) == panel.line_count()
            assert drawn[-key_rows].startswith("~ estimated") and drawn[-1].endswith("░ free")


def test_compact_is_one_line_per_device(tmp_path: Path) -> None:
    text, hits = map_text(two_gpus(tmp_path), 78, COLORS, compact=True)
    lines = text.plain.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("GPU0 RTX A6000   ") and lines[0].endswith(" 14G/48G, 34G free")
    assert lines[1].startswith("GPU1 RTX 4090    ") and lines[1].endswith(" 8.8G/24G, 15G free")
    assert lines[2].startswith("RAM              ") and lines[2].endswith(" 24G/64G, 40G free")
    assert all(cell_len(line) == 78 for line in lines)
    assert hits and all(h.x0 >= 17 for h in hits)


def test_spill_joins_the_ram_part_by_name(tmp_path: Path) -> None:
    lines = map_text(spill(tmp_path), 118, COLORS, compact=False)[0].plain.splitlines()
    assert lines[8] == "RAM  24.0 GiB/64.0 GiB used · 40.0 GiB free"
    assert lines[10] == "█▓▒ gemma4:latest W 954M KV 8.0M C 20M  · OS and other programs ~23G"
    assert "gemma4:latest W 3.0G KV 64M C 200M +~248M" in lines[2]  # the log's CUDA0 figures, no mark


def test_no_gpu_says_so_and_marks_reported(tmp_path: Path) -> None:
    lines = map_text(no_gpu(tmp_path), 118, COLORS, compact=False)[0].plain.splitlines()
    assert lines[0] == STATUS_NO_LIBRARY
    assert lines[1].startswith("VRAM (/api/ps, no GPU telemetry)  total and free not known")
    assert "▇ gemma4:latest 5.0G" in lines[3]
    assert lines[4] == "RAM  16.0 GiB/64.0 GiB used · 48.0 GiB free"


def test_text_from_the_server_is_data(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    import dataclasses

    evil = dataclasses.replace(gpu.devices[0], name="[bold red]X\x1b[2J")
    mm = memory_map(dataclasses.replace(gpu, devices=(evil, gpu.devices[1])), procs, models)
    text = map_text(mm, 118, COLORS, compact=False)[0]
    assert "\x1b" not in text.plain and "[bold red]X" in text.plain  # shown as text, never as markup


# --------------------------------------------------------------------------------------------
# snapshots of the widget alone


class MapApp(App[None]):
    """Just the map, with kvtop's themes."""

    def __init__(self, mm: MemoryMap, compact: bool) -> None:
        super().__init__()
        self.mm, self.compact = mm, compact

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return default_variables()

    def compose(self) -> ComposeResult:
        yield MemoryMapPanel(classes="-shown")

    def on_mount(self) -> None:
        for theme in load_themes().values():
            self.register_theme(theme)
        self.theme = DEFAULT_THEME
        self.query_one(MemoryMapPanel).show(self.mm, compact=self.compact)


def _snap(mm: MemoryMap, size: tuple[int, int], snap_compare: Any, compact: bool = False) -> bool:
    async def run_before(pilot: Any) -> None:
        await pilot.pause(0.1)

    result: bool = snap_compare(MapApp(mm, compact), terminal_size=size, run_before=run_before)
    return result


def test_map_one_gpu_three_models(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(one_gpu(tmp_path), (120, 9), snap_compare)


def test_map_two_gpus_split_model(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(two_gpus(tmp_path), (120, 11), snap_compare)


def test_map_two_gpus_compact(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(two_gpus(tmp_path), (80, 4), snap_compare, compact=True)


def test_map_spill(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(spill(tmp_path), (120, 13), snap_compare)


def test_map_foreign_processes(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(foreign(tmp_path), (120, 8), snap_compare)


def test_map_no_gpu(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap(no_gpu(tmp_path), (120, 9), snap_compare)


# --------------------------------------------------------------------------------------------
# in the dashboard


def _hit_offset(app: Any, model: str, line: int | None = None) -> tuple[int, int]:
    panel = app.query_one(MemoryMapPanel)
    _text, hits = panel._text()
    hit = next(h for h in hits if h.model[0] == model and (line is None or h.y == line))
    region = panel.content_region
    return region.x + (hit.x0 + hit.x1) // 2, region.y + hit.y


async def test_click_and_hover_select_the_model(tmp_path: Path) -> None:
    app = shared_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.query_one(ModelsTable)
        assert table.selected_view is not None and table.selected_view.name == Q4
        await pilot.click(offset=_hit_offset(app, Q8))
        await pilot.pause(0.1)
        assert table.selected_view is not None and table.selected_view.name == Q8
        await pilot.hover(offset=_hit_offset(app, GEMMA, line=7))  # its CPU part on the RAM bar
        await pilot.pause(0.1)
        assert table.selected_view is not None and table.selected_view.name == GEMMA


async def test_map_drawn_only_when_its_inputs_change(tmp_path: Path) -> None:
    app = shared_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        panel = app.query_one(MemoryMapPanel)
        renders, steps = panel.renders, app.apply_steps
        for _ in range(40):  # the fixed GPU source posts the same sample every 0.25 s
            await pilot.pause(0.05)
            if app.apply_steps >= steps + 3:
                break
        assert app.apply_steps >= steps + 3
        assert panel.renders == renders  # equal map, same width: nothing drawn again


async def test_hidden_map_costs_nothing(tmp_path: Path) -> None:
    app = shared_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert not app.query_one(MemoryMapPanel).display
        assert app.dashboard.panels.map_computations == 0 and app.query_one(MemoryMapPanel).renders == 0


async def test_map_shows_every_line_it_draws_as_the_width_changes(tmp_path: Path) -> None:
    """The legends and the key wrap, so the map's height follows its map and its width: every line,
    the key's last entry included, is on the screen (at 120 columns the key lost ``unattributed``
    and ``free``, and the map once kept a 2-line height under its 7 lines)."""
    from tests.ui.screen_text import screen_when

    app = shared_app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        panel = app.query_one(MemoryMapPanel)
        for size, key_rows in (((120, 36), 2), ((220, 55), 1), ((120, 36), 2)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.2)
            drawn = panel.render().plain.splitlines()
            assert len(drawn) == panel.line_count()
            lines = await screen_when(
                pilot,
                lambda lines: (
                    panel.size.height == len(drawn)
                    and all(any(row.strip() == d.strip() for row in lines) for d in drawn)
                ),
            )
            key = next(i for i, row in enumerate(lines) if row.strip().startswith("~ estimated, no mark"))
            assert lines[key + key_rows - 1].rstrip().endswith("░ free")
