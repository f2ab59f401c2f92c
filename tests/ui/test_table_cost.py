"""The models table at 1,000 models does the work of what changed: a row is rendered
again only when its view or sparkline changed, a new order moves the rows in place (no row added
again), a model that comes or goes adds or removes its row alone; and the cells shown are always
exactly a fresh table's. Work is counted (rows rendered, DataTable calls), never timed."""

from __future__ import annotations

import dataclasses

import pytest
from textual.app import App, ComposeResult

from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.model.views import AppState, ModelView
from kvtop.ui.widgets.models_table import ModelsTable
from tests.ui.fakes import HOST, snapshot_at, step_index

N = 1000
WIDTH = 160


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ModelsTable()


def thousand() -> tuple[ModelView, ...]:
    base = fold_with_alerts(AppState(host_url=HOST), snapshot_at(step_index("spill"))).models
    return tuple(
        dataclasses.replace(base[i % len(base)], name=f"m{i:04d}-{base[i % len(base)].name}", digest=f"{i:064x}")
        for i in range(N)
    )


def cells(table: ModelsTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def sparks_for(views: tuple[ModelView, ...], line: str = "▁▂▃▄▅▆▇") -> dict[tuple[str, str], str]:
    return {(v.name, v.digest): line for v in views}


async def fresh_cells(views: tuple[ModelView, ...], sparks: dict[tuple[str, str], str]) -> list[list[str]]:
    app = TableApp()
    async with app.run_test(size=(WIDTH, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(views, WIDTH, sparks)
        await pilot.pause()
        return cells(table)


class Calls:
    def __init__(self, table: ModelsTable, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = {"update_cell": 0, "add_row": 0, "remove_row": 0, "clear": 0, "sort": 0}
        for name in self.n:
            real = getattr(table, name)

            def counting(*a, _real=real, _name=name, **k):  # type: ignore[no-untyped-def]
                self.n[_name] += 1
                return _real(*a, **k)

            monkeypatch.setattr(table, name, counting)

    def take(self) -> dict[str, int]:
        out, self.n = self.n, dict.fromkeys(self.n, 0)
        return out


async def test_a_poll_at_a_thousand_models_renders_only_the_rows_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    views = thousand()
    sparks = sparks_for(views)
    app = TableApp()
    async with app.run_test(size=(WIDTH, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(views, WIDTH, sparks)
        await pilot.pause()
        assert table.rows_rendered == N and table.row_count == N
        calls = Calls(table, monkeypatch)
        # the next poll: equal views, new objects (the memo brought them to the poll's time)
        again = tuple(dataclasses.replace(v) for v in views)
        table.show(again, WIDTH, dict(sparks))
        assert table.rows_rendered == N and calls.take() == dict.fromkeys(calls.n, 0)
        # one model's context doubles and another's sparkline moves: two rows rendered, their
        # changed cells updated, nothing added, removed, cleared or sorted
        ctx = dataclasses.replace(views[500].context, value=(views[500].context.value or 0) * 2)
        moved = list(again)
        moved[500] = dataclasses.replace(again[500], context=ctx)
        moved_t = tuple(moved)
        sparks2 = dict(sparks)
        sparks2[(views[7].name, views[7].digest)] = "▇▇▇▇▇▇▇"
        table.show(moved_t, WIDTH, sparks2)
        got = calls.take()
        assert table.rows_rendered == N + 2
        assert 2 <= got["update_cell"] <= 6 and got["add_row"] == got["clear"] == got["sort"] == 0, got
        await pilot.pause()
        shown = cells(table)
    assert shown == await fresh_cells(moved_t, sparks2)


async def test_a_new_order_moves_the_rows_in_place_and_keeps_the_cursor(monkeypatch: pytest.MonkeyPatch) -> None:
    views = thousand()
    sparks = sparks_for(views)
    app = TableApp()
    async with app.run_test(size=(WIDTH, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(views, WIDTH, sparks)
        await pilot.pause()
        table.move_cursor(row=3)
        chosen = table.selected_view
        assert chosen is views[3]
        calls = Calls(table, monkeypatch)
        rendered = table.rows_rendered
        reordered = tuple(reversed(views))
        table.show(reordered, WIDTH, sparks, sort=("name", True))  # the sort key marks NAME's header
        await pilot.pause()
        got = calls.take()
        assert table.rows_rendered == rendered, "a new order renders no row again"
        assert got["add_row"] == 0 and got["remove_row"] == 0 and got["update_cell"] == 0, got
        selected = table.selected_view
        assert selected is not None and (selected.name, selected.digest) == (chosen.name, chosen.digest)
        assert table.cursor_row == N - 1 - 3
        assert [c.label.plain for c in table.columns.values()][0] == "NAME ▼"  # the header relabelled in place
        shown = cells(table)
    assert shown == await fresh_cells(reordered, sparks)


async def test_a_model_that_comes_or_goes_adds_or_removes_its_row_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    views = thousand()
    sparks = sparks_for(views)
    app = TableApp()
    async with app.run_test(size=(WIDTH, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(views, WIDTH, sparks)
        await pilot.pause()
        calls = Calls(table, monkeypatch)
        rendered = table.rows_rendered
        newcomer = dataclasses.replace(views[1], name="zz-new:latest", digest="f" * 64)
        changed = (*views[:10], newcomer, *views[11:])  # row 10 unloaded, a new model in its place
        table.show(changed, WIDTH, sparks)
        await pilot.pause()
        got = calls.take()
        assert table.rows_rendered == rendered + 1  # the newcomer alone
        assert (got["add_row"], got["remove_row"], got["clear"]) == (1, 1, 0), got
        assert table.row_count == N
        shown = cells(table)
    assert shown == await fresh_cells(changed, sparks)


async def test_same_model_listed_twice_keeps_both_rows() -> None:
    views = thousand()[:3]
    twice = (views[0], views[1], views[0])
    app = TableApp()
    async with app.run_test(size=(WIDTH, 40)) as pilot:
        table = app.query_one(ModelsTable)
        table.show(twice, WIDTH)
        await pilot.pause()
        assert table.row_count == 3
        table.show((views[0], views[0], views[1]), WIDTH)
        await pilot.pause()
        assert [r[0].plain for r in (table.get_row_at(i) for i in range(3))] == [
            views[0].name,
            views[0].name,
            views[1].name,
        ]


async def test_a_key_between_polls_reuses_the_sparklines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The VRAM sparklines (1,000 of them at 1,000 models) are built once per history sample, and the
    GPU panel's data joined once per sample: a sort key while paused repaints the table without
    doing either again."""
    from tests.ui.mapfakes import settle, shared_app

    app = shared_app(tmp_path)
    async with app.run_test(size=(WIDTH, 48)) as pilot:
        await settle(pilot)
        await pilot.press("p")  # paused: no sample is stored while the keys are pressed
        await pilot.pause(0.6)
        table = app.query_one(ModelsTable)
        builds, joins = app.dashboard.sparkline_builds, app.dashboard.gpu_panel_joins
        assert builds >= 1 and joins >= 1
        for key, arrow in (("s", "▼"), ("S", "▲"), ("S", "▼")):  # by size, then reversed twice
            await pilot.press(key)
            await pilot.pause()
            assert any(arrow in c.label.plain for c in table.columns.values())
        assert app.dashboard.sparkline_builds == builds
        assert app.dashboard.gpu_panel_joins == joins  # the GPU panel's join too
