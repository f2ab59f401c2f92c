"""The memory map's height is counted without drawing it (at 1,000 models the panel laid
out its whole legend on every repaint only to count lines): ``map_line_count`` equals the lines
``map_text`` draws for every case of tests/ui/test_memory_map.py, a 300-model map, names wider
than any line, and every width from 10 to 200 cells; the panel counts once per map and width."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual.app import App, ComposeResult

from kvtop.model.memmap import MemoryMap
from kvtop.ui.widgets.memory_map import MemoryMapPanel, map_line_count, map_text
from tests.ui.test_memory_map import COLORS, foreign, no_gpu, one_gpu, spill, two_gpus


def many_models(tmp: Path, n: int = 300) -> MemoryMap:
    """The two-GPU map with each bar's segments repeated ``n // 3`` times under other names (some
    long, some wide characters): a legend of hundreds of entries."""
    mm = two_gpus(tmp)
    bars = []
    for bar in mm.bars:
        segs = []
        for k in range(n // 3):
            for s in bar.segments:
                if s.model is None:
                    continue
                name = f"{'长' * (k % 4)}copy{k}-{s.label}" + ("-x" * 40 if k % 17 == 0 else "")
                segs.append(dataclasses.replace(s, label=name, model=(name, s.model[1])))
        segs += [s for s in bar.segments if s.model is None]
        bars.append(dataclasses.replace(bar, segments=tuple(segs)))
    return dataclasses.replace(mm, bars=tuple(bars))


def test_counted_lines_equal_drawn_lines(tmp_path: Path) -> None:
    maps = [f(tmp_path) for f in (two_gpus, one_gpu, spill, foreign, no_gpu)] + [many_models(tmp_path)]
    assert sum(len(b.segments) for b in maps[-1].bars) > 300
    for mm in maps:
        for compact in (False, True):
            for width in range(10, 201, 7):
                drawn = len(map_text(mm, width, COLORS, compact=compact)[0].plain.splitlines())
                assert map_line_count(mm, width, compact=compact) == drawn, (width, compact)


class MapApp(App[None]):
    def compose(self) -> ComposeResult:
        yield MemoryMapPanel()


async def test_the_panel_counts_once_per_map_and_width(tmp_path: Path) -> None:
    mm = many_models(tmp_path)
    app = MapApp()
    async with app.run_test(size=(120, 60)) as pilot:
        panel = app.query_one(MemoryMapPanel)
        panel.show(mm, compact=False)
        await pilot.pause()
        counted = panel.counts
        for _ in range(20):  # the app's layout asks for the lines on every repaint
            assert panel.line_count() == map_line_count(mm, panel.content_size.width, compact=False)
        assert panel.counts == counted
        await pilot.resize_terminal(100, 60)
        await pilot.pause()
        assert panel.line_count() == map_line_count(mm, panel.content_size.width, compact=False)
        assert panel.counts == counted + 1


def test_a_long_legend_keeps_its_lines_counts_the_models_left_out_and_every_other_entry(tmp_path: Path) -> None:
    from kvtop.model.memmap import MODEL_KINDS
    from kvtop.ui.widgets.memory_map import LEGEND_MAX_LINES, legend_lines, legend_plan

    mm = many_models(tmp_path)
    for bar in mm.bars:
        lines = [t.plain for t in legend_lines(bar, 118, COLORS)]
        assert len(lines) <= LEGEND_MAX_LINES
        text = "  ".join(lines)
        models = {s.model for s in bar.segments if s.kind in MODEL_KINDS}
        others = [
            s
            for s in bar.segments
            if s.kind not in MODEL_KINDS and not (s.kind == "free" and bar.free_bytes is not None)
        ]
        plan = legend_plan(bar, 118)
        shown = len(plan) - len(others) - 1  # the model entries drawn: all but the others and "+N more"
        assert 0 < shown < len(models)
        more = [w for w in text.split("  ") if "more model" in w]
        assert len(more) == 1 and int(more[0].split("+")[1].split()[0]) == len(models) - shown
        for s in bar.segments:  # every entry that is not a model's still shows
            if s.kind not in MODEL_KINDS and not (s.kind == "free" and bar.free_bytes is not None):
                assert s.label[:20] in text


class _Timed:
    """Each sample a new copy of the same measurement with the time it is taken."""

    def __init__(self, source: object) -> None:
        self.source = source
        self.samples = 0

    async def sample(self, *args: object) -> object:
        import time

        self.samples += 1
        snap = await self.source.sample(*args)  # type: ignore[attr-defined]
        return dataclasses.replace(snap, taken_at=time.time() + self.samples)

    async def aclose(self) -> None:
        await self.source.aclose()  # type: ignore[attr-defined]


async def test_samples_that_differ_only_in_time_do_not_join_the_map_again(tmp_path: Path) -> None:
    from tests.ui.mapfakes import settle, shared_app

    app = shared_app(tmp_path)
    app.gpu_source, app.proc_source = _Timed(app.gpu_source), _Timed(app.proc_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        computed, steps, gpu0 = app.dashboard.panels.map_computations, app.apply_steps, app.state.gpu
        for _ in range(100):  # new GPU and process samples every 0.25 s, each a new object
            await pilot.pause(0.05)
            if app.apply_steps >= steps + 3 and app.state.gpu is not gpu0:
                break
        assert app.apply_steps >= steps + 3 and app.state.gpu is not gpu0
        assert app.dashboard.panels.map_computations == computed
