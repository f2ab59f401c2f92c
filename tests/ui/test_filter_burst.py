"""Keys typed in one burst right after ``/`` land in the filter box."""

from __future__ import annotations

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.keys import burst
from tests.ui.test_plan_screen import wait_for


def _app() -> KvtopApp:
    return make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snapshot_at(step_index("spills")), hold=True))


async def test_slash_and_a_word_in_one_burst_filter_the_table() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        burst(pilot, "/qwen")  # q, w, e are dashboard keys (quit, what-if, ...): none may act
        await wait_for(pilot, lambda: app.filter_text == "qwen")
        await pilot.pause(0.1)
        assert app.is_running and len(app.screen_stack) == 1
        assert app.query_one(ModelsTable).row_count == 2
        burst(pilot, "3")  # typing on after the burst adds to it (nothing was selected on focus)
        await wait_for(pilot, lambda: app.filter_text == "qwen3")


async def test_a_burst_with_enter_keeps_the_filter_and_returns_to_the_table() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        burst(pilot, ["/", "g", "e", "m", "m", "a", "backspace", "a", "enter"])
        await wait_for(pilot, lambda: app.focused is app.query_one(ModelsTable))
        await pilot.pause(0.1)
        assert app.filter_text == "gemma" and len(app.screen_stack) == 1
        assert app.query_one(ModelsTable).row_count == 1
        burst(pilot, ["/", "escape"])
        await wait_for(pilot, lambda: app.filter_text == "" and app.query_one(ModelsTable).row_count == 3)


async def test_keys_after_enter_in_the_same_burst_act_on_the_dashboard() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        burst(pilot, ["/", "q", "4", "x", "backspace", "enter", "s"])  # s after Enter: the next sort
        await wait_for(pilot, lambda: app.sort_key != "server")
        await pilot.pause(0.1)
        assert app.filter_text == "q4" and app.query_one(ModelsTable).row_count == 1
        assert app.is_running and len(app.screen_stack) == 1
