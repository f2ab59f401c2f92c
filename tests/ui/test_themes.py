"""Every bundled theme at 80×24 and 160×48 (fixed data), and theme selection/persistence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.config.ui_state import saved_theme
from kvtop.ui.app import make_app
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from kvtop.ui.themes import KVTOP_THEMES, load_themes, load_themes_reporting
from tests.ui.settle import settle
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index


@pytest.mark.parametrize("theme", KVTOP_THEMES)
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_theme_snapshot(snap_compare: Any, theme: str, size: tuple[int, int]) -> None:
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, theme=theme),
        FakeSource(snapshot_at(step_index("spills")), hold=True),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )

    async def run_before(pilot: Any) -> None:
        await settle(pilot, 3)
        assert pilot.app.theme == theme

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_bundled_themes_define_every_kvtop_variable() -> None:
    themes = load_themes()
    assert set(KVTOP_THEMES) <= set(themes)
    wanted = set(themes["kvtop-dark"].variables)
    assert {"kv-weights", "kv-kv", "kv-compute", "kv-free", "kv-ok", "kv-warn", "kv-crit"} <= wanted
    for name in KVTOP_THEMES:
        assert set(themes[name].variables) == wanted, name


def test_user_theme_is_loaded_and_a_broken_one_reported(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        'name = "mine"\n[colors]\nprimary = "#123456"\n[variables]\nkv-kv = "#654321"\n'
    )
    (tmp_path / "broken.toml").write_text('name = "broken"\n[colors\n')
    themes, problems = load_themes_reporting(tmp_path)
    assert "mine" in themes and themes["mine"].variables["kv-kv"] == "#654321"
    assert len(problems) == 1 and "broken.toml" in problems[0]


async def test_t_cycles_themes_and_the_choice_persists() -> None:
    app = make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snapshot_at(1)))
    said: list[str] = []  # every notice, however soon it times out
    notify = app.notify
    app.notify = lambda message, **kw: (said.append(message), notify(message, **kw))[1]  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        assert app.theme == "kvtop-dark"
        await pilot.press("t")
        assert app.theme == "kvtop-light"
        await pilot.press("t", "t")
        assert app.theme == "kvtop-mono"
        await pilot.press("t")
        assert app.theme == "kvtop-dark"
        await pilot.press("t")
        assert said[0] == "saved: theme kvtop-light"
        assert len(said) == 5 and all(m.startswith("saved: theme ") for m in said)  # one notice a choice
        assert said[-1] == "saved: theme kvtop-light"
    assert saved_theme() == "kvtop-light"


async def test_unknown_theme_falls_back_with_a_warning() -> None:
    app = make_app(Settings(host_url=HOST, interval_s=0.25, theme="nope"), FakeSource(snapshot_at(1)))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.2)
        assert app.theme == "kvtop-dark"
        assert any("unknown theme 'nope'" in n.message for n in app._notifications)
