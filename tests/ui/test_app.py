"""The dashboard driven by Pilot with fake sources built from the bundled scenario."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.widgets import Static

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.help import HelpScreen
from kvtop.ui.screens.model_detail import ModelDetailScreen
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, down_snapshot, snapshot_at, step_index

MIB = 1024 * 1024


def rows(app: KvtopApp) -> list[list[str]]:
    table = app.query_one(ModelsTable)
    return [[str(getattr(c, "plain", c)) for c in table.get_row_at(i)] for i in range(table.row_count)]


def header_text(app: KvtopApp) -> str:
    return app.query_one(ServerHeader).render().plain


async def wait_for(pilot: object, cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def app_with(*snaps: object, interval_s: float = 0.25) -> KvtopApp:
    return make_app(Settings(host_url=HOST, interval_s=interval_s), FakeSource(*snaps))  # type: ignore[arg-type]


async def test_table_shows_models_with_kv_math_at_80x24() -> None:
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        table = rows(app)
        names = [r[0] for r in table]
        assert names == ["qwen3:1.7b-q4_K_M", "gemma4:latest", "qwen3:1.7b-q8_0"]
        # 28 layers × 8 KV heads × (128+128) × 2 B = 114,688 B/token; ×4096 = 448 MiB, ×32768 = 3.5 GiB
        assert table[0][2].endswith("KV ~448M")
        assert table[2][2].endswith("KV ~3.5G")
        assert [r[4] for r in table] == ["100% GPU", "19%/81% CPU/GPU", "100% GPU"]
        assert [r[3] for r in table] == ["4096×1*", "4096×1*", "32768×1*"]
        head = header_text(app)
        assert "kvtop  ● up  127.0.0.1:11434  Ollama 0.22.1  latency 4 ms" in head  # flags first
        assert "3 models loaded" in head and "1 spilled to CPU" in head


async def test_wide_table_has_all_columns() -> None:
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        table = app.query_one(ModelsTable)
        labels = [str(c.label) for c in table.columns.values()]
        # gemma4 is spilled: SIZE reads VRAM+RAM (its cell: 5.0G+1.2G)
        assert labels == [
            "NAME",
            "ID",
            "VRAM+RAM",
            "MEMORY weights|KV|compute",
            "CONTEXT",
            "PROCESSOR",
            "FLASH ATTN",
            "KV TYPE",
            "TOK/S",
            "UNTIL",
            "VRAM 1m",
        ]
        assert [r[0] for r in rows(app)] == ["qwen3:1.7b-q4_K_M", "gemma4:latest", "qwen3:1.7b-q8_0"]
        q8 = rows(app)[2]
        assert q8[1] == "b4c0dd6fbac8"
        assert q8[3].endswith("W 2.0G KV ~3.5G C ~141M")  # 6,106,141,568 − 2,200,000,000 − 3,758,096,384
        assert q8[6] == "?" and q8[7] == "f16*"
        assert rows(app)[0][8] == "?"  # no server log: speed not known
        assert (
            rows(app)[0][9] == "Forever" and rows(app)[2][9] == "4 min"
        )  # 300 s keep-alive, a moment later (Go truncates)
        assert q8[10] == "      █"  # VRAM 1m: one sample so far, in the newest slice of the minute


async def test_enter_opens_detail_with_kv_arithmetic_and_escape_returns() -> None:
    app = app_with(snapshot_at(step_index("raised to 32768")))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        app.query_one(ModelsTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
        body = str(app.screen.query_one("#detail-body", Static).content)
        assert "~3.5 GiB (3,758,096,384 B)" in body  # 32768 × 114,688, estimated: marked as on every screen
        assert "114,688 B" in body
        assert "[estimated]" in body and "[reported]" in body and "[Ollama default]" in body
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ModelDetailScreen))


async def test_server_down_keeps_last_models_and_says_why() -> None:
    # hold: the failed poll is not repeated, so the header is read after exactly one (a loaded
    # machine may otherwise poll again before the header is read: "2 failed polls")
    src = FakeSource(snapshot_at(step_index("spills")), down_snapshot(TAKEN_AT + 12), hold=True)
    app = make_app(Settings(host_url=HOST, interval_s=0.25), src)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.state is not None and app.state.failures >= 1)
        head = header_text(app)
        assert "✖ down" in head
        assert "data from 12 s ago · 1 failed poll · connection refused (http://127.0.0.1:11434)" in head
        assert app.query_one(ModelsTable).row_count == 3
        assert app.query_one(ModelsTable).has_class("-stale")


async def test_keys_pause_interval_sort_filter_help() -> None:
    src = FakeSource(snapshot_at(step_index("spills")))
    app = make_app(Settings(host_url=HOST, interval_s=1.0), src)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("p")
        assert app.paused and "PAUSED" in header_text(app)
        calls = src.calls
        await pilot.pause(0.3)
        assert src.calls == calls  # no polling while paused
        await pilot.press("p")
        assert not app.paused
        await pilot.press("plus")
        assert app.interval_s == 2.0
        await pilot.press("minus", "minus")
        assert app.interval_s == 0.5
        assert "every 0.5 s" in header_text(app)
        await pilot.press("s")  # server -> size
        assert app.sort_key == "size"
        assert [r[0] for r in rows(app)] == ["gemma4:latest", "qwen3:1.7b-q8_0", "qwen3:1.7b-q4_K_M"]
        await pilot.press("s", "s")  # -> name -> cpu
        assert app.sort_key == "cpu"
        assert rows(app)[0][0] == "gemma4:latest"
        await pilot.press("slash")
        await pilot.press(*"q4")
        assert [r[0] for r in rows(app)] == ["qwen3:1.7b-q4_K_M"]
        await pilot.press("enter")
        assert app.filter_text == "q4" and len(rows(app)) == 1
        await pilot.press("escape")
        assert app.filter_text == "" and len(rows(app)) == 3
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.return_code == 0


async def test_empty_server_says_no_model_loaded() -> None:
    app = app_with(snapshot_at(0))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state is not None and app.state.reachable is True)
        assert "No model loaded" in str(app.query_one("#status").render())
        assert "0 models loaded" in header_text(app)


async def test_terminal_too_small_says_so() -> None:
    app = app_with(snapshot_at(1))
    async with app.run_test(size=(50, 10)) as pilot:
        await pilot.pause(0.2)
        assert app.screen.has_class("-too-small")
        assert "Terminal too small: 50×10" in str(app.query_one("#too-small").render())


async def test_too_small_hides_the_alerts_panel_row() -> None:
    """A saved alerts-panel choice (f) put '─Alerts (1)──' and a scrollbar over the 'too small'
    message: ``Screen.-panel-row #panel-row`` came later in the stylesheet with the same weight."""
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("f")  # the alerts panel on (below 120x40 it is off by default)
        await wait_for(pilot, lambda: app.screen.has_class("-panel-row"))
        assert app.query_one("#panel-row").display
        await pilot.resize_terminal(40, 10)
        await wait_for(pilot, lambda: app.screen.has_class("-too-small"))
        await pilot.pause(0.1)
        assert app.screen.has_class("-panel-row")  # the choice stays: it comes back on resize
        assert not app.query_one("#panel-row").display
        assert app.query_one("#too-small").display
        await pilot.resize_terminal(100, 30)
        await wait_for(pilot, lambda: not app.screen.has_class("-too-small"))
        await pilot.pause(0.1)
        assert app.query_one("#panel-row").display


