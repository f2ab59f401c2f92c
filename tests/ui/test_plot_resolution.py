"""The history plots redraw at their resolution (at 160×48 idle CPU was once 5× the floor,
the plots rebuilding every poll though at most one dot per line moved).

A poll that adds a sample to a flat line (or one that moves it by less than a braille dot) must
not rebuild the plotext figure, on the history screen (``h``) nor in the dashboard's history
panel; a real change, a marker, a resize and a theme change still do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ProcSnapshot
from kvtop.model.history import History
from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.ui.screens.history import HistoryScreen, gpu_spec
from kvtop.ui.widgets.panels import HistoryPanel
from kvtop.ui.widgets.plot import PlotLine, PlotMarker, PlotSpec, PlotView, area_key, picture_key, render_plot
from tests.ui.fakes import HOST, TAKEN_AT, snapshot_at, step_index
from tests.ui.test_history_screen import _app, _settle

GiB = 1024**3
POLLS = 40


class Feed:
    """One GPU and the scenario's loaded models, sampled every second with values the test sets."""

    def __init__(self, history: History, start_s: float) -> None:
        self.history = history
        self.t = start_s
        self.base = fold_with_alerts(
            AppState(host_url=HOST), snapshot_at(step_index("A second model"), taken_at=start_s)
        )
        self.proc = ProcSnapshot(taken_at=0.0)

    def poll(self, used_bytes: int, vram_extra_bytes: int = 0) -> None:
        self.t += 1.0
        snap = dataclasses.replace(self.base.last_ok, taken_at=self.t)
        models = tuple(
            dataclasses.replace(v, size_vram_bytes=(v.size_vram_bytes or 0) + vram_extra_bytes)
            for v in self.base.models
        )
        gpu = GpuSnapshot(
            taken_at=self.t,
            status="GPU telemetry: NVML",
            ok=True,
            backend="nvml",
            devices=(
                GpuDevice(index=0, name="NVIDIA RTX 4090", memory_total_bytes=24 * GiB, memory_used_bytes=used_bytes),
            ),
        )
        self.history.record(
            dataclasses.replace(self.base, last_ok=snap, ollama=snap, models=models, gpu=gpu, procs=self.proc), self.t
        )


def flat_history(minutes: int = 15) -> tuple[History, Feed]:
    """``minutes`` of a flat 8 GiB GPU line at 1 s: longer than the 10 min window, so the line
    spans the whole axis (and the models were loaded before the first sample: no marker)."""
    h = History()
    feed = Feed(h, TAKEN_AT - minutes * 60)
    for _ in range(minutes * 60):
        feed.poll(8 * GiB)
    return h, feed


def _renders(plots: list[PlotView]) -> list[int]:
    return [p.renders for p in plots]


async def test_flat_and_barely_changed_polls_do_not_rebuild_the_history_screen_plots() -> None:
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        history, feed = flat_history()
        app.histories[HOST] = history
        await pilot.press("h")
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        await pilot.press("z")  # 1 min → 10 min (the window opened at 10 min: kvtop ran long enough)
        await pilot.press("left")
        assert screen.window_s == 600.0
        await pilot.pause()
        plots = list(screen.query(PlotView))
        assert all(p.renders >= 1 for p in plots if p.spec is not None and p.spec.empty is None)
        before = _renders(plots)
        gpu = screen.query_one("#plot-gpu", PlotView)
        for i in range(POLLS):
            # unchanged, then within a dot: 24 GiB over ~40 dot rows is ~0.6 GiB a dot
            feed.poll(8 * GiB + (i % 3) * 2**20)
            screen.update_plots()
            await pilot.pause()
        specs_moved = gpu.spec
        assert _renders(plots) == before, "a flat line that moved by less than a dot was redrawn"
        assert specs_moved is not None and specs_moved.lines[0].points[-1][1] > 0
        # a real change (8 → 20 GiB) is drawn at once, and only the plots it touches are rebuilt
        feed.poll(20 * GiB)
        screen.update_plots()
        await pilot.pause()
        assert gpu.renders == before[plots.index(gpu)] + 1
        assert "20.0 GiB of 24.0 GiB" in gpu.render().plain  # the legend's newest value


