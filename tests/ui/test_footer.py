"""The dashboard footer fits its keys to the terminal (``KvFooter``): at 80, 100, 120 and 160
columns no key is cut mid-word, the palette key stays on the right, and the keys left out are the
least important ones (they still work and are in the help)."""

from __future__ import annotations

import pytest

from kvtop.ui.widgets.footer import FOOTER_DROP_ORDER, fit_keys, key_width
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import snapshot_at
from tests.ui.screen_text import screen_when
from tests.ui.test_app import app_with
from tests.ui.test_plan_screen import wait_for

ALL = [
    "q Quit",
    "? Help",
    "p Pause",
    "s Sort",
    "/ Filter",
    "l Log",
    "g GPU",
    "m Map",
    "w What if",
    "i Server",
    "u Unload",
    "a Keep-alive",
]


def _shown(line: str) -> list[str]:
    keys, bar, palette = line.partition("▏")
    assert bar and palette.strip() == "^p palette", line
    return [k.strip() for k in keys.split("  ") if k.strip()]


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (80, ["q Quit", "? Help", "p Pause", "/ Filter", "l Log", "w What if", "u Unload"]),
        (100, ["q Quit", "? Help", "p Pause", "s Sort", "/ Filter", "l Log", "w What if", "u Unload", "a Keep-alive"]),
        (120, ALL),
        (160, ALL),
    ],
)
async def test_footer_keeps_whole_keys_at_each_width(width: int, expected: list[str]) -> None:
    app = app_with(snapshot_at(1))
    async with app.run_test(size=(width, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        line = (await screen_when(pilot, lambda ls: "palette" in ls[-1] and "Quit" in ls[-1]))[-1]
        assert _shown(line) == expected
        assert len(line.rstrip()) <= width
        if width < 120:  # a key left out of the footer still works
            await pilot.press("g")
            assert app.screen.query_one("#gpu").has_class("-hidden")


async def test_footer_follows_a_resize() -> None:
    app = app_with(snapshot_at(1))
    async with app.run_test(size=(160, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        await screen_when(pilot, lambda ls: _shown(ls[-1]) == ALL if "palette" in ls[-1] else False)
        await pilot.resize_terminal(80, 30)
        await screen_when(
            pilot, lambda ls: "palette" in ls[-1] and "Keep-alive" not in ls[-1] and _shown(ls[-1])[-1] == "u Unload"
        )


def test_fit_keys_drops_in_order_and_never_quit_or_help() -> None:
    keys = [
        (a, key_width(k, d))
        for a, k, d in (
            ("quit", "q", "Quit"),
            ("help", "?", "Help"),
            ("toggle_gpu", "g", "GPU"),
            ("unload", "u", "Unload"),
            ("replay_pause", "space", "Play/pause"),
        )
    ]
    assert key_width("q", "Quit") == 8
    assert fit_keys(keys, 1000) == set()
    assert fit_keys(keys, 8 + 8 + 10 + 18) == {2}  # the GPU key goes first
    assert fit_keys(keys, 8 + 8 + 18) == {2, 3}  # then the write key, before keys outside the list
    assert fit_keys(keys, 8 + 8) == {2, 3, 4}
    assert fit_keys(keys, 0) == {2, 3, 4}  # q and ? stay whatever the width
    assert FOOTER_DROP_ORDER[0] == "toggle_gpu"
