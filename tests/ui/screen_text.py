"""What a user would read on the terminal: the current screen as plain text lines (for Pilot tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from textual.app import App


def screen_lines(app: App[object]) -> list[str]:
    """The screen in front, as rendered, one string per terminal row (trailing spaces kept)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def screen_text(app: App[object]) -> str:
    """``screen_lines`` joined with newlines."""
    return "\n".join(screen_lines(app))


async def screen_when(pilot: Any, cond: Callable[[list[str]], bool], timeout_s: float = 10.0) -> list[str]:
    """The screen's lines once ``cond`` holds for them (the compositor may lag a loaded machine);
    AssertionError with the last lines seen when it does not within ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        lines = screen_lines(pilot.app)
        if cond(lines):
            return lines
        if loop.time() > deadline:
            raise AssertionError("the screen never showed what was awaited:\n" + "\n".join(lines))
        await pilot.pause(0.05)


async def screen_after(pilot: Any, before: list[str], timeout_s: float = 1.0) -> list[str]:
    """The screen's lines once they differ from ``before`` (a key scrolled, say), or as they are
    after ``timeout_s`` (nothing moved: the end was reached)."""
    try:
        return await screen_when(pilot, lambda lines: lines != before, timeout_s)
    except AssertionError:
        return screen_lines(pilot.app)
