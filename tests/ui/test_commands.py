"""The command palette offers kvtop's actions with their keys, and no key is silently dead
(``kvtop/ui/commands.py``): Pilot sessions on fake sources built from the bundled scenario."""

from __future__ import annotations

from typing import Any

from textual.command import CommandList, CommandPalette

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.commands import PALETTE, key_text, refusal
from kvtop.ui.keys import BINDINGS
from kvtop.ui.screens.confirm import ConfirmWrite
from kvtop.ui.screens.help import HelpScreen
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.standin import BUNDLED, running
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.settle import settle
from tests.ui.test_app import wait_for

SPILLS = step_index("spills")  # three models loaded


def _app(**settings: Any) -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, **settings),
        FakeSource(snapshot_at(SPILLS)),  # type: ignore[arg-type]
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


def _notes(app: KvtopApp) -> list[str]:
    return [n.message for n in app._notifications]


def _listed(app: KvtopApp) -> list[str]:
    """The prompts of the palette's list (title, then the help line)."""
    return [
        str(app.screen.query_one(CommandList).get_option_at_index(i).prompt)
        for i in range(app.screen.query_one(CommandList).option_count)
    ]


async def _palette(pilot: Any, typed: str) -> list[str]:
    app = pilot.app
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: CommandPalette.is_open(app))
    await pilot.press(*typed)
    await wait_for(pilot, lambda: app.screen.query_one(CommandList).option_count > 0)
    return _listed(app)


