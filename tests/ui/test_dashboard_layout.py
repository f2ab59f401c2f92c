"""The dashboard's layout from 80×24 to a wall display: the table first at 80×24; from
120×36 the memory map, then the alerts with their fixes, the history plots and the events, without a
key press; panels toggled with ``m`` ``f`` ``v`` ``l``, the choice saved in the state file and
restored at the next start. Snapshots at 80×24, 120×40, 160×48 and 220×55."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtop.config.ui_state import PANELS, saved_panels
from kvtop.ui.layout import EVENTS_FILL_ROWS, panels_shown
from kvtop.ui.widgets.events_pane import EventsPane
from kvtop.ui.widgets.gpu_panel import GpuPanel
from kvtop.ui.widgets.memory_map import MemoryMapPanel
from kvtop.ui.widgets.models_table import ModelsTable
from kvtop.ui.alert_age import state_clock
from kvtop.ui.widgets.panels import AlertsPanel, HistoryPanel, alerts_text
from tests.ui.mapfakes import settle, shared_app
from tests.ui.screen_text import screen_when
from tests.ui.test_app import wait_for

AUTO = dict.fromkeys(PANELS, "auto")


def test_panels_by_size_and_choice() -> None:
    assert panels_shown(80, 24, AUTO) == {"map": False, "alerts": False, "history": False, "events": False}
    assert panels_shown(120, 36, AUTO) == {"map": True, "alerts": False, "history": False, "events": False}
    assert panels_shown(120, 40, AUTO) == {"map": True, "alerts": True, "history": False, "events": False}
    assert panels_shown(160, 48, AUTO) == {"map": True, "alerts": True, "history": True, "events": False}
    assert panels_shown(220, 55, AUTO) == {"map": True, "alerts": True, "history": True, "events": True}
    assert panels_shown(119, 60, AUTO)["map"] is False  # both sizes must be reached
    assert panels_shown(80, 24, {**AUTO, "map": "on"})["map"] is True
    assert panels_shown(220, 55, {**AUTO, "history": "off"})["history"] is False


def _shown(app: Any) -> dict[str, bool]:
    return {
        "map": app.query_one(MemoryMapPanel).display,
        "alerts": app.query_one(AlertsPanel).display,
        "history": app.query_one(HistoryPanel).display,
        "events": app.query_one(EventsPane).display,
    }


async def test_toggle_is_saved_and_restored(tmp_path: Path) -> None:
    app = shared_app(tmp_path)
    said: list[str] = []  # every notice, however soon it times out
    notify = app.notify
    app.notify = lambda message, **kw: (said.append(message), notify(message, **kw))[1]  # type: ignore[method-assign]
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert _shown(app) == {"map": True, "alerts": True, "history": True, "events": False}
        await pilot.press("m")
        await pilot.pause(0.1)
        assert not app.query_one(MemoryMapPanel).display
        assert said == ["saved: map off"]  # said once, with what was chosen
        await pilot.press("l")
        await pilot.pause(0.1)
        assert app.query_one(EventsPane).display
    assert saved_panels() == {"map": "off", "alerts": "auto", "history": "auto", "events": "on"}
    again = shared_app(tmp_path)
    async with again.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert _shown(again) == {"map": False, "alerts": True, "history": True, "events": True}
        await pilot.press("m")  # back on: at 80×24 too, one line per device
    assert saved_panels()["map"] == "on"
    small = shared_app(tmp_path)
    async with small.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        lines = await screen_when(pilot, lambda ls: any(line.startswith(" GPU0 RTX A6000   ") for line in ls))
        assert any(line.startswith(" RAM              ") and "24G/64G, 40G free" in line for line in lines)


def _snap(size: tuple[int, int], snap_compare: Any, tmp_path: Path) -> bool:
    async def run_before(pilot: Any) -> None:
        await settle(pilot)

    result: bool = snap_compare(shared_app(tmp_path), terminal_size=size, run_before=run_before)
    return result


def test_dashboard_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap((80, 24), snap_compare, tmp_path)


def test_dashboard_120x40(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap((120, 40), snap_compare, tmp_path)


def test_dashboard_160x48(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap((160, 48), snap_compare, tmp_path)


def test_dashboard_220x55(snap_compare: Any, tmp_path: Path) -> None:
    assert _snap((220, 55), snap_compare, tmp_path)


def test_events_fill_the_rows_left_free() -> None:
    """Without the history plots, an auto events pane takes the rows the table leaves when there
    are enough of them (not 18 empty rows at 120x40, not 11 at 80x24 while the banner cut the
    spill alert)."""
    assert panels_shown(120, 40, AUTO, spare_rows=EVENTS_FILL_ROWS)["events"] is True
    assert panels_shown(120, 40, AUTO, spare_rows=EVENTS_FILL_ROWS - 1)["events"] is False
    assert panels_shown(120, 40, AUTO)["events"] is False  # not measured yet
    assert panels_shown(160, 48, AUTO, spare_rows=30)["events"] is False  # the plots take the rows
    assert panels_shown(100, 60, AUTO, spare_rows=30)["events"] is True  # below the map's width too
    assert panels_shown(80, 24, AUTO, spare_rows=11)["events"] is True  # 80x24: alerts with fixes, then events
    assert panels_shown(120, 40, {**AUTO, "events": "off"}, spare_rows=30)["events"] is False


async def test_free_rows_go_to_the_events_pane(tmp_path: Path) -> None:
    app = shared_app(tmp_path)
    async with app.run_test(size=(120, 56)) as pilot:
        await settle(pilot)
        await pilot.pause(0.3)
        table, alerts, events = app.query_one(ModelsTable), app.query_one(AlertsPanel), app.query_one(EventsPane)
        assert _shown(app) == {"map": True, "alerts": True, "history": False, "events": True}
        assert table.outer_size.height == table.virtual_size.height == 4  # the header and 3 models, no empty rows
        # each heading is measured with the widest age ("59 min"), so the rows hold it at any age
        widest = max(a.since or 0.0 for a in app.state.alerts) + 59 * 60
        lines = alerts_text(app.state.alerts, dict(app.theme_variables), widest).wrap(
            app.console, alerts.content_size.width
        )
        assert len(app.state.alerts) >= 2 and len(lines) > len(app.state.alerts)
        assert alerts.outer_size.height == 1 + len(lines)  # its border and every line
        now = alerts_text(app.state.alerts, dict(app.theme_variables), state_clock(app.state))
        assert len(now.wrap(app.console, alerts.content_size.width)) <= len(lines)  # nothing cut at today's ages
        assert events.region.bottom == app.query_one(GpuPanel).region.y  # the rest, down to the GPU strip
        assert events.outer_size.height >= EVENTS_FILL_ROWS
        await pilot.press("l")  # hidden by hand: the alerts take the rows again
        await pilot.pause(0.3)
        assert not events.display and alerts.region.bottom == app.query_one(GpuPanel).region.y


async def test_every_panel_on_fits_a_small_terminal(tmp_path: Path) -> None:
    """Every panel switched on by hand at 80×24: no scrollbar (the events pane's 12 rows pushed the
    screen to 28 rows: the GPU line wrapped, the status lines fell off); from 36 rows it keeps 12."""
    from kvtop.config.ui_state import save_panels

    save_panels(dict.fromkeys(PANELS, "on"))
    app = shared_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert all(_shown(app).values())
        assert screen.virtual_size.height == screen.size.height == 24 and not screen.show_vertical_scrollbar
        assert app.query_one(EventsPane).outer_size.height >= 3 and app.query_one("#panel-row").outer_size.height >= 3
        assert app.query_one(GpuPanel).region.bottom <= 21  # the GPU, log, status and footer lines stay on screen
        await pilot.resize_terminal(120, 40)
        await settle(pilot)
        # the banner is rebuilt after the panels' layout, which may lay the screen out once more: wait for that
        await wait_for(pilot, lambda: not screen.show_vertical_scrollbar, timeout_s=10)
        assert app.query_one(EventsPane).outer_size.height == 12 and not screen.show_vertical_scrollbar


def test_the_banner_count_points_where_the_alerts_are() -> None:
    """``+N more``: ``(l: all alerts)`` only when no panel lists the alerts; with the events pane or the
    alerts panel on screen (``l`` would hide the pane) it says they are below (issue 26 review)."""
    import dataclasses

    from kvtop.model.fold_alerts import fold_with_alerts
    from kvtop.model.views import AppState
    from kvtop.ui.dashboard_text import alert_bar
    from tests.ui.fakes import snapshot_at, step_index

    state = fold_with_alerts(AppState(host_url="http://127.0.0.1:11434"), snapshot_at(step_index("spills")))
    (top,) = state.alerts
    nofix = dataclasses.replace(top, fixes=())
    state = dataclasses.replace(state, alerts=(nofix, dataclasses.replace(nofix, kind="gpu_nearly_full")))
    assert alert_bar(state, {}).plain.splitlines()[1] == "+1 more (l: all alerts)"
    assert alert_bar(state, {}, listed_below=True).plain.splitlines()[1] == "+1 more below"


async def test_the_banner_knows_when_the_alerts_are_listed(tmp_path: Path, monkeypatch: Any) -> None:
    """80×24: the events pane lists the alerts under the banner; after ``l`` hides it, nothing does."""
    import kvtop.ui.screens.dashboard as dashboard

    calls: list[bool] = []
    real = dashboard.alert_bar

    def spy(*args: Any, listed_below: bool = False, **kw: Any) -> Any:
        calls.append(listed_below)
        return real(*args, listed_below=listed_below, **kw)

    monkeypatch.setattr(dashboard, "alert_bar", spy)
    app = shared_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.query_one(EventsPane).display and len(app.state.alerts) >= 2
        assert calls[-1] is True
        await pilot.press("l")
        for _ in range(100):
            await pilot.pause(0.05)
            if not app.query_one(EventsPane).display and calls[-1] is False:
                break
        assert not app.query_one(EventsPane).display and calls[-1] is False
