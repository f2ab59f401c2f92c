"""History plots fit the data there is, tell series apart without colour, and
give no "--log is off" hint in --demo or --replay."""

from __future__ import annotations

from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.model.history import History
from kvtop.sources.recording import read_recording, resolve_recording
from kvtop.ui.app import make_app
from kvtop.ui.screens.history import HistoryScreen, gpu_spec, kv_spec, shown_span, tps_spec
from kvtop.ui.widgets.plot import PlotView, legend_glyph, render_plot
from tests.ui.test_history_screen import _app, _settle, scripted_history
from tests.ui.fakes import HOST
from tests.ui.test_plan_screen import wait_for


class _Span(History):
    def __init__(self, span_s: float) -> None:
        super().__init__()
        self._span = span_s

    def span_s(self) -> float:
        return self._span


@pytest.mark.parametrize(
    ("data_s", "window_s", "shown"),
    [
        (0, 60, 30),
        (20, 60, 30),
        (45, 60, 60),
        (90, 600, 120),
        (250, 600, 300),
        (540, 600, 600),
        (700, 600, 600),
        (90, 3600, 120),
        (1500, 3600, 1800),
        (5000, 3600, 3600),
        (20, 600, 30),
    ],
)
def test_the_axis_spans_what_there_is(data_s: float, window_s: float, shown: float) -> None:
    assert shown_span(_Span(data_s), window_s) == shown


async def test_a_short_history_fills_the_ten_minute_window() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        await pilot.press("h", "z")  # the 10 min window over a few seconds of history
        await pilot.pause(0.2)
        screen = app.screen
        assert isinstance(screen, HistoryScreen) and screen.window_s == 600.0
        spec = screen.query_one("#plot-gpu", PlotView).spec
        assert spec is not None and spec.span_s == 30.0 and "last 30 s" in spec.title
        assert "10 min window, 30 s shown (all there is)" in str(screen.query_one("#history-title").render())
        text = render_plot(spec, 116, 14, {}).plain
        assert "-10m" not in text and "-30s" in text  # the x axis: what there is


def _two_series(distinct: bool) -> tuple[Any, Any]:
    h = scripted_history()
    return kv_spec(h, 600.0, 200, 5.0, distinct), tps_spec(h, 600.0, 200, "", distinct)


def test_without_colour_each_series_has_its_own_marker_and_legend_mark() -> None:
    kv, tps = _two_series(True)
    assert len(kv.lines) == 3
    marks = [ln.marker for ln in kv.lines]
    assert len(set(marks)) == 3 and marks[0] == "braille"
    glyphs = [legend_glyph(ln) for ln in kv.lines]
    assert len(set(glyphs)) == 3
    text = render_plot(kv, 120, 16, {})  # no colours at all, as under NO_COLOR
    for glyph, line in zip(glyphs[1:], kv.lines[1:]):
        assert glyph in text.plain  # drawn with it, and the legend says so
        assert f"{glyph} {line.label}" in text.plain
    assert {m.style for m in kv.markers} == {"default", "double", "dotted"}  # load, reload, unload
    assert "║ reload" in text.plain and "┆" in text.plain  # the unload marker is drawn dotted
    plain_kv, _ = _two_series(False)
    assert all(ln.marker is None for ln in plain_kv.lines)  # colours tell them apart: braille lines
    assert {m.style for m in plain_kv.markers} == {"default"}


async def test_the_mono_theme_draws_distinct_markers() -> None:
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, theme="kvtop-mono"),
        _app().source,
        gpu_source=_app().gpu_source,
        proc_source=_app().proc_source,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        app.histories[HOST] = scripted_history()
        await pilot.press("h")
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, HistoryScreen) and screen.distinct()
        spec = screen.query_one("#plot-kv", PlotView).spec
        assert spec is not None and len({ln.marker for ln in spec.lines}) == len(spec.lines) == 3


def test_gpu_lines_and_tps_points_get_markers_too() -> None:
    h = scripted_history()
    gpu = gpu_spec(h, 600.0, 200, 5.0, True)
    assert gpu.lines[0].marker == "braille" and gpu.lines[1].kind == "reference"
    _, tps = _two_series(True)
    assert tps.lines[0].marker == "•"


async def test_demo_gives_no_log_flag_hint() -> None:
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, demo=True),
        _app().source,
        gpu_source=_app().gpu_source,
        proc_source=_app().proc_source,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        await pilot.press("h")
        await pilot.pause(0.2)
        spec = app.screen.query_one("#plot-tps", PlotView).spec
        assert spec is not None and spec.empty is not None
        assert "--log" not in spec.empty and "demo" in spec.empty


async def test_replay_gives_no_log_flag_hint() -> None:
    app = make_app(
        Settings(host_url="http://unused:1", log_spec="none"), replay=read_recording(resolve_recording("demo"))
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.state.ollama is not None, timeout_s=10)
        await pilot.press("h")
        await pilot.pause(0.2)
        spec = app.screen.query_one("#plot-tps", PlotView).spec
        assert spec is not None and spec.empty is not None
        # the bundled demo recording carries the stand-in's log: the hint names it, not --log
        assert "--log" not in spec.empty and "file:server.log" in spec.empty


def test_history_mono_80x24(snap_compare: Any) -> None:
    """The scripted history under the mono theme: each series its own marker, markers by style."""
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, theme="kvtop-mono"),
        _app().source,
        gpu_source=_app().gpu_source,
        proc_source=_app().proc_source,
    )

    async def run_before(pilot: Any) -> None:
        await _settle(pilot)
        pilot.app.histories[HOST] = scripted_history()
        await pilot.press("h")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_the_panel_plots_the_most_recent_models_and_says_how_many_there_are() -> None:
    """The history panel draws at most ``PANEL_MAX_MODELS`` models (the history screen all of them):
    without GPU telemetry one VRAM line per model, the title counts the ones left out."""
    from kvtop.model.fold_alerts import fold_with_alerts
    from kvtop.model.views import AppState
    from kvtop.ui.widgets.panels import PANEL_MAX_MODELS
    from tests.ui.fakes import TAKEN_AT, snapshot_at, step_index

    h = History()
    state = AppState(host_url=HOST)
    for t in range(0, 20, 2):  # three models loaded, no GPU sample
        state = fold_with_alerts(state, snapshot_at(step_index("spills"), taken_at=TAKEN_AT + t))
        h.record(state, TAKEN_AT + t)
    every = gpu_spec(h, 600.0, 200, 5.0)
    assert len(every.lines) == 3 and "most recent" not in every.title
    two = gpu_spec(h, 600.0, 200, 5.0, max_models=2)
    assert [ln.label for ln in two.lines] == [ln.label for ln in every.lines][:2]
    assert "· 2 most recent of 3 models (h: all) ·" in two.title
    tps = tps_spec(scripted_history(), 600.0, 200, "", max_models=1)
    assert "1 most recent of 3 models (h: all)" in tps.title and len(tps.lines) <= 1
    assert PANEL_MAX_MODELS == 8 and gpu_spec(h, 600.0, 200, 5.0, max_models=PANEL_MAX_MODELS) == every
