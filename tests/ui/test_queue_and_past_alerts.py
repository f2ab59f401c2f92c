"""The dashboard's faces of the queue (issue 27 §1) and of the alerts' ages and past alerts (issue
26 "Calm"), on a state that carries them: the app's real screens and widgets (Pilot), the state
set as the engine's apply step sets it (nothing else is staged: ``poll=False``).

The queue is built as the engine builds it (``fold_connections`` over two connection reads 30 s
apart); the slots of the loaded models are set on their rows (one model full, one with a free slot).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.text import Text
from textual.widgets import Static

from kvtop.config import Settings
from kvtop.model.alerts import Alert, Fix
from kvtop.model.queue import fold_connections
from kvtop.model.queue_snapshots import ConnSnapshot
from kvtop.model.slot_snapshots import SlotUse
from kvtop.model.views import AppState
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.messages import SnapshotReceived
from kvtop.ui.screens.model_detail import ModelDetailScreen
from kvtop.ui.screens.server_view import ServerScreen
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.panels import AlertsPanel
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, snapshot_at, step_index
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for

PORT = 11434
FULL = "gemma4:latest"
FREE = "qwen3:1.7b-q4_K_M"


def _app(**settings: Any) -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="none", **settings),
        FakeSource(snapshot_at(step_index("spills"))),
        poll=False,
    )


async def _loaded(pilot: Any) -> AppState:
    app = pilot.app
    app.post_message(SnapshotReceived(snapshot_at(step_index("spills"))))
    await wait_for(pilot, lambda: app.state is not None and len(app.state.models) == 3)
    return app.state  # type: ignore[no-any-return]


def _queued(state: AppState) -> AppState:
    """``state`` with FULL's one slot busy, FREE's one slot idle, and five connections: two open
    since TAKEN_AT − 30, three since TAKEN_AT (10.0.0.7 ×4, 10.0.0.9 ×1)."""
    slots = {FULL: SlotUse(total=1, busy=1, source="runner"), FREE: SlotUse(total=1, busy=0, source="runner")}
    models = tuple(dataclasses.replace(v, slots=slots[v.name]) if v.name in slots else v for v in state.models)
    clients = (("10.0.0.7", 50001), ("10.0.0.7", 50002), ("10.0.0.7", 50003), ("10.0.0.7", 50004), ("10.0.0.9", 41000))
    first = fold_connections(None, ConnSnapshot(TAKEN_AT - 30, PORT, clients[:2], own=1), models)
    queue = fold_connections(first, ConnSnapshot(TAKEN_AT, PORT, clients, own=1), models)
    # in flight 5, busy 1 (FULL) + 0 (FREE): 4 wait; the oldest of them arrived 30 s ago
    assert (queue.in_flight, queue.busy_slots, queue.waiting, queue.oldest_wait_s) == (5, 1, 4, 30.0)
    assert queue.full_models == (FULL,)
    return dataclasses.replace(state, models=models, queue=queue)


async def test_the_header_says_how_many_wait_and_nothing_while_none_waits() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        state = await _loaded(pilot)
        header = app.query_one(ServerHeader)
        assert "queue" not in header.render().plain  # no connection read yet: nothing said
        app.state = _queued(state)
        lines = await screen_when(pilot, lambda ls: "queue" in ls[1])
        assert "3 models loaded · queue 4~ waiting (oldest 30 s) · " in lines[1], lines[1]
        # a free slot for every model: nothing waits, and the header says nothing of the queue
        calm = dataclasses.replace(app.state.queue, waiting=0, oldest_wait_s=None, full_models=())
        app.state = dataclasses.replace(app.state, queue=calm)
        lines = await screen_when(pilot, lambda ls: "queue" not in ls[1] and "3 models loaded" in ls[1])
        # connections not readable: the reason is the server view's, never the header's
        failed = fold_connections(
            calm, ConnSnapshot(TAKEN_AT + 1, PORT, error="connections not readable: EACCES"), app.state.models
        )
        app.state = dataclasses.replace(app.state, queue=failed)
        await pilot.pause(0.1)
        assert "queue" not in header.render().plain and "EACCES" not in header.render().plain


async def test_the_server_view_has_a_queue_section_with_the_summary_and_the_clients() -> None:
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        state = await _loaded(pilot)
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerScreen))
        body = lambda: str(app.screen.query_one("#server-body", Static).render())  # noqa: E731
        assert (
            "Queue\n  not read: kvtop counts the connections to a server on this machine (not in the demo or a replay)"
            in body()
        )
        app.state = _queued(state)
        await wait_for(pilot, lambda: "waiting 4~" in body())
        text = body()
        assert (
            "Queue\n  in flight 5~ · waiting 4~ (oldest 30 s) · slots busy 1/2 · full: gemma4:latest"
            " · clients 10.0.0.7 ×4, 10.0.0.9 ×1"
        ) in text, text
        assert "  clients (connections to port 11434; kvtop's own 1 left out): 10.0.0.7 ×4, 10.0.0.9 ×1" in text
        assert "~ estimated: an idle keep-alive connection counts as in flight" in text
        failed = fold_connections(
            app.state.queue,
            ConnSnapshot(TAKEN_AT + 1, PORT, error="connections not readable: EACCES"),
            app.state.models,
        )
        app.state = dataclasses.replace(app.state, queue=failed)
        await wait_for(pilot, lambda: "EACCES" in body())
        assert "Queue\n  connections not readable: EACCES\n" in body()


async def test_the_detail_view_says_a_new_request_would_wait_for_a_full_model_only() -> None:
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        state = await _loaded(pilot)
        app.state = _queued(state)

        async def detail(name: str) -> str:
            view = next(v for v in app.state.models if v.name == name)
            await app.push_screen(ModelDetailScreen(view.name, view.digest))
            await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
            body = app.screen.query_one("#detail-body", Static)
            await wait_for(pilot, lambda: name in str(body.content))
            text = str(body.content)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, ModelDetailScreen))
            return " ".join(text.split())

        full = await detail(FULL)
        assert (
            "queue every slot busy: a new request would wait on this server: queue 4~ waiting (oldest 30 s)" in full
        ), full
        assert "a new request would wait" not in await detail(FREE)


def _alerts(state: AppState) -> AppState:
    """One current alert (about a loaded model) and one past (about a model no longer loaded)."""
    current = Alert(
        "spill",
        "critical",
        FULL,
        TAKEN_AT - 12,
        "19% of 6.1 GiB in system RAM",
        (Fix("num_ctx 2048", "frees 52 MiB of KV", True, "a shorter context"),),
        f"spill:{FULL}",
    )
    past = Alert(
        "prompt_truncated",
        "warning",
        "qwen3:8b",
        TAKEN_AT - 200,
        "2 prompts cut to 4096 tokens",
        (Fix("num_ctx 8192 in the client", "KV +576 MiB", True, "more memory"),),
        "prompt_truncated:qwen3:8b",
    )
    return dataclasses.replace(state, alerts=(current,), past_alerts=(past,))


def _pane_rows(pane: EventsPane) -> list[str]:
    return [
        " ".join(str(c.plain if isinstance(c, Text) else c) for c in pane.get_row_at(i)).replace("\n", " ")
        for i in range(pane.row_count)
    ]


async def test_a_past_alert_shows_only_in_the_events_pane_with_its_age() -> None:
    """160×48: the alert bar and the alerts panel show the current alert with its age (under a minute on the
    state's clock); the past one only in the events pane, '(no longer loaded) · 3 min'."""
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        state = await _loaded(pilot)
        app.state = _alerts(state)
        await pilot.press("l")
        pane = app.query_one(EventsPane)
        await wait_for(pilot, lambda: any("qwen3:8b" in r for r in _pane_rows(pane)))
        bar = app.query_one("#alertbar", Static).content
        assert isinstance(bar, Text)
        assert bar.plain.startswith("✖ spill gemma4:latest · <1 min: 19% of 6.1 GiB in system RAM"), bar.plain
        assert "qwen3:8b" not in bar.plain and "+1 more" not in bar.plain
        panel = app.query_one(AlertsPanel)
        assert panel.display and panel.border_title == "Alerts (1)"
        assert "spill gemma4:latest · <1 min: 19%" in panel.content.plain and "qwen3:8b" not in panel.content.plain
        rows = _pane_rows(pane)
        # with the alerts panel shown the pane leaves out the current alert: the past one is only here
        assert not any("gemma4:latest" in r for r in rows), rows
        past = next(i for i, r in enumerate(rows) if "prompt_truncated" in r)
        assert "qwen3:8b (no longer loaded) · 3 min: 2 prompts cut to 4096 tokens" in rows[past]
        assert "num_ctx 8192 in the client — KV +576 MiB (fits; more memory)" in rows[past + 1]
        # the alerts panel hidden (f): the pane lists the current alert first, then the past one
        await pilot.press("f")
        await wait_for(pilot, lambda: any("gemma4:latest" in r for r in _pane_rows(pane)))
        rows = _pane_rows(pane)
        now = next(i for i, r in enumerate(rows) if "gemma4:latest · <1 min: 19%" in r)
        assert now < next(i for i, r in enumerate(rows) if "qwen3:8b (no longer loaded) · 3 min" in r)


async def test_the_focused_alerts_panel_marks_the_fix_and_says_what_enter_does() -> None:
    """Tab to the alerts panel: the selected fix is marked '▶' in reverse video, and the title and
    the footer say what Enter does: an unload of a loaded model is performed behind the
    confirmation, a setting is shown as text; with --readonly every fix is text."""
    for readonly in (False, True):
        app = _app(readonly=readonly)
        async with app.run_test(size=(160, 48)) as pilot:
            state = await _loaded(pilot)
            alert = Alert(
                "spill",
                "critical",
                FULL,
                TAKEN_AT - 60,
                "19% of 6.1 GiB in system RAM",
                (
                    Fix(f"unload {FREE}", "frees 1.4 GiB", True, "its clients reload it"),
                    Fix("OLLAMA_KV_CACHE_TYPE=q8_0", "KV 52 MiB (−52 MiB)", True, "a restart"),
                ),
                f"spill:{FULL}",
            )
            app.state = dataclasses.replace(state, alerts=(alert,))
            panel = app.query_one(AlertsPanel)
            await wait_for(pilot, lambda: len(panel.fixes) == 2)
            for _ in range(8):
                if app.focused is panel:
                    break
                await pilot.press("tab")
            assert app.focused is panel
            await pilot.press("up")
            lines = panel.content.plain.split("\n")
            assert lines[1].startswith(f"▶ fix: unload {FREE}") and lines[2].startswith("  fix: OLLAMA_KV")
            cursor = [s for s in panel.content.spans if "reverse" in str(s.style)]
            assert panel.content.plain[cursor[0].start : cursor[0].end].startswith(f"fix: unload {FREE}")
            if readonly:
                assert panel.border_title.endswith("Enter: read-only: show it as text to copy")
                footer = (await screen_when(pilot, lambda ls: "Show fix as text" in ls[-1]))[-1]
            else:
                assert panel.border_title == f"Alerts (1) · fix 1/2 · Enter: unload {FREE} (asks first)"
                footer = (await screen_when(pilot, lambda ls: "Perform fix" in ls[-1]))[-1]
                assert "Show fix as text" not in footer
            await pilot.press("down")
            assert panel.content.plain.split("\n")[2].startswith("▶ fix: OLLAMA_KV_CACHE_TYPE=q8_0")
            assert panel.border_title == "Alerts (1) · fix 2/2 · Enter: show it as text to copy"
            footer = (await screen_when(pilot, lambda ls: "Show fix as text" in ls[-1]))[-1]
            assert "Perform fix" not in footer


def test_the_dashboard_reads_the_connections_of_a_server_on_this_machine() -> None:
    """make_app gave the engine every source build_sources made but the connections: the queue
    never reached the dashboard of a real run (the header, the server view, the detail view)."""
    from kvtop.sources.connections import ConnectionSource

    app = make_app(Settings(host_url="http://127.0.0.1:11434", log_spec="none"))  # nothing runs: no sample is taken
    assert isinstance(app.engine.sources.conns, ConnectionSource) and app.engine.queue_port() == 11434
