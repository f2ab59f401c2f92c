"""Snapshots at 80×24 and 160×48 of the screens that must read at 80 columns: help, detail,
what-if (and its --readonly form), the events pane, the header with every flag, long model names."""

from __future__ import annotations

from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.screens.confirm import ConfirmWrite
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.ui.settle import settle
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, down_snapshot, snapshot_at, step_index
from tests.ui.confirming import armed
from tests.ui.test_table_widths import renamed

SIZES = [(80, 24), (160, 48)]


def _app(*snaps: Any, **settings: Any) -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, **settings),
        FakeSource(*snaps, hold=True),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _settle(pilot: Any, rows: int | None = None) -> None:
    await settle(pilot, rows)


async def _select(pilot: Any, name: str) -> None:
    table = pilot.app.query_one(ModelsTable)
    table.focus()
    table.move_cursor(row=next(i for i, v in enumerate(table._views) if v.name == name))
    await pilot.pause(0.05)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_help(snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)
        await pilot.press("question_mark")
        await pilot.pause(0.3)

    assert snap_compare(_app(snapshot_at(step_index("spills"))), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_detail_of_a_spilled_model(snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)
        await _select(pilot, "gemma4:latest")
        await pilot.press("enter")
        await pilot.pause(0.3)

    assert snap_compare(_app(snapshot_at(step_index("spills"))), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_what_if(snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)
        await _select(pilot, "qwen3:1.7b-q8_0")
        await pilot.press("w")
        await pilot.pause(0.3)
        await pilot.press("5")  # typing: the letter keys leave the footer
        await pilot.pause(0.2)

    assert snap_compare(_app(snapshot_at(step_index("spills"))), terminal_size=size, run_before=run_before)


def test_what_if_readonly_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        await pilot.press("w")
        await pilot.pause(0.3)
        await pilot.press("end")  # the Apply section at the bottom

    app = _app(snapshot_at(step_index("raised to 32768")), readonly=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_confirmation_opens_on_cancel_80x24(snap_compare: Any) -> None:
    """Armed (the state in which y sends): the button reads "Load (y)"."""

    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        await pilot.press("w")
        await pilot.pause(0.3)
        await pilot.press("a")
        await armed(pilot)

    assert snap_compare(_app(snapshot_at(step_index("raised to 32768"))), terminal_size=(80, 24), run_before=run_before)


def test_confirmation_before_arming_80x24(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the arming (a key typed ahead must not answer it): the button reads "wait… Load", disabled; a y typed then is
    ignored, and the dialog says so."""
    monkeypatch.setattr(ConfirmWrite, "ARM_S", 3600.0)

    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        await pilot.press("w")
        await pilot.pause(0.3)
        await pilot.press("a", "y")
        dialog = pilot.app.screen
        assert isinstance(dialog, ConfirmWrite) and dialog.swallowed == 1 and not dialog.armed

    assert snap_compare(_app(snapshot_at(step_index("raised to 32768"))), terminal_size=(80, 24), run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_events_pane(snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        from kvtop.ui.widgets.events_pane import EventsPane

        await _settle(pilot, 3)
        if not pilot.app.query_one(EventsPane).display:  # at 80x24 it shows by itself in the free rows
            await pilot.press("l")
        pilot.app.clear_notifications()  # "saved: events on" times out: not in the picture either way
        await pilot.pause(0.3)

    assert snap_compare(_app(snapshot_at(step_index("spills"))), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x48"])
def test_long_names(snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 3)

    assert snap_compare(_app(renamed(snapshot_at(step_index("spills")))), terminal_size=size, run_before=run_before)


def test_header_with_every_flag_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _settle(pilot, 1)
        for _ in range(100):
            await pilot.pause(0.05)
            if pilot.app.state.failures:
                break
        header = pilot.app.query_one(ServerHeader)
        header.recording = True
        header.paused = True
        header.replay = "2026-11-29 17:02:13 ×16 END"
        await pilot.pause(0.1)

    # no GPU source: its samples would repaint the header from the app's (live, running) settings
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, demo=True),
        FakeSource(snapshot_at(step_index("raised to 32768")), down_snapshot(TAKEN_AT + 30), hold=True),
    )
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
