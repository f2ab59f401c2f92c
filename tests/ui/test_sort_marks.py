"""The sort's direction: the column header and the status line under the table show one arrow
(tester N #12: ``NAME ▼`` over ``sort: name ↑``)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from kvtop.config import Settings
from kvtop.ui.app import make_app
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.test_app import wait_for


def status(app: object) -> str:
    return str(app.dashboard.query_one("#status", Static).render())  # type: ignore[attr-defined]


def header(app: object, key: str) -> str:
    table = app.query_one(ModelsTable)  # type: ignore[attr-defined]
    return next(str(c.label) for c in table.columns.values() if str(c.label).startswith(key))


@pytest.mark.parametrize(("ascii_mode", "down", "up"), [(False, "▼", "▲"), (True, "v", "A")])
async def test_the_header_and_the_status_line_show_one_direction(ascii_mode: bool, down: str, up: str) -> None:
    settings = Settings(host_url=HOST, interval_s=0.25, extra={"ascii": "1"} if ascii_mode else {})
    app = make_app(settings, FakeSource(snapshot_at(step_index("spills"))))  # type: ignore[arg-type]
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        await pilot.press("s")  # size (VRAM+RAM: a model spills), largest first
        await wait_for(pilot, lambda: header(app, "VRAM+RAM").endswith(down))
        assert "sort: size  " in status(app)
        await pilot.press("S")  # smallest first
        await wait_for(pilot, lambda: header(app, "VRAM+RAM").endswith(up))
        assert f"sort: size {up}  " in status(app)
        await pilot.press("s")  # name, still reversed: Z to A
        await wait_for(pilot, lambda: header(app, "NAME") == f"NAME {down}")
        assert f"sort: name {down}  " in status(app)
        await pilot.press("S")  # name A to Z: the header's ▲, and no mark on the status line
        await wait_for(pilot, lambda: header(app, "NAME") == f"NAME {up}")
        assert "sort: name  " in status(app)
