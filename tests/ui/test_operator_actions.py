"""The operator actions (unload, keep-alive) against a real stand-in (``python -m kvtop.demo.server``).

Pilot presses the keys; the stand-in's own request log (``GET /_standin/requests``) judges what
was written; the rows follow ``/api/ps`` (the row leaves after an unload, UNTIL changes after a
keep-alive). Every confirmation opens on Cancel: Enter cancels.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from typing import Any

from textual.widgets import OptionList

from kvtop.config import Settings
from kvtop.model.views import ModelView
from kvtop.ui.actions import countdown_text, fix_operation, live_views
from kvtop.ui.screens.write_dialogs import FixTextScreen, KeepAliveScreen
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.confirm import ConfirmWrite
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.models_table import ModelsTable
from kvtop.ui.widgets.panels import AlertsPanel
from kvtop.model.alerts import Alert, Fix
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.standin import BUNDLED, Standin, running
from tests.ui.fakes import snapshot_at, step_index
from tests.ui.confirming import armed, confirm
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for

Q8 = "qwen3:1.7b-q8_0"
Q4 = "qwen3:1.7b-q4_K_M"
GEMMA = "gemma4:latest"


def _app(server: Standin, *, readonly: bool = False, interval_s: float = 0.25) -> KvtopApp:
    return make_app(
        Settings(host_url=server.url, interval_s=interval_s, readonly=readonly),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _select(pilot: Any, name: str) -> ModelsTable:
    app = pilot.app
    await wait_for(pilot, lambda: any(v.name == name for v in app.state.models), timeout_s=10)
    table = app.query_one(ModelsTable)
    await wait_for(pilot, lambda: any(v.name == name for v in table._views))
    table.focus()
    table.move_cursor(row=next(i for i, v in enumerate(table._views) if v.name == name))
    return table


def _log(app: KvtopApp) -> list[str]:
    return [f"{e.what}: {e.outcome}" for e in app.operator.log]


async def test_unload_asks_on_cancel_then_the_row_leaves() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            dialog = app.screen
            assert isinstance(dialog, ConfirmWrite)
            assert app.focused is not None and app.focused.id == "no"
            # the VRAM it frees, as the table shows it, with its source
            assert f"Unload {GEMMA} now?" in dialog.text
            assert (
                f"{GEMMA} frees 5.0 GiB (5,333,539,264 B) of VRAM (reported: /api/ps size_vram) and 1.2 GiB of"
                " system RAM."
            ) in dialog.text
            assert '"keep_alive": 0} (as `ollama stop` does).' in dialog.text  # one model: no "for each"
            await pilot.press("enter")  # Cancel has the focus: Enter cancels
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmWrite))
            assert _log(app) == [f"unload {GEMMA}: cancelled: nothing sent"]
            await pilot.pause(0.3)
            assert server.writes() == []

            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=5)
            await wait_for(pilot, lambda: all(v.name != GEMMA for v in app.state.models), timeout_s=10)
            assert [m["name"] for m in server.ps()] == [Q4, Q8]
            await wait_for(pilot, lambda: any("done: /api/ps no longer lists it" in e for e in _log(app)))
            assert f"unload {GEMMA}: sent; unloading… (the row leaves when /api/ps no longer lists it)" in _log(app)
            assert app.operator.unloading == {}
            # the events pane shows each write with its outcome
            await pilot.press("l")
            pane = app.query_one(EventsPane)
            await wait_for(pilot, lambda: pane.row_count > 0 and "done" in pane.detail(0))
            assert pane.detail(0) == f"unload {GEMMA}: done: /api/ps no longer lists it"


async def test_unloading_shows_until_the_row_leaves_and_says_when_it_stays() -> None:
    """The stand-in's /api/ps keeps listing the model (the unload went to another step): the row
    reads "unloading…" and after a few polls kvtop says it is still listed."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("A second model"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            table = await _select(pilot, Q8)
            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            app.paused = True  # no poll sees the unload land
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")])
            server.goto(step_index("gemma4 loads"))  # a new step: the stand-in lists Q8 again
            app.paused = False
            await wait_for(pilot, lambda: any(v.until == "unloading…" for v in table._views))
            # the 9-cell UNTIL column cuts the ellipsis
            lines = await screen_when(pilot, lambda ls: any("unloading" in line for line in ls))
            assert any("q8_0" in line and line.rstrip().endswith("unloading") for line in lines), "\n".join(lines)
            await wait_for(
                pilot, lambda: any("still listed by /api/ps after 3 polls" in e for e in _log(app)), timeout_s=10
            )


