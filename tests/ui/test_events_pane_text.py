"""The events pane shows an unknown warning's own text (a ``GGML_ASSERT`` line), made safe.

Corpus 005 (ollama/ollama#5913) ends with ``GGML_ASSERT: …/ggml-cuda.cu:101: !"CUDA error"``; it used to
show as ``unknown_warning`` with only ``level=ERROR``. The same line with terminal escapes and Rich markup
in it must reach the screen as plain, printable text.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult

from kvtop.logparse import parse_lines
from kvtop.model.logstate import LogState
from kvtop.ui.widgets.events_pane import EventsPane

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _assert_line() -> str:
    (path,) = LOGS.glob("005-*.log")
    return next(x for x in path.read_text(encoding="utf-8").splitlines() if "GGML_ASSERT" in x)


class _PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield EventsPane(classes="-visible")


async def _rows(line: str) -> list[tuple[str, str]]:
    app = _PaneApp()
    async with app.run_test(size=(160, 20)) as pilot:
        pane = app.query_one(EventsPane)
        pane.show(LogState(source="file:test", lines=1, recent=tuple(parse_lines([line]))))
        await pilot.pause()
        out = []
        for i in range(pane.row_count):
            kind, detail = pane.get_row_at(i)[1:3]
            assert isinstance(kind, Text) and isinstance(detail, Text)
            out.append((kind.plain, pane.detail(i)))  # the cell shows it wrapped
        return out


async def test_ggml_assert_text_is_shown() -> None:
    rows = await _rows(_assert_line())
    assert rows == [
        (
            "unknown_warning",
            "ERROR: GGML_ASSERT: /go/src/github.com/ollama/ollama/llm/llama.cpp/ggml/src/ggml-cuda.cu:101: "
            '!"CUDA error"',
        )
    ]


async def test_ggml_assert_with_escapes_and_markup_is_made_safe() -> None:
    line = _assert_line().replace('!"CUDA error"', '\x1b[2J\x1b]0;pwned\x07[bold red]!"CUDA error"[/]')
    ((kind, detail),) = await _rows(line)
    assert kind == "unknown_warning"
    assert "\x1b" not in detail and "\x07" not in detail
    assert detail.endswith(
        'ggml-cuda.cu:101: \ufffd[2J\ufffd]0;pwned\ufffd[bold red]!"CUDA error"[/]'
    )  # markup shown as text


async def test_status_polls_are_left_out_and_counted_until_asked_for() -> None:
    """kvtop's own polling (GET /api/ps each interval) flooded the pane: the corpus's access lines
    plus three polls show the work requests and one muted line counting the polls; `/ gin` lists all."""
    corpus = (LOGS.parent / "gin" / "access-corpus.log").read_text(encoding="utf-8").splitlines()
    polls = [f'[GIN] 2026/03/31 - 19:54:0{i} | 200 |    1.2ms |       127.0.0.1 | GET      "/api/ps"' for i in range(3)]
    events = tuple(parse_lines(corpus + polls, default_year=2026))
    app = _PaneApp()
    async with app.run_test(size=(160, 30)) as pilot:
        pane = app.query_one(EventsPane)
        pane.show(LogState(source="file:test", lines=len(events), recent=events))
        await pilot.pause()
        details = [pane.detail(i) for i in range(pane.row_count)]
        assert not any("path=/api/ps" in d or "path=/api/show" in d for d in details)
        assert any("path=/api/chat" in d for d in details)
        assert details[-1].startswith("5 status polls left out")  # 3 /api/ps, the corpus's HEAD / and /api/show
        pane.show(LogState(source="file:test", lines=len(events), recent=events), "gin")
        await pilot.pause()
        assert sum("path=/api/ps" in pane.detail(i) for i in range(pane.row_count)) == 3
