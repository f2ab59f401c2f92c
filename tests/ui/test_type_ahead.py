"""No write without a deliberate confirmation.

Keys typed ahead of a confirmation never confirm it: ``u y`` and "buy" on the dashboard, ``w a y``
in the what-if, ``Enter y`` in the ``k`` screen, a click on the action before it is armed, and
random bursts of the dashboard's keys. A confirmation accepts ``y`` (or a click) only once it is
armed, ``ConfirmWrite.ARM_S`` after it was drawn; the tests wait for that state (``armed``), never
for a time. The judge of a write is the stand-in's own request log (``GET /_standin/requests``)
and of a signal, a ``sleep 60`` child the test owns.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
from typing import Any

import pytest
from textual import events
from textual.widgets import Button

from kvtop.config import Settings
from kvtop.ui.screens.write_dialogs import SignalScreen
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.confirm import ConfirmWrite
from kvtop.ui.screens.plan import ConfirmLoad, PlanScreen
from tests.standin import BUNDLED, Standin, running
from tests.ui.confirming import armed, confirm
from tests.ui.fakes import step_index
from tests.ui.keys import burst
from tests.ui.test_operator_actions import GEMMA, Q4, Q8, _app, _gpu_with, _log, _select
from tests.ui.test_plan_screen import wait_for


async def drained(pilot: Any, timeout_s: float = 30.0) -> None:
    """Wait until the app and every widget of every screen have an empty message queue, three
    checks in a row (keys posted in a burst are all handled)."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    calm = 0
    while calm < 3:
        if loop.time() > deadline:
            raise AssertionError("the app did not go quiet")
        nodes = [app, *(n for s in app.screen_stack for n in s.walk_children(with_self=True))]
        calm = calm + 1 if all(n.message_queue_size == 0 for n in nodes) else 0
        await pilot.pause(0.05)


def _answers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every confirmation's answer, as given (a spy around ``ConfirmWrite.dismiss``)."""
    seen: list[Any] = []
    original = ConfirmWrite.dismiss

    def dismiss(self: ConfirmWrite, result: Any = None) -> Any:
        seen.append(result)
        return original(self, result)

    monkeypatch.setattr(ConfirmWrite, "dismiss", dismiss)
    return seen


async def _no_write_after_arming(pilot: Any, server: Standin) -> ConfirmWrite:
    """The dialog on top becomes armed (a key typed ahead would fire now if it had been queued),
    and still nothing was written."""
    dialog = await armed(pilot)
    await drained(pilot)
    assert server.writes() == []
    return dialog


async def test_u_y_and_buy_in_one_burst_unload_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = _answers(monkeypatch)
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            for keys in ("uy", "buy"):
                await _select(pilot, GEMMA)
                burst(pilot, keys)
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                await drained(pilot)
                dialog = await _no_write_after_arming(pilot, server)
                assert True not in answers and app.screen is dialog
                await pilot.press("escape")
                await wait_for(pilot, lambda: len(app.screen_stack) == 1)
            assert _log(app) == [f"unload {GEMMA}: cancelled: nothing sent"] * 2

            # a deliberate y, once the dialog is armed, unloads
            await pilot.press("u")
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=10)
            assert answers == [False, False, True]


async def test_a_y_arriving_before_the_dialog_was_shown_is_swallowed_not_queued() -> None:
    """A key read before the dialog was drawn but handled after (a busy loop, a terminal read)
    reaches the dialog itself: its time is before the arming, so it is swallowed, even once the
    dialog is armed; the button says to wait until then."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            early = events.Key("y", "y")  # typed now, before the dialog exists
            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            dialog = app.screen
            assert isinstance(dialog, ConfirmWrite)
            assert app.focused is not None and app.focused.id == "no"
            await armed(pilot)
            button = dialog.query_one("#yes", Button)
            assert str(button.label) == "Unload (y)" and not button.disabled
            app.post_message(early)  # handled only now, after the arming
            await wait_for(pilot, lambda: dialog.swallowed == 1)
            assert app.screen is dialog and server.writes() == []
            hint = str(dialog.query_one("#confirm-hint").content)
            assert (
                hint
                == "Ignored: y came before this question was ready. Read it, then press y once the button reads Unload (y)."
            )
            await pilot.press("enter")  # Cancel has the focus: Enter cancels, armed or not
            await wait_for(pilot, lambda: len(app.screen_stack) == 1)
            assert server.writes() == [] and _log(app) == [f"unload {GEMMA}: cancelled: nothing sent"]


async def test_keys_and_clicks_before_the_arming_do_nothing_and_the_button_says_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Typed at the pace of a person (each key handled before the next) within the arming delay:
    y, a click on the action, Space and Tab do nothing; the button reads "wait…" and is disabled."""
    monkeypatch.setattr(ConfirmWrite, "ARM_S", 3600.0)  # never armed during this test
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("A second model"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, Q4)
            await pilot.press("a", "down", "down", "enter")  # forever (-1)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            dialog = app.screen
            assert isinstance(dialog, ConfirmWrite) and "to forever (-1)?" in dialog.text
            button = dialog.query_one("#yes", Button)
            assert str(button.label) == "wait… Keep" and button.disabled
            await pilot.press("y", "y")
            await pilot.click("#yes")
            await pilot.press("tab", "y")
            await drained(pilot)
            assert dialog.swallowed == 3 and not dialog.armed and app.screen is dialog
            assert server.writes() == []
            await pilot.press("n")
            await wait_for(pilot, lambda: len(app.screen_stack) == 1)
            assert server.writes() == [] and _log(app) == [f"keep-alive forever (-1) for {Q4}: cancelled: nothing sent"]


