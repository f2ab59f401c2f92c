"""The events pane shows alert and fix texts in full, wrapped at whole words."""

from __future__ import annotations

import pytest
from rich.text import Text

from kvtop.config import Settings
from kvtop.ui.alert_age import alert_age, state_clock
from kvtop.ui.app import make_app
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for


@pytest.mark.parametrize("size", [(80, 40), (120, 40)])
async def test_alerts_and_fixes_wrap_whole_words_at_80_and_120_columns(size: tuple[int, int]) -> None:
    app = make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snapshot_at(step_index("spills")), hold=True))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        if size[0] >= 120:  # the alerts panel shows from 120×40 and then has the alerts: hide it (f)
            await pilot.press("f")
        await pilot.press("l")
        pane = app.dashboard.query_one(EventsPane)
        await wait_for(pilot, lambda: pane.row_count >= 2)
        spill = next(a for a in app.state.alerts if a.kind == "spill")
        age = alert_age(spill, state_clock(app.state))  # the same snapshot polled again: its age stays
        assert age is not None
        wanted = [f"{spill.model} · {age}: {spill.message}", *(f"{f.action} — {f.detail}" for f in spill.fixes)]
        details: list[str] = []
        for i in range(pane.row_count):
            cell = pane.get_row_at(i)[2]
            assert isinstance(cell, Text)
            lines = cell.plain.split("\n")
            assert all(len(line) <= size[0] - 10 - 7 - 4 for line in lines), lines  # inside the DETAIL column
            joined = " ".join(line.strip() for line in lines)
            assert joined == pane.detail(i)  # broken at spaces only: no word is cut
            details.append(joined)
        for text in wanted:
            assert any(d.startswith(text) for d in details), (text, details)
        assert any("\n" in pane.get_row_at(i)[2].plain for i in range(pane.row_count))  # some did need wrapping
        first_words = " ".join(spill.message.split()[:4])
        lines = await screen_when(pilot, lambda lines: first_words in "\n".join(lines))
        assert all(len(line) <= size[0] for line in lines)


async def test_no_log_hint_says_what_the_demo_and_a_replay_lack() -> None:
    from kvtop.sources.recording import read_recording, resolve_recording

    demo = make_app(
        Settings(host_url=HOST, interval_s=0.25, demo=True),
        FakeSource(snapshot_at(step_index("raised to 32768")), hold=True),
    )
    replay = make_app(
        Settings(host_url="http://unused:1", log_spec="none"), replay=read_recording(resolve_recording("demo"))
    )
    # the demo run without a log (a FakeSource here; --demo --log none), and the bundled demo recording,
    # which carries the stand-in's log: neither points at --log
    for app, said in ((demo, "no server log in this demo run"), (replay, None)):
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_for(pilot, lambda: app.state.ollama is not None, timeout_s=10)
            await pilot.press("l")
            pane = app.dashboard.query_one(EventsPane)
            await wait_for(pilot, lambda: pane.row_count >= 1)
            details = [pane.detail(i) for i in range(pane.row_count)]
            if said is not None:
                assert any(said in d for d in details), details
            else:
                assert app.state.log.source == "file:server.log"
            assert not any("--log" in d for d in details)


async def test_no_log_chosen_says_the_log_is_off_not_start_with_log() -> None:
    # --log none (Settings.log_spec "none"): the user chose no log; "start kvtop with --log" would
    # tell them to undo their choice
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="none"),
        FakeSource(snapshot_at(step_index("raised to 32768")), hold=True),
    )
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.state.ollama is not None, timeout_s=10)
        await pilot.press("l")
        pane = app.dashboard.query_one(EventsPane)
        await wait_for(pilot, lambda: pane.row_count >= 1)
        details = [pane.detail(i) for i in range(pane.row_count)]
    assert any("server log: off (--log none)" in d for d in details), details
    assert not any("start kvtop with --log" in d for d in details), details
