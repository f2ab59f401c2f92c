"""Waiting for a settled dashboard: the state the snapshot tests photograph.

The engine applies the local server's first poll at once and starts the GPU loop after it
(``EngineCore.run``), so the first frames show the models before the GPU strip and the history's
GPU series. A settled screen has both: wait for those states, never for a time.
"""

from __future__ import annotations

from typing import Any

from kvtop.ui.widgets.models_table import ModelsTable


def settled(app: Any, rows: int | None = None) -> bool:
    """The app polled its server, shows ``rows`` table rows (any when None), and when it reads a
    GPU, the GPU sample is applied and its history holds the device's series."""
    state = app.state
    if state is None or state.ollama is None:
        return False
    if rows is not None and app.query_one(ModelsTable).row_count != rows:
        return False
    if not _panels_settled(app):
        return False
    engine = app.engine
    if engine.sources.gpu is None:
        return True
    history = engine.histories.get(state.host_url)
    return state.gpu is not None and (not state.gpu.devices or (history is not None and bool(history.devices)))


def _panels_settled(app: Any) -> bool:
    """The dashboard's panels laid out for the rows its widgets take now (``PanelLayout.settled``:
    the events pane and the alerts panel's height follow the GPU strip's lines, which come with
    the GPU sample); True when there is no dashboard or it is too small to lay panels out."""
    dashboard = getattr(app, "dashboard", None)
    panels = getattr(dashboard, "panels", None)
    if panels is None or not dashboard.is_mounted or dashboard.has_class("-too-small"):
        return True
    return bool(panels.settled())


async def settle(pilot: Any, rows: int | None = None, *, tries: int = 200) -> None:
    """Wait (``tries`` × 50 ms at most) until :func:`settled`, then let one more repaint land.

    Raises:
        AssertionError: The screen did not settle in time.
    """
    for _ in range(tries):
        await pilot.pause(0.05)
        if settled(pilot.app, rows):
            break
    else:
        raise AssertionError("the screen did not settle")
    await pilot.pause(0.1)
