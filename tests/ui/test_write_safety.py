"""The what-if load never fires by accident.

The dashboard polls a real stand-in server on 127.0.0.1 (``python -m kvtop.demo.server``); keys
are pressed in bursts (``pilot.press`` with many keys, no pause between them), and the stand-in's
own request log (``GET /_standin/requests``) is the judge of whether anything was written.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.help import HelpScreen
from kvtop.ui.screens.plan import ConfirmLoad, PlanScreen
from kvtop.ui.widgets.hanging import Hanging
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.standin import BUNDLED, Standin, running
from tests.ui.confirming import armed, confirm
from tests.ui.fakes import step_index
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for


def _app(server: Standin, *, readonly: bool = False) -> KvtopApp:
    return make_app(
        Settings(host_url=server.url, interval_s=0.25, readonly=readonly),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _open_what_if(pilot: Any, name: str = "qwen3:1.7b-q8_0") -> PlanScreen:
    app = pilot.app
    await wait_for(pilot, lambda: any(v.name == name for v in app.state.models), timeout_s=10)
    table = app.query_one(ModelsTable)
    table.focus()
    table.move_cursor(row=next(i for i, v in enumerate(table._views) if v.name == name))
    await pilot.press("w")
    await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.spec is not None)
    screen = app.screen
    assert isinstance(screen, PlanScreen)
    return screen


def _body(screen: PlanScreen) -> str:
    return screen.body_text().plain


async def test_letters_while_typing_never_load_and_confirmations_open_on_cancel() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("raised to 32768"))
        app = _app(server)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await _open_what_if(pilot)
            assert screen.config is not None and screen.config.num_ctx == 32768

            # the repro: 5 then a. The a waits; no dialog with another value
            await pilot.press("5", "a")
            await pilot.pause(0.2)
            assert app.screen is screen and screen.typed == "5"
            assert "typing 5_" in _body(screen) and "Enter applies it, Esc cancels" in _body(screen)
            assert "finish typing first" in _body(screen) and "a  load now" not in _body(screen)
            lines = await screen_when(pilot, lambda lines: "Load" not in lines[-1])
            assert "typing 5_" in "\n".join(lines) and "KV type" not in lines[-1]  # the letter keys wait
            await pilot.press("escape")
            assert screen.typed == "" and screen.config.num_ctx == 32768 and app.screen is screen

            # 12ab Enter in one burst: 12 is applied, a and b do nothing
            await pilot.press("1", "2", "a", "b", "enter")
            await pilot.pause(0.3)
            assert app.screen is screen and screen.config.num_ctx == 12
            assert "a  load now with num_ctx 12 " in _body(screen)

            # keys typed ahead into the dialog in one burst (Enter, space, Tab, k, f): it opens on
            # Cancel, the action button cannot take the focus, so they can only cancel
            for burst in (
                ("a", "enter"),
                ("a", "space", "enter"),
                ("a", "tab", "enter"),
                ("a", "tab", "tab", "space", "enter"),
                ("a", "k", "f", "escape"),
                ("a", "n"),
            ):
                screen.status = ""
                await pilot.press(*burst)
                await wait_for(pilot, lambda: app.screen is screen and "load cancelled" in _body(screen))
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            dialog = app.screen
            assert isinstance(dialog, ConfirmLoad)
            assert app.focused is not None and app.focused.id == "no"  # Cancel has the focus
            assert "with num_ctx 12 now?" in dialog.text  # exactly the value on screen
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.screen is screen)

            await pilot.pause(0.5)  # a few polls of the stand-in: all reads
            requests = server.requests()
            assert ("GET", "/api/ps") in requests
            assert server.writes() == [], requests

            # the explicit path still works: type a value, a, y: one POST with the value shown
            await pilot.press("8", "1", "9", "2", "enter", "a")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            assert "with num_ctx 8,192 now?" in app.screen.text  # type: ignore[attr-defined]
            assert "a  load now with num_ctx 8,192 " in _body(screen)
            await confirm(pilot)
            await wait_for(pilot, lambda: "loaded with num_ctx 8,192" in _body(screen), timeout_s=10)
            assert server.writes() == [("POST", "/api/generate")]
            assert server.ps()[0]["context_length"] == 8192


async def test_a_click_on_the_action_loads() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("loads at num_ctx 4096"))
        app = _app(server)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await _open_what_if(pilot)
            await pilot.press("right", "a")  # 6144
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            assert server.writes() == []
            await armed(pilot)
            await pilot.click("#yes")
            await wait_for(pilot, lambda: "loaded with num_ctx 6,144" in _body(screen), timeout_s=10)
            assert server.writes() == [("POST", "/api/generate")]


async def test_readonly_offers_no_write_anywhere() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("raised to 32768"))
        app = _app(server, readonly=True)
        for size in ((80, 24), (160, 48)):
            async with app.run_test(size=size) as pilot:
                screen = await _open_what_if(pilot)
                text = "\n".join(await screen_when(pilot, lambda lines: "What if:" in lines[0]))
                assert "What if: qwen3:1.7b-q8_0" in text
                body = _body(screen)
                assert "read-only (--readonly): kvtop sends nothing that changes the server" in body
                # no load is offered; "If loaded now" forecasts what a client's request would do (Ollama's scheduler)
                head, _, rest = body.partition("\nIf loaded now")
                offers = head + "\nApply" + rest.partition("\nApply")[2]  # all but the forecast
                assert "If loaded now" in body and "load" not in offers.lower().replace("loaded now", "")
                footer = text.splitlines()[-1]
                assert "Load" not in footer and "esc Back" in footer
                assert all(b.binding.action != "load" for b in screen.active_bindings.values())
                await pilot.press("a", "y", "1", "2", "a", "enter", "a", "y")
                await pilot.pause(0.3)
                assert app.screen is screen
                await pilot.press("escape")
                await wait_for(pilot, lambda: len(app.screen_stack) == 1)
                await pilot.press("question_mark")
                await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
                content = app.screen.query_one("#help-body", Static).content
                assert isinstance(content, Hanging)
                plain = content.text.plain
                assert "--readonly: kvtop sends nothing that changes the server" in plain
                assert "load with" not in plain and "y confirms" not in plain
                await pilot.press("escape")
            app = _app(server, readonly=True)
        assert server.writes() == []


async def test_help_names_the_load_key_when_writes_are_allowed() -> None:
    from kvtop.ui.screens.help import help_text

    assert "a          load with the num_ctx on screen (asks first; y confirms)" in help_text(False)
    assert "load with" not in help_text(True) and "--readonly" in help_text(True)
