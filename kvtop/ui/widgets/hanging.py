"""Hanging-indent wrapping: a long line's continuation lines start under its own text, not at column 0.

The help, detail and what-if screens are columns of text (``  label     value``, notes indented
under the value). A Static wraps a long line back to column 0, which breaks the columns at 80
columns. ``Hanging`` wraps each line itself at render time, to the width it is given, and indents
every continuation line to the start of the column the break falls in.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

__all__ = ["Hanging", "hang_indent", "hang_wrap"]

_COLUMN = re.compile(r"\S+(?: \S+)*")
"""A run of text in which single spaces separate words; two or more spaces start a new column."""


MIN_ROOM = 20
"""The fewest cells a continuation line may have (or half the width, when that is less)."""


def hang_indent(line: str, at: int, width: int) -> int:
    """The indent for the continuation lines of ``line`` broken at character ``at``: the start of
    the column (text after two or more spaces, or the line's own indent) that holds ``at``, as
    long as that leaves at least ``MIN_ROOM`` cells; when it leaves under a third of the width,
    an earlier column that takes fewer lines; 0 when no column leaves room."""
    return _choose(line, at, width)[1]


def _choose(line: str, at: int, width: int) -> tuple[int, int]:
    """``(cut, indent)`` for a line too long for ``width``, first broken at ``at`` (see ``hang_indent``):
    the cut moves to ``width`` when the next word is longer than any continuation line could be."""
    starts = [m.start() for m in _COLUMN.finditer(line)]
    holding = [s for s in starts if s <= at] or starts[:1]
    room = min(MIN_ROOM, width // 2)
    best: tuple[int, int, int] | None = None  # (lines, cut, indent)
    for start in reversed(holding):
        indent = cell_len(line[:start])
        if width - indent < room:
            continue
        if best is not None and width - best[2] >= width / 3:
            break  # the column holding the break has room enough: keep the text under it
        cut = at
        if cell_len(line[at:].split(" ", 1)[0]) > width - indent:  # no line could hold the word: fold it
            cut = _fold_at(line, width)
        lines = 1 + _count_lines(line[cut:].lstrip(" "), width - indent)
        if best is None or lines < best[0]:
            best = (lines, cut, indent)
    if best is None:
        cut = at if cell_len(line[at:].split(" ", 1)[0]) <= width else _fold_at(line, width)
        return cut, 0
    return best[1], best[2]


def _count_lines(plain: str, width: int) -> int:
    """Lines ``plain`` takes wrapped at ``width`` cells (as ``hang_wrap`` breaks them)."""
    count = 0
    while plain:
        cut = _break_at(plain, width) if cell_len(plain) > width else len(plain)
        plain = plain[cut:].lstrip(" ")
        count += 1
    return count


def _break_at(plain: str, width: int) -> int:
    """Where to cut ``plain`` so the first part fits ``width`` cells: after the last space that
    fits, else (one long word) at ``width`` cells. A number keeps its unit (``5.7 GiB``,
    ``1 slot``): the space between a digit and a letter is no break."""
    total = 0
    last_space = -1
    for i, ch in enumerate(plain):
        total += cell_len(ch)
        if total > width:
            return last_space + 1 if last_space > 0 else max(1, i)
        if ch == " " and not (0 < i < len(plain) - 1 and plain[i - 1].isdigit() and plain[i + 1].isalpha()):
            last_space = i
    return len(plain)


def _fold_at(plain: str, width: int) -> int:
    """The most characters of ``plain`` that fit ``width`` cells."""
    total = 0
    for i, ch in enumerate(plain):
        total += cell_len(ch)
        if total > width:
            return max(1, i)
    return len(plain)


def hang_wrap(text: Text, width: int) -> Text:
    """``text`` with every line longer than ``width`` cells wrapped, its continuation lines
    indented (``hang_indent``); styles are kept. Lines that fit are left as they are."""
    width = max(8, width)
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        if line.cell_len <= width:
            out.append(line)
            continue
        plain = line.plain
        cut, indent = _choose(plain, _break_at(plain, width), width)
        first, rest = line[:cut], line[cut:]
        first.rstrip()
        out.append(first)
        room = width - indent
        while rest.cell_len:
            rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]
            if not rest.plain:
                break
            cut = _break_at(rest.plain, room) if rest.cell_len > room else len(rest.plain)
            piece, rest = rest[:cut], rest[cut:]
            piece.rstrip()
            out.append(Text(" " * indent) + piece)
    joined = Text("\n").join(out)
    joined.no_wrap = True
    joined.overflow = "crop"
    return joined


class Hanging:
    """A Rich renderable: ``text`` wrapped with hanging indents to the width it is rendered at."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text.plain

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield hang_wrap(self.text, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max((line.cell_len for line in self.text.split("\n", allow_blank=True)), default=0)
        return Measurement(min(8, longest), min(longest, options.max_width))