async def test_typing_unl_finds_unload_and_choosing_it_asks_first() -> None:
    """A real stand-in (its request log judges): the palette's Unload opens the confirmation with
    Cancel focused; Esc cancels and nothing is written."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25), gpu_source=FixedGpuSource(), proc_source=FixedProcSource()
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.state is not None and bool(app.state.models), timeout_s=10)
            app.query_one(ModelsTable).focus()
            listed = await _palette(pilot, "unl")
            assert listed == ["Unload model\nu · unload the selected model (asks first)"]
            await pilot.press("down", "enter")  # the one hit, then run it
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmWrite))
            assert app.screen.focused is not None and app.screen.focused.id == "no"  # Cancel focused
            await pilot.press("escape")
            await wait_for(pilot, lambda: len(app.screen_stack) == 1)
            assert [e.outcome for e in app.operator.log] == ["cancelled: nothing sent"]
        assert server.writes() == []


async def test_the_palette_lists_every_live_action_with_its_key_while_it_is_open() -> None:
    """The provider is asked while the palette is the screen in front: it answers for the
    dashboard under it (the bug was an empty answer, the palette counting as a screen in front)."""
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        await _palette(pilot, "sort")
        titles = {c.title: c.help for c in app.get_system_commands(app.screen_stack[0])}
        live = {
            e.title
            for e in PALETTE
            if not e.title.startswith("Replay:") and "server" not in e.title.lower() or e.title == "Server view"
        }
        assert live <= set(titles)
        assert titles["Sort by the next column"].startswith("s / F6 · ")
        assert titles["Help: keys and glyphs"].startswith("? / F1 · ")
        assert titles["Quit"].startswith("q / F10 · ")
        assert titles["Signal GPU process"].startswith("k / F9 · ")
        assert titles["Panel: memory map"].startswith("m · ")
        assert not any(t.startswith("Replay:") for t in titles)  # live: the replay's keys do not exist
        assert "Next server" not in titles  # one server
        assert "Theme" in titles  # Textual's theme picker stays beside kvtop's next theme
        await pilot.press("escape")
        await wait_for(pilot, lambda: not CommandPalette.is_open(app))


async def test_readonly_palette_has_no_write_and_the_write_keys_say_why() -> None:
    app = _app(readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        listed = await _palette(pilot, "unl")
        assert not any(p.startswith("Unload model") for p in listed)
        titles = [c.title for c in app.get_system_commands(app.screen_stack[0])]
        assert "Keep-alive" not in titles and "Signal GPU process" not in titles and "Sort by the next column" in titles
        await pilot.press("escape")
        await wait_for(pilot, lambda: not CommandPalette.is_open(app))
        app.query_one(ModelsTable).focus()
        await pilot.press("u")
        await wait_for(pilot, lambda: any(n.startswith("u: read-only (--readonly)") for n in _notes(app)))
        assert len(app.screen_stack) == 1  # nothing opened


async def test_demo_k_says_the_processes_are_simulated() -> None:
    app = _app(demo=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        app.query_one(ModelsTable).focus()
        await pilot.press("k")
        await wait_for(pilot, lambda: any("the demo's GPU processes are simulated" in n for n in _notes(app)))
        assert _notes(app)[-1].startswith("k / F9: ")
        assert len(app.screen_stack) == 1


async def test_f1_helps_f6_sorts_f10_quits_and_j_moves_down() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        table = app.query_one(ModelsTable)
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("j")
        await wait_for(pilot, lambda: table.cursor_row == 1)
        await pilot.press("j")
        await wait_for(pilot, lambda: table.cursor_row == 2)
        before = app.sort_key
        await pilot.press("f6")
        await wait_for(pilot, lambda: app.sort_key != before)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        await pilot.press("f2")  # htop's setup: not kvtop's, and it says so
        await wait_for(pilot, lambda: any(n.startswith("F2: kvtop has no setup screen") for n in _notes(app)))
        await pilot.press("f10")
        await wait_for(pilot, lambda: not app.is_running)


async def test_a_dashboard_key_over_the_detail_view_says_how_to_get_back() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        app.query_one(ModelsTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.screen_stack) == 2)
        await pilot.press("m")
        await wait_for(
            pilot, lambda: any(n == "m: it acts on the dashboard: Esc goes back to it first" for n in _notes(app))
        )


def test_every_binding_has_a_key_text_and_the_refusals_read_as_sentences() -> None:
    from textual.binding import Binding

    for b in BINDINGS:
        assert isinstance(b, Binding) and key_text(b.action)
    assert key_text("replay_jump('forward')") == "J / Ctrl+→"
    assert key_text("quit") == "q / F10"
    assert key_text("nothing") == ""
    from types import SimpleNamespace

    replay = SimpleNamespace(
        settings=SimpleNamespace(readonly=False, demo=False),
        replay=object(),
        proc_source=None,
        hosts=("http://a:11434",),
    )
    assert refusal(replay, "replay_pause", over_dashboard=True, typing=False) is None
    assert refusal(replay, "faster", over_dashboard=True, typing=False) == (
        "a replay has no live server: nothing is polled, planned or written (> and < set its speed)"
    )
    assert refusal(replay, "next_server", over_dashboard=True, typing=False) == (
        "one server is watched (--host twice or more to switch between servers)"
    )
    assert refusal(replay, "cycle_sort", over_dashboard=False, typing=False) == (
        "it acts on the dashboard: Esc goes back to it first"
    )
    assert refusal(replay, "toggle_pause", over_dashboard=False, typing=False) is None  # anywhere


def test_the_help_explains_every_glyph_the_dashboard_draws_with_its_ascii_form() -> None:
    import re

    from kvtop.core.glyphs import to_ascii
    from kvtop.ui.screens.help import glyph_text, help_text
    from kvtop.ui.widgets.gpu_panel import GLYPHS as STRIP
    from kvtop.ui.widgets.memory_map import GLYPHS as MAP
    from kvtop.ui.widgets.panels import CURSOR_GLYPH

    rows = [re.split(r"\s{2,}", line.strip()) for line in glyph_text().splitlines() if line.startswith("  ")]
    assert all(len(r) == 3 for r in rows), [r for r in rows if len(r) != 3]
    for glyph, stand_in, _meaning in rows:  # the second column is ASCII mode's form of the first
        assert stand_in.isascii()
        assert stand_in == "same" and glyph.isascii() or stand_in == to_ascii(glyph) or (glyph, stand_in) == ("▲", "A")
    drawn = {
        *MAP.values(),
        *STRIP.values(),
        CURSOR_GLYPH,
        "▶",
        "–",
        "…",
        "●",
        "⇣",
        "✖",
        "▲",
        "ℹ",
        "▼",
        "−",
        "×",
        "▁",
        "+~",
        "pf",
        "dropped",
        "?",
    }
    listed = " ".join(r[0] for r in rows)
    assert {g for g in drawn if g not in listed} == set()
    assert "▞" not in listed and MAP["overhead"] != MAP["ollama"]  # told apart at a glance
    map_rows = [r for r in rows if r[0] in MAP.values()]
    assert len({r[1] for r in map_rows}) == len(map_rows)  # and in ASCII
    assert glyph_text() in help_text() and "j is down; k is signal" in help_text()


async def test_j_moves_the_alerts_panels_fix_cursor_as_down_does() -> None:
    from kvtop.ui.widgets.panels import AlertsPanel

    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, 3)
        panel = app.query_one(AlertsPanel)
        await wait_for(pilot, lambda: len(panel.fixes) > 1)
        panel.focus()
        await wait_for(pilot, lambda: app.focused is panel)
        start = panel.cursor
        await pilot.press("j")
        await wait_for(pilot, lambda: panel.cursor == start + 1)


def test_the_readme_and_the_reference_list_every_binding() -> None:
    """Every key of ``kvtop/ui/keys.py`` is in README's and docs/reference.md's keys tables."""
    from pathlib import Path

    from textual.binding import Binding

    repo = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/reference.md"):
        text = (repo / doc).read_text(encoding="utf-8")
        start = text.index("## Keys")
        table = text[start : text.index("\n## ", start + 1)]
        missing = []
        for b in BINDINGS:
            assert isinstance(b, Binding)
            if b.action.startswith("server(") and b.action not in ("server(1)", "server(9)"):
                continue  # written 1–9
            missing += [k for k in key_text(b.action).split(" / ") if f"`{k}`" not in table]
        assert missing == [], doc


async def test_the_palette_opened_from_the_filter_box_still_offers_and_runs_the_actions() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 3)
        await pilot.press("slash", "q", "w")
        await wait_for(pilot, lambda: app.filter_text == "qw")
        listed = await _palette(pilot, "reverse")
        assert listed[0].startswith("Reverse the sort")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.sort_reverse)
        assert app.filter_text == "qw"  # the filter stays


def test_a_replays_write_keys_say_it_is_not_live_not_readonly() -> None:
    # kvtop --replay runs with readonly set (cli/dashboard.py), but the user never gave --readonly
    from types import SimpleNamespace

    replay = SimpleNamespace(
        settings=SimpleNamespace(readonly=True, demo=False),
        replay=object(),
        proc_source=None,
        hosts=("http://a:11434",),
    )
    for action in ("unload", "keep_alive", "signal_process"):
        why = refusal(replay, action, over_dashboard=True, typing=False)
        assert why == "a replay is not live: it plays a recording, so kvtop sends no unload, keep-alive, load or signal"
    live = SimpleNamespace(settings=replay.settings, replay=None, proc_source=None, hosts=replay.hosts)
    assert refusal(live, "unload", over_dashboard=True, typing=False) == (
        "read-only (--readonly): kvtop sends no unload, keep-alive, load or signal"
    )
