"""Snapshot tests of settled screens (fixed data, fixed poll time)."""

from __future__ import annotations

from typing import Any

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.ui.settle import settle
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, down_snapshot, snapshot_at, step_index


def _app(*snaps: Any, demo: bool = False) -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, demo=demo),
        FakeSource(*snaps, hold=True),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _settle(pilot: Any, rows: int | None = None) -> None:
    await settle(pilot, rows)


def test_main_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)

    assert snap_compare(
        _app(snapshot_at(step_index("spills")), demo=True), terminal_size=(80, 24), run_before=run_before
    )


def test_main_160x48(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)

    assert snap_compare(_app(snapshot_at(step_index("spills"))), terminal_size=(160, 48), run_before=run_before)


def test_server_down(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        for _ in range(100):
            await pilot.pause(0.05)
            if pilot.app.state.failures:
                break
        assert pilot.app.state.failures == 1
        await pilot.pause(0.1)

    app = _app(snapshot_at(step_index("raised to 32768")), down_snapshot(TAKEN_AT + 30))
    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_empty_server(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 0)

    assert snap_compare(_app(snapshot_at(0)), terminal_size=(80, 24), run_before=run_before)


def test_detail_view(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        pilot.app.query_one(ModelsTable).focus()
        await pilot.press("enter")
        await pilot.pause(0.2)

    assert snap_compare(
        _app(snapshot_at(step_index("raised to 32768"))), terminal_size=(100, 48), run_before=run_before
    )


def test_help(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(_app(snapshot_at(1)), terminal_size=(100, 40), run_before=run_before)


def test_what_if_screen(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        await pilot.press("w")
        await pilot.pause(0.3)

    app = _app(snapshot_at(step_index("raised to 32768")))
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