async def test_keep_alive_changes_until() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("A second model"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, Q4)
            assert next(v for v in app.state.models if v.name == Q4).until == "Forever"
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, KeepAliveScreen))
            options = app.screen.query_one(OptionList)
            assert [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)] == [
                "5 m",
                "1 h",
                "forever (-1)",
                "0 = release now",
            ]
            await pilot.press("down", "enter")  # 1 h (the list starts on 5 m)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            text = app.screen.text  # type: ignore[attr-defined]
            assert f"Set the keep-alive of {Q4} to 1 h?" in text and "keep_alive '1h'" in text
            await pilot.press("enter")
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmWrite))
            assert server.writes() == [] and _log(app) == [f"keep-alive 1 h for {Q4}: cancelled: nothing sent"]

            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, KeepAliveScreen))
            await pilot.press("down", "enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            sent_at = time.time()
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")])
            await wait_for(
                pilot,
                lambda: next(v for v in app.state.models if v.name == Q4).until == "59 minutes from now",
                timeout_s=10,
            )
            view = next(v for v in app.state.models if v.name == Q4)
            assert view.expires_at is not None and abs(view.expires_at.timestamp() - (sent_at + 3600)) < 5
            assert f"keep-alive 1 h for {Q4}: sent; UNTIL shows the new expiry on the next poll" in _log(app)

            # 0 = release now: the row leaves
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, KeepAliveScreen))
            await pilot.press("end", "enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            assert "keep_alive 0" in app.screen.text  # type: ignore[attr-defined]
            await confirm(pilot)
            await wait_for(pilot, lambda: all(v.name != Q4 for v in app.state.models), timeout_s=10)
            assert [m["name"] for m in server.ps()] == [Q8]


async def test_until_counts_seconds_in_the_last_minute_between_polls() -> None:
    """The poll is every 30 s, yet UNTIL counts down each second in the last minute."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("A second model"))
        app = _app(server, interval_s=30.0)
        async with app.run_test(size=(100, 30)) as pilot:
            table = await _select(pilot, Q8)
            assert app.operator._until_timer is None  # no model in its last minute: no per-second repaint
            server.client.post("/api/generate", json={"model": Q8, "prompt": "", "keep_alive": "50s"})
            app.action_faster()  # one poll now
            await wait_for(
                pilot,
                lambda: any(v.until.endswith("s") and v.until[:-1].isdigit() for v in table._views if v.name == Q8),
                timeout_s=10,
            )
            first = next(v.until for v in table._views if v.name == Q8)
            await wait_for(pilot, lambda: next(v.until for v in table._views if v.name == Q8) != first, timeout_s=3)
            second = next(v.until for v in table._views if v.name == Q8)
            assert 0 < int(first[:-1]) - int(second[:-1]) <= 2 and int(first[:-1]) <= 50
            assert app.operator._until_timer is not None
            lines = await screen_when(pilot, lambda ls: any(Q8 in line and "s " in line for line in ls))
            assert any(Q8 in line and f"{int(second[:-1]) - 1}s" in line or second in line for line in lines)


def test_countdown_and_live_views() -> None:
    snap = snapshot_at(step_index("A second model"))
    from kvtop.model.state import fold, initial_state

    state = fold(initial_state(snap.host_url, {}, timezone.utc)[0], snap)
    q8 = next(v for v in state.models if v.name == Q8)
    q4 = next(v for v in state.models if v.name == Q4)
    assert q8.expires_at is not None
    end = q8.expires_at.timestamp()
    assert countdown_text(q8, end - 42.4) == "42s"
    assert countdown_text(q8, end - 59.9) == "59s"
    assert countdown_text(q8, end - 60.0) is None  # "About a minute" stays Ollama's words
    assert countdown_text(q8, end + 1) is None  # past: Stopping...
    assert countdown_text(q4, end) is None  # forever
    views, ticking = live_views(state.models, end - 10.2)
    assert ticking and next(v for v in views if v.name == Q8).until == "10s"
    views, ticking = live_views(state.models, end - 100, unloading={(Q8, q8.digest)})
    assert not ticking and next(v for v in views if v.name == Q8).until == "unloading…"


def test_fix_operations() -> None:
    loaded = [Q8, Q4]
    assert fix_operation(Fix(f"unload {Q8}", "frees 5.7 GiB", True, ""), loaded) == ("unload", (Q8,))
    assert fix_operation(Fix(f"unload {Q8}, {Q4}", "", True, ""), loaded) == ("unload", (Q8, Q4))
    assert fix_operation(Fix("unload other:latest", "", True, ""), loaded) is None  # not loaded (any more)
    assert fix_operation(Fix("stop PID 4242", "frees 8.0 GiB", None, ""), loaded) == ("signal", 4242)
    assert fix_operation(Fix("OLLAMA_KV_CACHE_TYPE=q8_0", "", True, ""), loaded) is None
    assert fix_operation(Fix("num_ctx 16384", "", True, ""), loaded) is None


async def test_enter_on_a_fix_offers_the_unload_or_shows_a_setting_to_copy() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(110, 36)) as pilot:  # under 120x40: the fixes are in the events pane
            await _select(pilot, GEMMA)
            await wait_for(
                pilot,
                lambda: any(f.action.startswith("unload ") for a in app.state.alerts for f in a.fixes),
                timeout_s=10,
            )
            await pilot.press("l")
            pane = app.query_one(EventsPane)
            await wait_for(pilot, lambda: any(pane.fix_at(i) is not None for i in range(pane.row_count)))
            unload_row = next(
                i
                for i in range(pane.row_count)
                if (f := pane.fix_at(i)) is not None and f[0].action.startswith("unload ")
            )
            target = pane.fix_at(unload_row)[0].action.removeprefix("unload ")  # type: ignore[index]
            pane.focus()
            pane.move_cursor(row=unload_row)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            assert app.focused is not None and app.focused.id == "no"
            assert f"Unload {target} now?" in app.screen.text  # type: ignore[attr-defined]
            await pilot.press("enter")  # cancels
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmWrite))
            assert server.writes() == []
            setting_row = next(
                (
                    i
                    for i in range(pane.row_count)
                    if (f := pane.fix_at(i)) is not None
                    and fix_operation(f[0], [v.name for v in app.state.models]) is None
                ),
                None,
            )
            assert setting_row is not None
            setting = pane.fix_at(setting_row)[0]  # type: ignore[index]
            pane.move_cursor(row=setting_row)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, FixTextScreen))
            copied: list[str] = []
            app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
            await pilot.press("c")
            assert copied == [setting.action]
            await pilot.press("escape")
            await pilot.pause(0.3)
            assert server.writes() == []


async def test_keep_alive_for_a_model_that_left_while_asking_is_not_sent() -> None:
    """An empty generate loads a model that is not loaded: a keep-alive confirmed after the model
    left /api/ps is not sent (it would load the model again), and says why."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, KeepAliveScreen))
            await pilot.press("down", "enter")  # 1 h
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            server.goto(step_index("gemma4 finished and unloaded"))
            await wait_for(pilot, lambda: all(v.name != GEMMA for v in app.state.models), timeout_s=10)
            await confirm(pilot)
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmWrite))
            await pilot.pause(0.5)
            assert server.writes() == []
            assert _log(app) == [
                f"keep-alive 1 h for {GEMMA}: failed: not sent: /api/ps no longer lists {GEMMA}"
                " (a keep-alive would load it again)"
            ]