async def test_flat_polls_do_not_rebuild_the_dashboard_history_panel() -> None:
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        history, feed = flat_history()
        app.histories[HOST] = history
        panel = app.query_one(HistoryPanel)
        app.dashboard.repaint()
        for _ in range(100):
            await pilot.pause()
            plots = list(panel.query(PlotView))
            if len(plots) == 2 and plots[0].renders >= 1:  # the GPU plot (tok/s: no timing, a sentence)
                break
        else:
            raise AssertionError("the history panel did not draw its plots at 160×48")
        before = _renders(plots)
        for _ in range(POLLS):
            feed.poll(8 * GiB)
            app.dashboard.repaint()
            await pilot.pause()
        assert _renders(plots) == before


def _spec(points: tuple[tuple[float, float], ...], markers: tuple[PlotMarker, ...] = ()) -> PlotSpec:
    return PlotSpec("GPU memory", 600.0, "GiB", (PlotLine("GPU 0 used", points, "kv-weights"),), markers, gap_s=5.0)


def test_area_key_moves_with_a_dot_and_only_then() -> None:
    flat = tuple((float(x), 8.0) for x in range(-600, 1))
    shifted = tuple((x - 0.5, y) for x, y in flat)[1:] + ((0.0, 8.0),)  # the window moved by half a second
    assert area_key(_spec(flat), 140, 20) == area_key(_spec(shifted), 140, 20)
    # the window's end rounds up to a slot: the newest point ends up to a dot before the edge
    ends_short = tuple((x - 4.0, y) for x, y in flat)  # 4 s = 1.9 dots at 140 columns: the dot before the edge
    assert area_key(_spec(flat), 140, 20) == area_key(_spec(ends_short), 140, 20)
    assert area_key(_spec(flat), 140, 20) != area_key(_spec(flat[:-8]), 140, 20)  # 8 s = 3.7 dots short
    assert area_key(_spec(flat), 140, 20) != area_key(_spec(flat[:-1] + ((0.0, 12.0),)), 140, 20)  # a step
    assert area_key(_spec(flat), 140, 20) != area_key(_spec(flat), 120, 20)  # a resize
    assert area_key(_spec(flat), 140, 20) != area_key(_spec(flat[300:]), 140, 20)  # half the line is gone
    gap = flat[:200] + flat[260:]
    assert area_key(_spec(flat), 140, 20) != area_key(_spec(gap), 140, 20)  # a gap breaks the line
    marker = (PlotMarker(-301.0, "load a", "kv-ok"),)
    assert area_key(_spec(flat, marker), 140, 20) != area_key(_spec(flat), 140, 20)
    later = (PlotMarker(-301.5, "load a", "kv-ok"),)
    assert area_key(_spec(flat, marker), 140, 20) == area_key(_spec(flat, later), 140, 20)  # under a dot
    farther = (PlotMarker(-320.0, "load a", "kv-ok"),)
    assert area_key(_spec(flat, marker), 140, 20) != area_key(_spec(flat, farther), 140, 20)


def test_equal_area_keys_render_the_same_plot_area() -> None:
    """The key's promise on the real history: two polls one second apart of a flat line draw the
    same figure (what makes skipping the rebuild invisible)."""
    history, feed = flat_history()
    first = gpu_spec(history, 600.0, 320, 4.0)
    second = first
    for _ in range(5):  # until the window's end moves a slot (1.875 s)
        feed.poll(8 * GiB)
        second = gpu_spec(history, 600.0, 320, 4.0)
        if second != first:
            break
    assert first.lines[0].points[0] != second.lines[0].points[0]  # the points moved
    colors: dict[str, Any] = {}
    assert picture_key(first, 156, 22, colors) == picture_key(second, 156, 22, colors)
    assert render_plot(first, 156, 22, colors).plain == render_plot(second, 156, 22, colors).plain