async def test_a_key_while_waiting_or_after_the_arming_starts_the_wait_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A word typed into the wrong window at an ordinary pace ("fully" at 3 keys a second: its y
    came 0.9 s after the u, past the 0.6 s arming) unloaded the model: any key other than y, and a
    swallowed y, disarm the dialog and start the wait again, so y counts only after ARM_S with no
    other key."""
    answers = _answers(monkeypatch)
    monkeypatch.setattr(ConfirmWrite, "ARM_S", 0.3)
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            await pilot.press("u")
            dialog = await armed(pilot)  # the "u" ... "ll" of "fully", at a slow pace
            monkeypatch.setattr(ConfirmWrite, "ARM_S", 3600.0)  # the wait that starts again lasts the test
            await pilot.press("l")
            assert not dialog.armed
            assert str(dialog.query_one("#yes", Button).label) == "wait… Unload"
            await pilot.press("y")
            await wait_for(pilot, lambda: dialog.swallowed == 1)
            await drained(pilot)
            assert server.writes() == [] and app.screen is dialog and True not in answers
            monkeypatch.setattr(ConfirmWrite, "ARM_S", 0.05)
            await pilot.press("l")  # a last key, then a pause: a deliberate y after it confirms
            await confirm(pilot)
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=10)
            assert answers == [True]


async def test_w_a_y_never_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The what-if's load of a model kept forever sends keep_alive -1: "way" typed on the
    dashboard, or "ay" as soon as the what-if is ready, loads nothing."""
    answers = _answers(monkeypatch)
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("A second model"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, Q4)
            burst(pilot, "way")
            await wait_for(pilot, lambda: any(isinstance(s, PlanScreen) for s in app.screen_stack))
            await drained(pilot)
            # here w and a acted (the what-if was ready for the a) and y did not; were the what-if
            # still reading the state, the a would do nothing: no write either way
            if isinstance(app.screen, ConfirmLoad):
                dialog = await _no_write_after_arming(pilot, server)
                assert "keep_alive -1 (it is kept forever now)" in dialog.text
                await pilot.press("escape")
            assert server.writes() == []
            plan = next(s for s in app.screen_stack if isinstance(s, PlanScreen))
            await wait_for(pilot, lambda: app.screen is plan and plan.config is not None)
            burst(pilot, "ay")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            await _no_write_after_arming(pilot, server)
            assert True not in answers
            await confirm(pilot)  # deliberate: one load
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=10)


async def test_enter_y_in_the_signal_screen_signals_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = _answers(monkeypatch)
    child = subprocess.Popen(["sleep", "60"])
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
                for keys in (["enter", "y"], ["enter", "y", "y", "y"]):
                    burst(pilot, keys)
                    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                    await drained(pilot)
                    await _no_write_after_arming(pilot, server)
                    assert child.poll() is None
                    await pilot.press("escape")
                    await wait_for(pilot, lambda: app.screen is screen)
                # a y read before the dialog was drawn, handled once it is up
                stale = events.Key("y", "y")
                await pilot.press("enter")
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
                dialog = app.screen
                assert isinstance(dialog, ConfirmWrite)
                app.post_message(stale)
                await wait_for(pilot, lambda: dialog.swallowed == 1)
                await armed(pilot)
                await drained(pilot)
                assert child.poll() is None and True not in answers
                await confirm(pilot)  # deliberate
                await wait_for(pilot, lambda: child.poll() is not None, timeout_s=10)
                assert child.returncode == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=5)


KEYS = [
    "u",
    "u",
    "a",
    "a",
    "y",
    "y",
    "y",
    "y",
    "k",
    "k",
    "enter",
    "enter",
    "9",
    "w",
    "n",
    "escape",
    "tab",
    "up",
    "down",
    "down",
    "end",
    "home",
    "space",
    "s",
    "S",
    "l",
    "g",
    "m",
    "f",
    "v",
    "i",
    "h",
    "r",
    "b",
    "p",
    "question_mark",
    "left",
    "right",
    "1",
    "5",
    "c",
    "minus",
]
"""The dashboard's keys (and the dialogs' and screens' own: y, n, 9, Enter, Tab, arrows), with the
writing ones several times so that dialogs open often. Left out: q and Ctrl+C (they quit), ``/``
(the filter box would take every later key as text), ``t`` (themes: harmless, slow to repaint)."""