async def _focus_alerts_panel(pilot: Any) -> AlertsPanel:
    app = pilot.app
    panel = app.query_one(AlertsPanel)
    await wait_for(
        pilot, lambda: panel.display and any(f.action.startswith("unload ") for f, _ in panel.fixes), timeout_s=10
    )
    for _ in range(6):  # Tab from the table reaches the panel, as a user gets there
        if app.focused is panel:
            break
        await pilot.press("tab")
    assert app.focused is panel
    return panel


async def _cursor_to(pilot: Any, panel: AlertsPanel, index: int) -> None:
    await pilot.press(*(["up"] * len(panel.fixes)), *(["down"] * index))
    assert panel.cursor == index


async def test_enter_on_a_fix_in_the_alerts_panel_at_160x48() -> None:
    """From 120x40 the alerts panel holds the fixes (the events pane leaves them out): Tab, ↑/↓ and
    Enter there offer them as the events pane does, behind the same confirmation."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(160, 48)) as pilot:
            await _select(pilot, GEMMA)
            panel = await _focus_alerts_panel(pilot)
            loaded = [v.name for v in app.state.models]
            unload_at = next(
                i
                for i, (f, _) in enumerate(panel.fixes)
                if fix_operation(f, loaded) is not None and f.action.startswith("unload ")
            )
            target = panel.fixes[unload_at][0].action.removeprefix("unload ")
            await _cursor_to(pilot, panel, unload_at)
            cursor = [s for s in panel.content.spans if "reverse" in str(s.style)]  # shown while focused
            assert cursor and panel.content.plain[cursor[0].start : cursor[0].end].strip().startswith(
                f"fix: unload {target}"
            )
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            assert app.focused is not None and app.focused.id == "no"
            assert f"Unload {target} now?" in app.screen.text  # type: ignore[attr-defined]
            await pilot.press("enter")  # Cancel has the focus
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmWrite))
            assert _log(app)[0] == f"unload {target}: cancelled: nothing sent"
            setting_at = next(i for i, (f, _) in enumerate(panel.fixes) if fix_operation(f, loaded) is None)
            setting = panel.fixes[setting_at][0]
            await _cursor_to(pilot, panel, setting_at)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, FixTextScreen))
            assert setting.action in str(app.screen.query_one("#fix-text").content)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, FixTextScreen))
            # confirmed from the panel: the write goes out and the row leaves
            await _cursor_to(
                pilot, panel, next(i for i, (f, _) in enumerate(panel.fixes) if f.action == f"unload {target}")
            )
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=5)
            await wait_for(pilot, lambda: all(v.name != target for v in app.state.models), timeout_s=10)


async def test_alerts_panel_fix_is_text_only_with_readonly() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server, readonly=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await _select(pilot, GEMMA)
            panel = await _focus_alerts_panel(pilot)
            unload_at = next(i for i, (f, _) in enumerate(panel.fixes) if f.action.startswith("unload "))
            await _cursor_to(pilot, panel, unload_at)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, FixTextScreen))
            text = str(app.screen.query_one("#fix-text").content)
            assert "read-only (--readonly): kvtop sends nothing" in text
            assert panel.fixes[unload_at][0].action in text
            await pilot.press("y", "enter")
            await pilot.pause(0.3)
            assert server.writes() == []


def _alert_with(fix: Fix) -> Alert:
    return Alert("spill", "critical", GEMMA, None, "spilled", (fix,), "spill:x")


async def test_readonly_fix_is_text_only() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server, readonly=True)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            app.post_message(
                EventsPane.FixChosen(
                    Fix(f"unload {Q8}", "frees 5.7 GiB", True, ""), _alert_with(Fix(f"unload {Q8}", "", True, ""))
                )
            )
            await wait_for(pilot, lambda: isinstance(app.screen, FixTextScreen))
            text = str(app.screen.query_one("#fix-text").content)
            assert "read-only (--readonly): kvtop sends nothing" in text and f"unload {Q8}" in text
            await pilot.press("y", "enter")
            await pilot.pause(0.3)
            assert server.writes() == []


def _view(expires: datetime) -> ModelView:
    snap = snapshot_at(step_index("A second model"))
    from kvtop.model.state import fold, initial_state

    v = next(v for v in fold(initial_state(snap.host_url, {}, timezone.utc)[0], snap).models if v.name == Q8)
    import dataclasses

    return dataclasses.replace(v, expires_at=expires)


def test_countdown_ignores_go_zero_time() -> None:
    assert countdown_text(_view(datetime(1, 1, 1, tzinfo=timezone.utc)), time.time()) is None


async def test_readonly_full_session_sends_only_reads() -> None:
    """--readonly: every screen visited, every action key pressed (and the palette searched):
    the stand-in receives only GET and POST /api/show; no write is offered anywhere."""
    from kvtop.ui.screens.help import HelpScreen
    from kvtop.ui.screens.history import HistoryScreen
    from kvtop.ui.screens.model_detail import ModelDetailScreen
    from kvtop.ui.screens.plan import PlanScreen

    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        for size in ((80, 24), (160, 48)):
            app = _app(server, readonly=True)
            async with app.run_test(size=size) as pilot:
                await _select(pilot, GEMMA)
                footer = (await screen_when(pilot, lambda ls: "Quit" in ls[-1]))[-1]
                assert "Unload" not in footer and "Keep-alive" not in footer and "Signal" not in footer
                assert not any(
                    b.binding.action in ("unload", "keep_alive", "signal_process")
                    for b in app.screen.active_bindings.values()
                )
                assert not [
                    c
                    for c in app.get_system_commands(app.screen)
                    if c.title in ("Unload model", "Keep-alive", "Signal GPU process")
                ]
                keys = ("u", "y", "a", "enter", "y", "k", "enter", "9", "y", "y")

                async def back() -> None:
                    while len(app.screen_stack) > 1:
                        await pilot.press("escape")
                        await pilot.pause(0.05)
                    await _select(pilot, GEMMA)

                await pilot.press(*keys)  # Enter here opens the detail view: keys land there too
                await back()
                for screen_key, kind in (
                    ("question_mark", HelpScreen),
                    ("enter", ModelDetailScreen),
                    ("h", HistoryScreen),
                    ("w", PlanScreen),
                ):
                    await pilot.press(screen_key)
                    await wait_for(pilot, lambda: isinstance(app.screen, kind), timeout_s=10)
                    await pilot.press(*keys)
                    await back()
                await pilot.press("g", *keys)
                await back()
                await pilot.press("g", "l", *keys)
                await back()
                pane = app.query_one(EventsPane)
                pane.focus()
                await wait_for(pilot, lambda: pane.row_count > 0)
                for row in range(pane.row_count):
                    pane.move_cursor(row=row)
                    await pilot.press("enter", "y", "c")
                    if len(app.screen_stack) > 1:
                        await pilot.press("escape")
                        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
                await pilot.press("ctrl+p")
                await pilot.press(*"unload", "enter", "y")
                await pilot.pause(0.5)
                assert app.operator.log == []
            requests = server.requests()
            assert ("GET", "/api/ps") in requests and ("POST", "/api/show") in requests
            assert all(m == "GET" or (m, p) == ("POST", "/api/show") for m, p in requests), requests
            assert server.writes() == []


def _gpu_with(*pids: int) -> tuple[Any, Any]:
    from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess, GpuSnapshot, ProcSnapshot, ProcessInfo
    from tests.fakes.gpu_sources import FIXED_SYSTEM

    gib = 1024**3
    device = GpuDevice(
        index=0,
        name="NVIDIA RTX A6000",
        memory_total_bytes=48 * gib,
        memory_used_bytes=12 * gib,
        memory_free_bytes=36 * gib,
        processes=tuple(GpuProcess(pid, (i + 1) * gib) for i, pid in enumerate(pids)),
    )
    gpu = GpuSnapshot(
        taken_at=time.time(),
        status="GPU telemetry: NVML",
        ok=True,
        backend="nvml",
        devices=(device,),
        system=FIXED_SYSTEM,
    )
    procs = ProcSnapshot(
        taken_at=time.time(),
        processes={pid: ProcessInfo(pid, user="tester", name="sleep", cmdline=("sleep", "60")) for pid in pids},
    )
    return FixedGpuSource(gpu), FixedProcSource(procs)


async def test_signal_a_foreign_gpu_process_sigterm_then_sigkill_behind_two_confirmations() -> None:
    import signal
    import subprocess
    import sys

    from kvtop.ui.screens.write_dialogs import SignalScreen

    term = subprocess.Popen(["sleep", "60"])
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    try:
        with running(["--manual", "--scenario", str(BUNDLED)]) as server:
            server.goto(step_index("A second model"))
            gpu, procs = _gpu_with(term.pid, stubborn.pid)
            app = make_app(Settings(host_url=server.url, interval_s=0.25), gpu_source=gpu, proc_source=procs)
            async with app.run_test(size=(120, 40)) as pilot:
                await _select(pilot, Q8)
                await wait_for(pilot, lambda: len(app.operator.foreign_processes()) == 2)
                await pilot.press("k")
                await wait_for(pilot, lambda: isinstance(app.screen, SignalScreen))
                screen = app.screen
                assert isinstance(screen, SignalScreen)
                await wait_for(pilot, lambda: len(screen.targets) == 2)
                assert all(t.allowed for t in screen.targets.values())
                # SIGTERM: Enter asks (Cancel focused), Enter cancels; then y sends
                await pilot.press("enter")
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                assert app.focused is not None and app.focused.id == "no"
                assert f"Send SIGTERM to PID {term.pid} (sleep" in app.screen.text  # type: ignore[attr-defined]
                await pilot.press("enter")
                await wait_for(pilot, lambda: app.screen is screen)
                assert term.poll() is None
                await pilot.press("enter")
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                await confirm(pilot)
                await wait_for(pilot, lambda: term.poll() is not None, timeout_s=5)
                assert term.returncode == -signal.SIGTERM
                await wait_for(pilot, lambda: any(f"SIGTERM PID {term.pid} (sleep): sent" in e for e in _log(app)))

                # SIGKILL on the process that ignores SIGTERM: two confirmations
                await pilot.press("down", "9")
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                await confirm(pilot)
                await wait_for(
                    pilot, lambda: isinstance(app.screen, ConfirmWrite) and "last question" in app.screen.text
                )  # type: ignore[attr-defined]
                assert app.focused is not None and app.focused.id == "no"
                await pilot.press("enter")  # the second question cancels too
                await wait_for(pilot, lambda: app.screen is screen)
                await pilot.pause(0.2)
                assert stubborn.poll() is None
                await pilot.press("9")
                await confirm(pilot)
                await wait_for(pilot, lambda: "last question" in getattr(app.screen, "text", ""))
                await confirm(pilot)
                await wait_for(pilot, lambda: stubborn.poll() is not None, timeout_s=5)
                assert stubborn.returncode == -signal.SIGKILL
                assert any(e.startswith(f"SIGKILL PID {stubborn.pid}") and "cancelled" in e for e in _log(app))
    finally:
        for p in (term, stubborn):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=5)


def test_a_process_of_another_user_cannot_be_signalled(monkeypatch: Any) -> None:
    import subprocess

    from kvtop.sources import signals

    child = subprocess.Popen(["sleep", "60"])
    try:
        own = signals.signal_target(child.pid)
        assert own.allowed and own.mine  # the test's own child: no second question
        other = 4242 if os.getuid() != 4242 else 4243
        monkeypatch.setattr(signals, "_ids", lambda: (other, {other}))  # as if kvtop ran as another user
        target = signals.signal_target(child.pid)
        assert not target.allowed and "only its owner or root may signal it" in target.reason
        assert signals.send_signal(target, 15) == f"PID {child.pid}: {target.reason}"
        assert child.poll() is None
        assert signals.signal_target(1).reason == "PID 1 and the kernel are never signalled"
        assert signals.signal_target(os.getpid()).reason == "this is kvtop itself"
    finally:
        child.kill()
        child.wait(timeout=5)


async def test_the_demo_never_signals_its_simulated_processes() -> None:
    """--demo's GPU processes are simulated: a PID of theirs may be a real process of this machine
    (here a child the test owns, which kvtop would be allowed to signal). k, the palette and Enter
    on a "stop PID" fix signal nothing; the fix is shown as text."""
    import subprocess

    from kvtop.ui.screens.write_dialogs import SignalScreen

    child = subprocess.Popen(["sleep", "60"])
    try:
        with running(["--manual", "--scenario", str(BUNDLED)]) as server:
            server.goto(step_index("A second model"))
            gpu, procs = _gpu_with(child.pid)
            app = make_app(Settings(host_url=server.url, interval_s=0.25, demo=True), gpu_source=gpu, proc_source=procs)
            async with app.run_test(size=(120, 40)) as pilot:
                await _select(pilot, Q8)
                await wait_for(pilot, lambda: len(app.operator.foreign_processes()) == 1)
                assert app.check_action("signal_process", ()) is False
                await pilot.press("k")
                await pilot.pause(0.3)
                assert not isinstance(app.screen, SignalScreen)
                assert not [c for c in app.get_system_commands(app.screen) if c.title == "Signal GPU process"]
                fix = Fix(f"stop PID {child.pid}", "frees 2.0 GiB", None, "")
                app.post_message(EventsPane.FixChosen(fix, _alert_with(fix)))
                await wait_for(pilot, lambda: isinstance(app.screen, FixTextScreen))
                text = str(app.screen.query_one("#fix-text").content)
                assert "the demo's GPU processes are simulated" in text and f"stop PID {child.pid}" in text
                await pilot.press("y", "enter", "9", "y", "y")
                await pilot.pause(0.3)
                await pilot.press("escape", "question_mark")  # the help does not offer k either
                await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
                help_body = app.screen.query_one("#help-body").content.text.plain
                assert "u          unload the selected model" in help_body and "SIGKILL" not in help_body
        assert child.poll() is None  # still running: nothing was sent
    finally:
        child.kill()
        child.wait()


def test_signal_questions_name_the_owner_and_ask_again_for_another_users_process() -> None:
    from kvtop.sources.signals import SignalTarget
    from kvtop.ui.screens.write_dialogs import signal_questions

    mine = SignalTarget(4242, True, "", "alice", "python3", 1.0, mine=True)
    other = SignalTarget(4243, True, "", "bob", "train.py", 1.0, mine=False)
    [term] = signal_questions(mine, 15)
    assert term == (
        "Send SIGTERM to PID 4242 (python3), owned by alice?\n\nIt asks the process to exit; it may clean up first.",
        "SIGTERM",
    )
    assert [label for _, label in signal_questions(mine, 9)] == ["SIGKILL", "SIGKILL"]
    first, second = signal_questions(other, 15)
    assert first[0].startswith("Send SIGTERM to PID 4243 (train.py), owned by bob (another user)?")
    assert second[0].startswith("PID 4243 (train.py) is owned by bob, not you. kvtop runs as root")
    assert "Really send SIGTERM to bob's process?" in second[0] and second[1] == "SIGTERM anyway"
    kill = signal_questions(other, 9)
    assert len(kill) == 3 and "owned by bob, not you" in kill[1][0] and "last question" in kill[2][0]
    # a name from /proc is data: no markup, no escapes
    hostile = SignalTarget(4244, True, "", "[b]x\x1b[31m", "[red]n", 1.0, mine=False)
    text = "\n".join(t for t, _ in signal_questions(hostile, 15))
    assert "\x1b" not in text


async def test_as_root_another_users_process_is_named_and_asked_about_twice() -> None:
    """kvtop runs as root: a process of the user ``nobody`` may be signalled (kill(2)), so the list
    marks it, the confirmation names its owner, and a second one says it is not yours; a No to the
    second sends nothing. A real process of another user: only where the tests run as root."""
    import pwd
    import signal
    import subprocess

    from kvtop.ui.screens.write_dialogs import SignalScreen

    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root: starting a process as another user (nobody) is only possible as root")
    nobody = pwd.getpwnam("nobody")
    child = subprocess.Popen(["sleep", "60"], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[])
    try:
        with running(["--manual", "--scenario", str(BUNDLED)]) as server:
            server.goto(step_index("A second model"))
            gpu, procs = _gpu_with(child.pid)
            app = make_app(Settings(host_url=server.url, interval_s=0.25), gpu_source=gpu, proc_source=procs)
            async with app.run_test(size=(120, 40)) as pilot:
                await _select(pilot, Q8)
                await wait_for(pilot, lambda: len(app.operator.foreign_processes()) == 1)
                await pilot.press("k")
                await wait_for(pilot, lambda: isinstance(app.screen, SignalScreen))
                screen = app.screen
                assert isinstance(screen, SignalScreen)
                await wait_for(pilot, lambda: child.pid in screen.targets)
                target = screen.targets[child.pid]
                assert target.allowed and not target.mine and target.user == "nobody"
                lines = await screen_when(pilot, lambda ls: any(str(child.pid) in line for line in ls))
                row = next(line for line in lines if str(child.pid) in line)
                assert "nobody" in row and "owned by nobody, not you (asks twice)" in row

                await pilot.press("enter")
                first = await armed(pilot)
                assert f"Send SIGTERM to PID {child.pid} (sleep), owned by nobody (another user)?" in first.text
                await pilot.press("y")
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite) and app.screen is not first)
                second = app.screen
                assert isinstance(second, ConfirmWrite)
                assert f"PID {child.pid} (sleep) is owned by nobody, not you." in second.text
                assert app.focused is not None and app.focused.id == "no"
                await pilot.press("enter")  # No to the second question: nothing sent
                await wait_for(pilot, lambda: app.screen is screen)
                assert any(e.startswith(f"SIGTERM PID {child.pid}") and "cancelled" in e for e in _log(app))
                await wait_for(pilot, lambda: "cancelled, nothing sent" in screen.status)
                assert child.poll() is None

                # both confirmed, each once armed: sent
                await pilot.press("enter")
                await confirm(pilot)
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite) and "not you" in app.screen.text)  # type: ignore[attr-defined]
                await confirm(pilot)
                await wait_for(pilot, lambda: child.poll() is not None, timeout_s=10)
                assert child.returncode == -signal.SIGTERM
                await wait_for(pilot, lambda: any(f"SIGTERM PID {child.pid} (sleep): sent" in e for e in _log(app)))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=5)
