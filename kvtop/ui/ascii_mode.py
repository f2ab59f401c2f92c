"""The dashboard's ASCII mode: every line Textual draws, kvtop's and Textual's own (borders,
footer, scrollbars), passes through one line filter that writes each character as its ASCII
stand-in (``kvtop.core.glyphs``), cell for cell, so the layout is unchanged and every mark stays
the mark the legend explains.

On when ``settings.extra["ascii"] == "1"`` (``kvtop --ascii``, or no UTF-8 locale:
``kvtop.core.glyphs.wants_ascii``); the header then says ``ASCII``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import get_character_cell_size
from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from kvtop.core.glyphs import to_ascii


def ascii_text(text: str) -> str:
    """``text`` with each character as its one-cell (or two-cell) ASCII stand-in, measured as
    Rich measures it (``kvtop.core.glyphs.to_ascii``)."""
    return to_ascii(text, cell_width=get_character_cell_size)


class AsciiFilter(LineFilter):
    """A Textual line filter: each segment's text in ASCII (:func:`ascii_text`), its style and
    control codes kept. Pure ASCII segments pass as they are."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        """The same segments with their text in ASCII; ``background`` is not used."""
        out: list[Segment] = []
        for seg in segments:
            if seg.control or seg.text.isascii():
                out.append(seg)
            else:
                out.append(Segment(ascii_text(seg.text), seg.style, seg.control))
        return out


def ascii_on(settings: Any) -> bool:
    """Whether ``settings`` (``kvtop.config.Settings``) asks for ASCII mode."""
    extra = getattr(settings, "extra", None) or {}
    return extra.get("ascii") == "1"


def with_ascii(filters: Sequence[LineFilter], settings: Any) -> list[LineFilter]:
    """``filters`` (Textual's: colours, ``NO_COLOR``) and, in ASCII mode, :class:`AsciiFilter` last."""
    return [*filters, _FILTER] if ascii_on(settings) else list(filters)


_FILTER = AsciiFilter()
