"""The header's state flags come first and are never cut, and a replay
says replay things (no "connecting…" after a jump back)."""

from __future__ import annotations

from typing import Any

from kvtop.config import Settings
from kvtop.sources.recording import read_recording, resolve_recording
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.header import ServerHeader
from tests.ui.fakes import TAKEN_AT, FakeSource, down_snapshot, snapshot_at, step_index
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for

LIVE_TEXT = ("connecting…", "waiting for the first answer", "waiting for the first sample")


def _live(*snaps: Any, demo: bool = True) -> KvtopApp:
    return make_app(
        Settings(host_url="http://127.0.0.1:11434", interval_s=0.25, demo=demo), FakeSource(*snaps, hold=True)
    )


def _replay() -> KvtopApp:
    return make_app(
        Settings(host_url="http://unused:1", log_spec="none"), replay=read_recording(resolve_recording("demo"))
    )


async def test_every_flag_at_80_columns_is_whole_and_first() -> None:
    app = _live(snapshot_at(step_index("raised to 32768")), down_snapshot(TAKEN_AT + 30))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.failures == 1)
        header = app.query_one(ServerHeader)
        header.recording = True
        header.paused = True
        header.replay = "2026-11-29 17:02:13 ×16 END"
        line = (await screen_when(pilot, lambda lines: "END" in lines[0]))[0].rstrip()
        assert len(line) <= 80
        flags = ["kvtop", "DEMO", "REPLAY", "17:02:13 ×16", "● REC", "PAUSED", "END", "✖ down"]
        at = [line.find(f) for f in flags]
        assert all(i >= 0 for i in at), line
        assert at == sorted(at), line  # in this order, all before any detail
        assert "…" not in line[: at[-1] + len("✖ down")]
        host = line.find("127.0.0.1")
        assert host == -1 or host > at[-1]


async def test_paused_live_at_80_columns_keeps_pause_up_and_latency() -> None:
    app = _live(snapshot_at(step_index("raised to 32768")))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.ollama is not None)
        await pilot.press("p")
        line = (await screen_when(pilot, lambda lines: "PAUSED" in lines[0]))[0]
        assert "DEMO  PAUSED  ● up" in line and "latency 4 ms" in line, line
        assert "P…" not in line and "…" not in line  # details go whole, never half a word


async def test_replay_at_80_columns_keeps_up_and_latency() -> None:
    app = _replay()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.ollama is not None and app.state.ollama.reachable, timeout_s=10)
        await pilot.press("space")  # pause
        line = (await screen_when(pilot, lambda lines: "PAUSED" in lines[0]))[0]
        assert "REPLAY" in line and "PAUSED  ● up" in line and "latency" in line, line
        assert "every" not in line


async def test_a_jump_back_in_a_replay_says_replay_things() -> None:
    app = _replay()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: bool(app.state.models), timeout_s=10)
        await pilot.press("space", "J")  # paused, a minute in
        await wait_for(
            pilot,
            lambda: app.replay is not None and app.replay.player.time_s is not None and len(app.state.models) >= 2,
            timeout_s=10,
        )
        shown: list[str] = []
        header = app.query_one(ServerHeader)
        original = header._build

        def build() -> Any:
            text = original()
            shown.append(text.plain)
            return text

        header._build = build  # type: ignore[method-assign]
        await pilot.press("K")  # back a minute: the state is rebuilt from the start
        await pilot.pause(0.5)
        await pilot.press("B")  # the very start: nothing applied yet
        await pilot.pause(0.5)
        assert app.replay is not None and app.replay.player.position == 0
        text = "\n".join(await screen_when(pilot, lambda lines: "REPLAY start" in lines[0]))
        assert not any(live in text for live in LIVE_TEXT), text
        assert not any(live in line for line in shown for live in LIVE_TEXT), shown
        first, second = text.splitlines()[:2]
        assert "REPLAY start ×1  PAUSED  no sample yet" in first
        assert "start of the recording: no server sample played yet" in second
        panel = app.query_one(GpuPanel).render().plain
        assert panel == "GPU telemetry: none recorded before this point of the replay"
        await pilot.press("full_stop", "full_stop", "full_stop")  # a few records: a sample arrives
        await wait_for(pilot, lambda: app.state.ollama is not None)
        await screen_when(pilot, lambda lines: "● up" in lines[0])


async def test_a_secret_the_server_echoes_in_its_version_is_masked_in_the_header_and_server_view() -> None:
    """The dashboard's header and the server view (``i``) showed /api/version's text as is: a
    proxy or server echoing this process's password in it showed the password (``--once``, JSON,
    recordings and /metrics masked it already)."""
    import dataclasses

    from kvtop import redact

    secret = "p/a?s#s@W0RDX-hdr"
    saved = (redact._known, redact._text_ok)  # noqa: SLF001
    redact.register_secrets([secret])
    try:
        snap = dataclasses.replace(snapshot_at(step_index("raised to 32768")), version=f"0.9 {secret}")
        app = _live(snap)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.state.ollama is not None)
            line = (await screen_when(pilot, lambda lines: "Ollama 0.9" in lines[0]))[0]
            assert "W0RDX" not in line and "Ollama 0.9 ***" in line, line
            await pilot.press("i")
            lines = await screen_when(pilot, lambda lines: any("Server http" in x for x in lines[:2]))
            assert not any("W0RDX" in x for x in lines), lines[:2]
            assert any("Ollama 0.9 ***" in x for x in lines[:2]), lines[:2]
    finally:
        redact._known, redact._text_ok = saved  # noqa: SLF001
        for clear in redact._on_register:  # noqa: SLF001
            clear()
