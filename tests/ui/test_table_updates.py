"""The models table repaints what changed: the same rows and columns update only the cells whose
content changed (counted), and the cells shown are then exactly a full rebuild's."""

from __future__ import annotations

import dataclasses

import pytest
from textual.app import App, ComposeResult

from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, snapshot_at, step_index


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ModelsTable()


def _cells(table: ModelsTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_one_changed_row_updates_only_its_changed_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    state = fold_with_alerts(AppState(host_url=HOST), snapshot_at(step_index("spill")))
    views = state.models
    assert len(views) == 3
    changed = dataclasses.replace(views[1], name=views[1].name)  # equal view, new object: nothing to do
    app = TableApp()
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(views, 160)
        await pilot.pause()
        calls = {"update_cell": 0, "add_row": 0, "clear": 0}
        for name in calls:
            real = getattr(table, name)

            def counting(*a, _real=real, _name=name, **k):  # type: ignore[no-untyped-def]
                calls[_name] += 1
                return _real(*a, **k)

            monkeypatch.setattr(table, name, counting)
        table.show((views[0], changed, views[2]), 160)
        assert calls == {"update_cell": 0, "add_row": 0, "clear": 0}
        # the third model's context changes: only its context cell (and what depends on it) is updated
        ctx = dataclasses.replace(views[2].context, value=(views[2].context.value or 0) * 2)
        moved = dataclasses.replace(views[2], context=ctx)
        table.show((views[0], changed, moved), 160)
        await pilot.pause()
        assert calls["add_row"] == 0 and calls["clear"] == 0
        assert 1 <= calls["update_cell"] < len(table.columns)
        incremental = _cells(table)
    fresh = TableApp()
    async with fresh.run_test(size=(160, 40)) as pilot:
        table = fresh.query_one(ModelsTable)
        table.show((views[0], changed, moved), 160)
        await pilot.pause()
        assert _cells(table) == incremental