@pytest.mark.parametrize("evil", ["\x1b[31mred\x1b[0m:latest", "[bold]markup[/bold]:latest", "bell\x07:latest"])
async def test_server_text_cannot_inject_escapes_or_markup(evil: str) -> None:
    import dataclasses

    snap = snapshot_at(1)
    snap = dataclasses.replace(snap, models=(dataclasses.replace(snap.models[0], name=evil),))
    app = app_with(snap)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        shown = rows(app)[0][0]
        assert "\x1b" not in shown and "\x07" not in shown
        if evil.startswith("["):
            assert shown == evil  # shown literally, never interpreted as markup


async def test_dashboard_keys_do_nothing_behind_the_detail_view() -> None:
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        app.query_one(ModelsTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
        await pilot.press("s", "slash")
        assert app.sort_key == "server" and not app.query_one("#filter").has_class("-visible")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ModelDetailScreen))


async def test_too_small_comes_back_after_the_detail_view() -> None:
    app = app_with(snapshot_at(1))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        app.query_one(ModelsTable).focus()
        await pilot.press("p", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
        await pilot.resize_terminal(50, 10)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ModelDetailScreen))
        assert app.screen.has_class("-too-small")


async def test_keys_typed_right_after_slash_go_to_the_filter() -> None:
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("slash", "q", "w", "e", "n")  # one burst: "q" must not quit
        assert app.is_running and app.filter_text == "qwen"


