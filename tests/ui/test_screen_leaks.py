"""Opening and closing a screen gives its memory back (``h``/Esc once grew RSS by ~1.4 MB a
time, 55 → 164 MB in two minutes; ``i``/Esc by ~0.25 MB).

A counted soak through Pilot: after a warm-up, 30 more open/close cycles must leave as many live
widgets and ``StylesCache`` objects as before (the leak kept every closed screen's footer keys and
plots, through Textual's never-pruned ``data_bind`` watchers and its ``lru_cache`` on
``StylesCache.get_inner_outer``), and RSS must not climb by more than a fraction of the old
per-cycle growth. Every step waits for a state (the screen shown, the dashboard back), not a time.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from textual._styles_cache import StylesCache
from textual.dom import DOMNode
from textual.widgets._footer import FooterKey

from kvtop.ui.screens.dashboard import DashboardScreen
from kvtop.ui.screens.history import HistoryScreen
from kvtop.ui.screens.server_view import ServerScreen
from kvtop.ui.textual_fixes import install_textual_fixes, prune_closed_watchers
from kvtop.ui.widgets.plot import PlotView
from tests.ui.fakes import HOST
from tests.ui.test_history_screen import _app, _settle, scripted_history

WARMUP_CYCLES = 10
CYCLES = 30
MIB = 2**20


async def _until(pilot: Any, cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    loop = __import__("asyncio").get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)


def _live() -> dict[str, int]:
    gc.collect()
    objs = gc.get_objects()
    return {
        "nodes": sum(isinstance(o, DOMNode) for o in objs),
        "footer_keys": sum(isinstance(o, FooterKey) for o in objs),
        "plots": sum(isinstance(o, PlotView) for o in objs),
        "styles_caches": sum(isinstance(o, StylesCache) for o in objs),
        "screens": sum(isinstance(o, (HistoryScreen, ServerScreen)) for o in objs),
    }


async def _cycle(pilot: Any, key: str, screen_type: type) -> None:
    app = pilot.app
    await pilot.press(key)
    await _until(pilot, lambda: isinstance(app.screen, screen_type))
    if screen_type is HistoryScreen:
        await _until(pilot, lambda: app.screen.query_one("#plot-gpu", PlotView).renders >= 1)
    await pilot.pause()
    await pilot.press("escape")
    await _until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    await pilot.pause()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("key", "screen_type", "max_rss_mib_per_cycle"),
    [
        ("h", HistoryScreen, 0.5),  # was 1.4–1.7 MiB a cycle
        ("i", ServerScreen, None),  # was ~0.25–0.45 MiB a cycle: the object counts tell it, RSS too coarse here
    ],
)
async def test_opening_and_closing_a_screen_returns_to_baseline(
    key: str, screen_type: type, max_rss_mib_per_cycle: float | None
) -> None:
    assert install_textual_fixes()  # Textual's code is the one the fix expects (else this test says so)
    app = _app()
    me = psutil.Process()
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        app.histories[HOST] = scripted_history()  # nine minutes of plots to draw
        for _ in range(WARMUP_CYCLES):
            await _cycle(pilot, key, screen_type)
        before, rss_before = _live(), me.memory_info().rss
        for _ in range(CYCLES):
            await _cycle(pilot, key, screen_type)
        after, rss_after = _live(), me.memory_info().rss
    grown = {k: after[k] - before[k] for k in before}
    # at most the screen closed last may wait for the app's next state change to be let go
    assert after["screens"] <= 1, grown
    assert grown["nodes"] < 60, grown  # the leak kept ~30 nodes (footer keys, plots…) a cycle: ~900
    assert grown["footer_keys"] < 20, grown
    assert grown["plots"] <= 3, grown
    assert grown["styles_caches"] < 60, grown
    if max_rss_mib_per_cycle is not None:
        per_cycle = (rss_after - rss_before) / MIB / CYCLES
        assert per_cycle < max_rss_mib_per_cycle, f"{per_cycle:.2f} MiB a cycle"


class _Node:
    def __init__(self, closing: bool) -> None:
        self._closing = closing


def test_prune_closed_watchers_drops_only_removed_watchers() -> None:
    class Watched:
        pass

    w = Watched()
    alive, gone = _Node(False), _Node(True)
    setattr(w, "__watchers", {"compact": [(alive, print), (gone, print), (gone, repr)], "other": [(alive, repr)]})
    assert prune_closed_watchers(w) == 2
    assert getattr(w, "__watchers") == {"compact": [(alive, print)], "other": [(alive, repr)]}
    assert prune_closed_watchers(object()) == 0
