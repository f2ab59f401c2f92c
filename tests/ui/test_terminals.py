"""The dashboard on poor terminals: ASCII mode (``--ascii``, no UTF-8 locale) and ``NO_COLOR``.

ASCII mode draws every line, kvtop's and Textual's (borders, footer), through one line filter
(``kvtop.ui.ascii_mode``): the screen holds no character outside ASCII, the header says ASCII, and
the marks are the legend's. Under ``NO_COLOR`` every state must still be told by text or glyph:
spill, alerts, the estimated mark.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.ui.settle import settle
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index


def _app(*, ascii_mode: bool) -> KvtopApp:
    settings = Settings(host_url=HOST, interval_s=0.25, demo=True, extra={"ascii": "1" if ascii_mode else "0"})
    return make_app(
        settings,
        FakeSource(snapshot_at(step_index("spills")), hold=True),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _settle(pilot: Any, rows: int | None = None) -> None:
    await settle(pilot, rows)


def _screen_text(app: KvtopApp) -> list[str]:
    """Every line on the screen as drawn, after the app's line filters (Textual's compositor)."""
    lines = []
    for strip in app.screen._compositor.render_strips():
        lines.append("".join(seg.text for seg in strip if not seg.control))
    return lines


async def test_ascii_mode_draws_only_ascii_and_says_so() -> None:
    app = _app(ascii_mode=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        lines = _screen_text(app)
        drawn = "\n".join(lines)
        assert drawn.isascii(), sorted({c for c in drawn if not c.isascii()})
        assert "ASCII" in lines[0]
        assert "4096x1*" in drawn and "32768x1*" in drawn and "KV ~448M" in drawn  # the marks as the legend says
        assert "########%%%+" in drawn  # weights # | KV % | compute +
        assert "...........%" in drawn  # not known '.', no longer '~' (estimated) as tmux drew '·'
        assert "~ estimated  * Ollama default  ? not known" in drawn
        header = app.dashboard.query_one(ServerHeader)
        assert "ASCII" in header.render().plain


async def test_without_ascii_mode_the_glyphs_stay() -> None:
    app = _app(ascii_mode=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        drawn = "\n".join(_screen_text(app))
        assert "×" in drawn and "█" in drawn and "ASCII" not in drawn.splitlines()[0]


def test_ascii_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot)

    assert snap_compare(_app(ascii_mode=True), terminal_size=(80, 24), run_before=run_before)


def test_no_color_80x24(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NO_COLOR``: Textual's monochrome filter; the spill reads from its CPU/GPU split, the
    alerts from their words, the estimates from ``~``."""
    monkeypatch.setenv("NO_COLOR", "1")

    async def run_before(pilot: Any) -> None:
        await _settle(pilot)
        drawn = "\n".join(_screen_text(pilot.app))
        assert "CPU/GPU" in drawn and "spill" in drawn.lower() and "~" in drawn

    assert snap_compare(_app(ascii_mode=False), terminal_size=(80, 24), run_before=run_before)


def test_ascii_no_color_160x48(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The poorest terminal, wide: ASCII and no colour at once."""
    monkeypatch.setenv("NO_COLOR", "1")

    async def run_before(pilot: Any) -> None:
        await _settle(pilot)

    assert snap_compare(_app(ascii_mode=True), terminal_size=(160, 48), run_before=run_before)
