"""kvtop's themes on terminals with 16 or 8 colours (``TERM=xterm``, ``screen``): Rich turns each
theme colour into the nearest of the terminal's. The three states (ok, warning, critical) must stay
three colours wherever the theme has colours; where colours fold together (the memory bar's KV and
compute on 16 colours, every state under ``kvtop-mono`` and ``NO_COLOR``) the glyphs and words tell
them apart, which ``tests/ui/test_terminals.py`` shows on screen."""

from __future__ import annotations

import pytest
from rich.color import Color, ColorSystem

from kvtop.core.glyphs import ascii_char
from kvtop.ui.themes import load_themes

THEMES = load_themes()
COLOURFUL = [name for name in THEMES if name != "kvtop-mono"]


def _on(theme: str, var: str, *, eight: bool = False) -> int | None:
    """The ANSI colour number a 16-colour terminal draws ``var`` of ``theme`` in; ``eight``: an
    8-colour one, which draws the bright half (8-15) as the base colours (0-7)."""
    number = Color.parse(THEMES[theme].variables[var]).downgrade(ColorSystem.STANDARD).number
    if eight and number is not None and number >= 8:
        return number - 8
    return number


@pytest.mark.parametrize("theme", COLOURFUL)
@pytest.mark.parametrize("eight", [False, True], ids=["16 colours", "8 colours"])
def test_states_stay_three_colours(theme: str, eight: bool) -> None:
    states = {var: _on(theme, var, eight=eight) for var in ("kv-ok", "kv-warn", "kv-crit")}
    assert len(set(states.values())) == 3, states


BAR_GLYPHS = {"kv-weights": "█", "kv-kv": "▓", "kv-compute": "▒", "kv-unknown": "·", "kv-free": "░"}
"""The model memory bar's and the map's parts, their colour variables and glyphs (``ui.format``)."""


@pytest.mark.parametrize("theme", list(THEMES))
def test_bar_parts_that_share_a_colour_differ_by_glyph(theme: str) -> None:
    """On 16 colours kvtop-dark draws KV and compute in one grey, kvtop-mono every part: the glyphs
    (``▓`` ``▒``; ``%`` ``+`` in ASCII) still tell each part from the others."""
    folded = [(a, b) for a in BAR_GLYPHS for b in BAR_GLYPHS if a < b and _on(theme, a) == _on(theme, b)]
    for a, b in folded:
        assert BAR_GLYPHS[a] != BAR_GLYPHS[b] and ascii_char(BAR_GLYPHS[a]) != ascii_char(BAR_GLYPHS[b]), (a, b)
    if theme == "kvtop-mono":
        assert len(folded) >= 3  # grey on grey: the glyphs carry it alone
