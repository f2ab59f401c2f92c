"""At 80 columns the help, detail and what-if screens wrap long lines under their
own column (a hanging indent, never back to column 0), one cell clear of the scrollbar."""

from __future__ import annotations

import re

import pytest
from rich.text import Text

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.help import HelpScreen
from kvtop.ui.screens.model_detail import ModelDetailScreen
from kvtop.ui.screens.plan import PlanScreen
from kvtop.ui.widgets.hanging import hang_indent, hang_wrap
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.screen_text import screen_after, screen_when
from tests.ui.test_plan_screen import wait_for

HEADINGS = (
    "Memory",
    "KV cache",
    "Alerts",
    "Runner log",
    "Runner process and server environment",
    "Keep-alive",
    "GPU",
    "gemma4:latest",
)


def _app() -> KvtopApp:
    return make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snapshot_at(step_index("spills")), hold=True))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


async def test_help_at_80_columns_hangs_and_keeps_clear_of_the_scrollbar() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        lines = await screen_when(pilot, lambda lines: "Keys" in "".join(lines))
        seen: list[str] = []
        for _ in range(6):
            body = lines[1:-1]  # inside the box's top and bottom border
            assert all(line[0] == "│" and line[79] == "│" for line in body)
            assert all(line[76] == " " for line in body), body  # a blank cell before the scrollbar
            seen += body
            await pilot.press("pagedown")
            lines = await screen_after(pilot, lines)
        text = [line[1:76] for line in seen]
        at = next(i for i, line in enumerate(text) if "move the selection (j is down;" in line)
        assert text[at + 1].strip() == "htop)"
        assert _indent(text[at + 1]) == text[at].index("move the")  # under its own column
        at = next(i for i, line in enumerate(text) if "CONTEXT: requests being answered now" in line)
        assert _indent(text[at + 1]) == text[at].index("CONTEXT")  # a glyph's meaning under its column
        for line in text:  # no line wraps back to column 0 in the middle of a key table
            assert not line.startswith(" line") and not line.startswith(" unloading")


async def test_detail_at_80_columns_hangs_every_continuation_line() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        table = app.query_one(ModelsTable)
        table.focus()
        table.move_cursor(row=next(i for i, v in enumerate(table._views) if v.name == "gemma4:latest"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
        shown = await screen_when(pilot, lambda lines: "digest" in "".join(lines))
        seen: list[str] = []
        for _ in range(6):
            lines = shown[:-1]  # the footer aside
            assert all(line[77] == " " for line in lines), lines  # a blank cell before the scrollbar
            seen += lines
            await pilot.press("pagedown")
            shown = await screen_after(pilot, shown)
        for line in seen:
            if not line.strip():
                continue
            if _indent(line) == 1:  # column 0 of the text: only the headings
                assert line.strip().startswith(HEADINGS), line
            else:
                assert _indent(line) >= 3, line
        notes = [i for i, line in enumerate(seen) if "OLLAMA_KV_CACHE_TYPE unset means f16; nothing" in line]
        assert notes and seen[notes[0] + 1].startswith(" " * 23 + "readable says otherwise")
        formula = next(i for i, line in enumerate(seen) if "arithmetic:" in line)
        assert _indent(seen[formula + 1]) == seen[formula].index("arithmetic:") + len("arithmetic:  ")


async def test_what_if_at_80_columns_keeps_its_bar_on_one_line() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        table = app.query_one(ModelsTable)
        table.focus()
        table.move_cursor(row=next(i for i, v in enumerate(table._views) if v.name == "qwen3:1.7b-q8_0"))
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.spec is not None)
        lines = await screen_when(pilot, lambda lines: any(line.startswith(" [") for line in lines))
        bar = next(line for line in lines if line.startswith(" ["))
        bar = re.sub(r"\s+[▁▂▃▄▅▆▇█]{1,2}$", "", bar.rstrip())  # the body's scrollbar, when it scrolls
        assert bar.endswith("▒ compute")
        kv = next(i for i, line in enumerate(lines) if re.match(r"   KV cache +~\d", line))  # ~: estimated
        assert lines[kv + 1].startswith(" " * 15 + "estimated: ") and lines[kv + 2].startswith(" " * 15)


@pytest.mark.parametrize(
    ("line", "at", "width", "indent"),
    [
        ("  label               value text that goes on", 30, 50, 22),
        ("  label               value text that goes on", 30, 40, 2),  # under 24 cells left: an earlier column
        ("  q          quit                      ?          this help", 55, 80, 50),
        ("  q          quit                      ?          this help", 55, 50, 13),
        ("plain prose that wraps with no columns at all", 30, 20, 0),
        ("  x   " + "far " * 30, 100, 40, 6),
    ],
)
def test_hang_indent(line: str, at: int, width: int, indent: int) -> None:
    assert hang_indent(line, at, width) == indent


def test_hang_wrap_keeps_styles_and_numbers_with_their_units() -> None:
    text = Text("  size                ")
    text.append("6,591,830,464 B (6.1 GiB)", style="bold")
    text.append("  [reported] and a long note after it")
    out = hang_wrap(text, 50)
    lines = out.plain.split("\n")
    assert lines[0] == "  size                6,591,830,464 B (6.1 GiB)"
    assert lines[1].startswith(" " * 22) and "[reported]" in lines[1]
    assert all(len(line) <= 50 for line in lines)
    assert any(span.style == "bold" for span in out.spans)
    assert hang_wrap(Text("a 5.7 GiB b"), 8).plain.split("\n")[1].startswith("5.7 GiB")


@pytest.mark.parametrize(
    ("readonly", "signals", "replay"),
    [(False, True, False), (False, False, False), (True, True, False), (True, False, True)],
)
def test_help_paragraph_lines_fit_the_help_box_at_80_columns(readonly: bool, signals: bool, replay: bool) -> None:
    """A flush-left line (a heading or a paragraph) has no column to hang under: one wider than
    the help body (75 cells at 80 columns: inside the border, before the blank cell and the
    scrollbar, as the test above reads the screen) wrapped its last word alone onto a line
    ('shows' under the read-only paragraph)."""
    from rich.cells import cell_len

    from kvtop.ui.screens.help import help_text

    text = help_text(readonly, signals=signals, replay=replay)
    wide = [line for line in text.splitlines() if line and not line.startswith(" ") and cell_len(line) > 75]
    assert wide == []
    # a replay is read-only by itself: its help says so, not that --readonly was given
    assert ("--readonly" in text) == (readonly and not replay) and ("a replay: kvtop sends nothing" in text) == replay
