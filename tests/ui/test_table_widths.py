"""Columns share the width by need; a name is cut only when there is no room."""

from __future__ import annotations

import dataclasses

import pytest

from kvtop.config import Settings
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.models_table import ModelsTable, columns_for
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.screen_text import screen_when
from tests.ui.test_plan_screen import wait_for

LONG = {
    "qwen3:1.7b-q8_0": "embeddinggemma:latest",  # 21 cells: the case
    "qwen3:1.7b-q4_K_M": "hf.co/unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M",
}  # 54 cells


def renamed(snap: OllamaSnapshot) -> OllamaSnapshot:
    """The snapshot with two models under long names (same digests, so /api/show still matches)."""
    models = tuple(
        dataclasses.replace(m, name=LONG.get(m.name, m.name), model=LONG.get(m.name, m.name)) for m in snap.models
    )
    return dataclasses.replace(snap, models=models)


def _app() -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25), FakeSource(renamed(snapshot_at(step_index("spills"))), hold=True)
    )


@pytest.mark.parametrize(
    ("size", "whole"),
    [
        ((160, 48), ["embeddinggemma:latest", "gemma4:latest"]),
        ((220, 55), [*LONG.values(), "gemma4:latest"]),
        ((120, 40), ["embeddinggemma:latest", "gemma4:latest"]),
    ],
)
async def test_names_are_whole_when_the_terminal_has_room(size: tuple[int, int], whole: list[str]) -> None:
    app = _app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        lines = await screen_when(pilot, lambda lines: any(ln.startswith(" gemma4:latest") for ln in lines))
        for name in whole:  # in the table: a row starts with it
            assert any(line.startswith(f" {name} ") for line in lines), (name, lines[:8])
        header = next(line for line in lines if "NAME" in line and "PROCESSOR" in line)
        for column in ("VRAM+RAM", "MEMORY", "CONTEXT", "PROCESSOR"):  # SIZE reads VRAM+RAM: gemma4 is spilled
            assert column in header  # nothing dropped to make room
        row = next(line for line in lines if line.startswith(" gemma4:latest"))
        assert "19%/81% CPU/GPU" in row
        assert all(len(line) <= size[0] for line in lines)


async def test_at_80_columns_a_long_name_is_cut_in_the_middle_keeping_its_tag() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 3)
        text = "\n".join(await screen_when(pilot, lambda lines: "…:Q4_K_M" in "".join(lines)))
        # gemma4 is spilled: SIZE shows its VRAM+RAM (one cell wider; the names share the rest)
        assert "\n embedding…:latest " in text and "…:Q4_K_M " in text
        assert "\n gemma4:latest      5.0G+1.2G " in text and "19%/81% CPU/GPU" in text
        # the header says which figure is which (PROCESSOR gives the split CPU first, as ollama ps)
        header = next(line for line in text.splitlines() if "NAME" in line and "PROCESSOR" in line)
        row = next(line for line in text.splitlines() if line.startswith(" gemma4:latest"))
        assert header.index("VRAM+RAM") == row.index("5.0G+1.2G") and "SIZE" not in header


@pytest.mark.parametrize("width", range(70, 221, 7))
def test_widened_columns_still_fit(width: int) -> None:
    from kvtop.model.views import AppState  # noqa: F401 - the views come from the app below

    snap = renamed(snapshot_at(step_index("spills")))
    app = make_app(Settings(host_url=HOST), FakeSource(snap))
    from kvtop.model.fold_alerts import fold_with_alerts

    views = fold_with_alerts(app.states[HOST], snap).models
    cols = columns_for(width, None, views)
    assert sum(c.width + 2 for c in cols) + 2 <= width
    plain = columns_for(width)
    assert cols[0].width >= plain[0].width and [c.key for c in cols] == [c.key for c in plain]