async def test_escaped_digest_cannot_reach_the_terminal() -> None:
    import dataclasses

    snap = snapshot_at(1)
    evil = "\x1b]2;OWNED\x07" + "ab" * 32
    snap = dataclasses.replace(snap, models=(dataclasses.replace(snap.models[0], digest=evil),))
    app = app_with(snap)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        assert "\x1b" not in "".join(rows(app)[0])


async def test_reverse_sort_events_pane_raw_and_navigation_keys() -> None:
    app = app_with(snapshot_at(step_index("spills")))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("s")  # size
        assert [r[0] for r in rows(app)][0] == "gemma4:latest"
        await pilot.press("S")
        assert app.sort_reverse and [r[0] for r in rows(app)][0] == "qwen3:1.7b-q4_K_M"
        table = app.query_one(ModelsTable)
        app.dashboard.set_focus(table)
        await pilot.pause()
        await pilot.press("end")
        assert table.cursor_row == 2
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("down", "pagedown", "pageup")
        assert table.cursor_row == 0
        pane = app.dashboard.query_one("#events")
        await pilot.press("f")  # the alerts panel (shown from 120×40) off: the events pane then lists the alerts,
        # and takes the rows the alerts left (an auto events pane fills free rows from 120×36)
        await wait_for(pilot, lambda: pane.has_class("-visible") and pane.row_count > 0)
        # the active alerts come first, each with every fix; then the events (none: it says why)
        assert str(pane.get_row_at(0)[1]) == "✖ spill"
        assert str(pane.get_row_at(0)[2]).startswith("gemma4:latest · <1 min: 19% of 6.1 GiB in system RAM (1.2 GiB)")
        fixes = [str(pane.get_row_at(i)[2]) for i in range(1, pane.row_count - 1)]
        assert fixes and all(str(pane.get_row_at(i)[1]).strip() == "fix" for i in range(1, pane.row_count - 1))
        assert fixes[0].startswith("num_ctx 21760 for qwen3:1.7b-q8_0 — frees 1.2 GiB of VRAM")
        assert "server log: off (--log none)" in str(pane.get_row_at(pane.row_count - 1)[2])  # Settings' default
        await pilot.press("r")
        assert pane.raw
        await pilot.press("l")
        assert not pane.has_class("-visible")


async def test_footer_hides_typed_keys_while_filtering_and_ctrl_c_still_quits() -> None:
    app = app_with(snapshot_at(1))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        assert app.check_action("cycle_sort", ()) is True
        await pilot.press("slash")
        assert app.check_action("cycle_sort", ()) is False and app.check_action("quit", ()) is False
        await pilot.press("ctrl+c")
    assert app.return_code == 0


async def test_w_opens_the_what_if_planner_for_the_selected_model() -> None:
    from kvtop.ui.screens.plan import PlanScreen

    app = app_with(snapshot_at(step_index("raised to 32768")))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen))
        assert app.screen.model_name == "qwen3:1.7b-q8_0"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, PlanScreen))


async def test_a_signal_arms_a_watchdog_in_case_shutdown_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM/SIGHUP quit cleanly, and a daemon timer ends the process if the shutdown hangs
    (seen once when the terminal had vanished: Textual's writer thread blocked)."""
    import os

    import kvtop.ui.app as app_module

    armed: list[tuple[float, object, tuple[object, ...], bool]] = []

    class FakeTimer:
        def __init__(self, interval: float, function: object, args: tuple[object, ...]) -> None:
            self.interval, self.function, self.args, self.daemon = interval, function, args, False

        def start(self) -> None:
            armed.append((self.interval, self.function, self.args, self.daemon))

    monkeypatch.setattr(app_module.threading, "Timer", FakeTimer)
    app = make_app(Settings(host_url=HOST, interval_s=1.0), FakeSource(snapshot_at(1), hold=True))  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app._exit_on_signal()
        await pilot.pause()
    assert armed == [(app_module.SIGNAL_EXIT_GRACE_S, os._exit, (0,), True)]
    assert app.return_code == 0
