"""What changed on the dashboard (issue 27 §4): a server kvtop last saw at another version shows
the restart in the events pane, on the history plots as a marker, and on the ``c`` screen."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kvtop.config import Settings
from kvtop.config.files import state_dir
from kvtop.model.changes import Change, Fact
from kvtop.sources.timeline_store import TimelineStore, timeline_folder
from kvtop.ui.app import make_app
from kvtop.ui.screens.changes import ChangesScreen
from kvtop.ui.screens.history import HistoryScreen
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.plot import PlotView
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index


async def wait_for(pilot: Any, cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


async def test_a_restart_since_the_last_run_shows_in_the_events_pane_the_plots_and_the_c_screen() -> None:
    snap = snapshot_at(step_index("spills"))
    assert snap.version and snap.version != "0.1.0"
    earlier = Change(snap.taken_at - 7200, "env:OLLAMA_FLASH_ATTENTION", "1", None, "service")
    TimelineStore(timeline_folder(state_dir()), HOST).write([earlier], {"version": Fact("0.1.0", 1.0, "reported")})
    app = make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snap, hold=True))
    async with app.run_test(size=(130, 40)) as pilot:
        await wait_for(pilot, lambda: app.state is not None and any(c.kind == "version" for c in app.state.changes))
        restart = f"server restarted: 0.1.0 → {snap.version}"
        assert [c.text() for c in app.state.changes] == ["OLLAMA_FLASH_ATTENTION 1 → unset", restart]

        pane = app.dashboard.query_one(EventsPane)
        if not pane.has_class("-visible"):  # it shows by itself from 120x36 (its saved choice aside)
            await pilot.press("l")
        await wait_for(pilot, lambda: pane.has_class("-visible") and pane.row_count > 1)
        assert pane.detail(0) == f"{restart} (reported, server version)"  # the newest first
        assert pane.detail(1) == "OLLAMA_FLASH_ATTENTION 1 → unset (service, service environment)"

        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen))
        plot = app.screen.query_one("#plot-gpu", PlotView)
        await wait_for(pilot, lambda: plot.spec is not None and plot.spec.empty is None)
        assert [m.text for m in plot.spec.markers if m.style == "heavy"] == [f"version {snap.version}"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HistoryScreen))

        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ChangesScreen))
        body = str(app.screen.query_one("#changes-body").render())
        lines = body.splitlines()
        assert lines[0] == f"What changed · {HOST}"
        assert lines[1].endswith(f": OLLAMA_FLASH_ATTENTION unset → version {snap.version}")
        assert restart in lines[3] and "restart" in lines[3]  # newest first
        assert "OLLAMA_FLASH_ATTENTION 1 → unset" in lines[4]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChangesScreen))


async def test_a_server_that_reloads_often_keeps_the_events_pane_for_alerts_and_events() -> None:
    """The demo's loop (issue 27 review): reloads at another num_ctx, over and over, are one row per
    model naming the flag that differs, with the earlier ones counted; at most CHANGE_ROWS rows."""
    from kvtop.ui.widgets.events_pane import CHANGE_ROWS

    snap = snapshot_at(step_index("spills"))
    found: list[Change] = []
    t = snap.taken_at - 3600
    for loop in range(4):
        for model in ("qwen3:1.7b-q8_0", "gemma4:latest", "qwen3:1.7b-q4_K_M"):
            found.append(Change(t, f"runner:{model}", "-c 4096 -np 1", "-c 32768 -np 1", "requested"))
            found.append(Change(t + 30, f"runner:{model}", "-c 32768 -np 1", "-c 4096 -np 1", "requested"))
            t += 1
        found.append(Change(t + 40, f"env:OLLAMA_X{loop}", None, "1", "service"))
        t += 70
    TimelineStore(timeline_folder(state_dir()), HOST).write(found, {"version": Fact(snap.version, 1.0, "reported")})
    app = make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snap, hold=True))
    async with app.run_test(size=(130, 50)) as pilot:
        pane = app.dashboard.query_one(EventsPane)
        await wait_for(pilot, lambda: app.state is not None and len(app.state.changes) == len(found))
        if not pane.has_class("-visible"):
            await pilot.press("l")
        await wait_for(pilot, lambda: pane.has_class("-visible") and pane.row_count > CHANGE_ROWS)
        details = [pane.detail(i) for i in range(pane.row_count)]
        changed = [d for d in details if "runner:" in d or "OLLAMA_X" in d or "c: what changed" in d]
        assert len(changed) == CHANGE_ROWS + 1, changed
        assert changed[-1] == "3 more (c: what changed)"
        runner_rows = [d for d in changed if "runner:" in d]
        assert len(runner_rows) == len({d.split(" runner:")[0] for d in runner_rows})  # one row per model
        assert all(" runner: -c 32768 → 4096 (requested, runner argv) · 7 earlier since " in d for d in runner_rows)