async def _random_runs(monkeypatch: pytest.MonkeyPatch, seeds: range, *, paced: bool) -> tuple[int, int]:
    answers = _answers(monkeypatch)
    opened: list[ConfirmWrite] = []
    original = ConfirmWrite.on_screen_resume

    def resumed(self: ConfirmWrite) -> None:
        if self not in opened:
            opened.append(self)
        original(self)

    monkeypatch.setattr(ConfirmWrite, "on_screen_resume", resumed)
    child = subprocess.Popen(["sleep", "60"])
    try:
        with running(["--manual", "--scenario", str(BUNDLED)]) as server:
            server.goto(step_index("gemma4 loads"))
            gpu, procs = _gpu_with(child.pid)
            for seed in seeds:
                keys = random.Random(seed).choices(KEYS, k=200)
                app: KvtopApp = make_app(
                    Settings(host_url=server.url, interval_s=0.25), gpu_source=gpu, proc_source=procs
                )
                async with app.run_test(size=(120, 40)) as pilot:
                    await _select(pilot, GEMMA)
                    await wait_for(pilot, lambda: len(app.operator.foreign_processes()) == 1)
                    if paced:
                        await pilot.press(*keys)
                    else:
                        burst(pilot, keys)
                    await drained(pilot)
                    if isinstance(app.screen, ConfirmWrite) and not paced:
                        await armed(pilot)  # a queued y would fire now
                        await drained(pilot)
                    assert True not in answers, f"seed {seed}: a confirmation was answered yes"
                    assert server.writes() == [], f"seed {seed}: {server.writes()}"
                    assert child.poll() is None, f"seed {seed}: the child was signalled"
                    assert not any("sent" in e and "nothing sent" not in e for e in _log(app)), _log(app)
        return len(opened), sum(d.swallowed for d in opened)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=5)


async def test_random_bursts_of_the_dashboards_keys_write_and_signal_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """6 seeded runs of 200 random keys, each run one burst (as a terminal delivers keys typed
    ahead): no write, no signal. With y live as soon as a dialog opened (before the arming delay), the
    first seed already answered a confirmation yes."""
    opened, _ = await _random_runs(monkeypatch, range(6), paced=False)
    assert opened >= 3  # the bursts did open confirmations (11 in a run here)


async def test_random_keys_at_a_persons_pace_within_the_arming_write_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 random keys, each handled before the next (a fast typist), all within the arming delay
    (made an hour here, so that a loaded machine cannot arm a dialog mid-run): every y that
    reaches a dialog is swallowed."""
    monkeypatch.setattr(ConfirmWrite, "ARM_S", 3600.0)
    opened, swallowed = await _random_runs(monkeypatch, range(101, 102), paced=True)  # one run: ~15 s
    assert opened >= 2 and swallowed >= 2  # dialogs opened and y reached them


async def test_a_press_begun_on_the_wait_button_is_not_a_click_and_a_covered_dialog_rearms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mouse button goes down on the disabled "wait… Unload" and the click completes after the
    arming: swallowed (Textual makes the Click only at the release). A dialog covered by another
    screen is disarmed, and arms again ARM_S after it is shown again."""
    from textual.pilot import _get_mouse_message_arguments

    from kvtop.ui.screens.help import HelpScreen

    monkeypatch.setattr(ConfirmWrite, "ARM_S", 3600.0)
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            await _select(pilot, GEMMA)
            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            dialog = app.screen
            assert isinstance(dialog, ConfirmWrite)
            button = dialog.query_one("#yes", Button)
            assert button.disabled
            await pilot.mouse_down("#yes")  # on "wait… Unload"
            monkeypatch.setattr(ConfirmWrite, "ARM_S", 0.05)
            app.push_screen(HelpScreen())  # covers the dialog: it stays unarmed
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            assert not dialog.armed
            await pilot.press("escape")
            assert await armed(pilot) is dialog  # shown again: armed ARM_S later
            assert not button.disabled
            # the release, after the arming, of the press begun before it
            dialog._forward_event(events.Click(**_get_mouse_message_arguments(button, (2, 1), button=1), chain=1))
            await wait_for(pilot, lambda: dialog.swallowed == 1)
            await drained(pilot)
            assert server.writes() == [] and app.screen is dialog
            assert str(dialog.query_one("#confirm-hint").content).startswith("Ignored: a click came before")
            await pilot.click("#yes")  # a whole click after the arming sends
            await wait_for(pilot, lambda: server.writes() == [("POST", "/api/generate")], timeout_s=10)
