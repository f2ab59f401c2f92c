"""Waiting for a confirmation (``ConfirmWrite``) to be armed: its action is live only
``ConfirmWrite.ARM_S`` after it is drawn, so a deliberate ``y`` waits for that state, never for a time."""

from __future__ import annotations

from typing import Any

from kvtop.ui.screens.confirm import ConfirmWrite


async def armed(pilot: Any, timeout_s: float = 10.0) -> ConfirmWrite:
    """The confirmation on top once its action is live (``armed``); fails after ``timeout_s``."""
    import asyncio

    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (isinstance(app.screen, ConfirmWrite) and app.screen.armed):
        if loop.time() > deadline:
            raise AssertionError(f"no armed confirmation within {timeout_s} s (on top: {app.screen!r})")
        await pilot.pause(0.05)
    screen = app.screen
    assert isinstance(screen, ConfirmWrite)
    return screen


async def confirm(pilot: Any) -> None:
    """Wait until the confirmation on top is armed, then press ``y`` (a deliberate answer)."""
    await armed(pilot)
    await pilot.press("y")
