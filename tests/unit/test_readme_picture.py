"""The README's picture of kvtop is regenerated from the demo (``python -m kvtop.demo.picture``)
and must not be older than the layout it shows."""

from __future__ import annotations

from pathlib import Path

from kvtop.demo.picture import REPO, layout_hash, readme_hash, svg_hash, update_readme

RERUN = "the README's screen is older than the layout: run `python -m kvtop.demo.picture` and commit README.md and docs/kvtop-demo.svg"


def test_the_readme_screen_is_as_new_as_the_layout() -> None:
    now = layout_hash()
    assert readme_hash((REPO / "README.md").read_text(encoding="utf-8")) == now, RERUN
    assert svg_hash((REPO / "docs" / "kvtop-demo.svg").read_text(encoding="utf-8")) == now, RERUN


def _tree(root: Path, tcss: str, widget: str) -> None:
    (root / "kvtop" / "ui" / "widgets").mkdir(parents=True)
    (root / "kvtop" / "ui" / "kvtop.tcss").write_text(tcss, encoding="utf-8")
    (root / "kvtop" / "ui" / "widgets" / "bar.py").write_text(widget, encoding="utf-8")
    (root / "kvtop" / "model").mkdir(parents=True)
    (root / "kvtop" / "model" / "kv.py").write_text("X = 1\n", encoding="utf-8")


def test_the_layout_hash_follows_the_layout_files_only(tmp_path: Path) -> None:
    _tree(tmp_path, "Screen { layout: vertical; }\n", "WIDTH = 80\n")
    before = layout_hash(tmp_path)
    (tmp_path / "kvtop" / "model" / "kv.py").write_text("X = 2\n", encoding="utf-8")
    assert layout_hash(tmp_path) == before  # not a layout file
    (tmp_path / "kvtop" / "ui" / "widgets" / "bar.py").write_text("WIDTH = 120\n", encoding="utf-8")
    changed = layout_hash(tmp_path)
    assert changed != before and len(changed) == 16
    (tmp_path / "kvtop" / "ui" / "widgets" / "map.py").write_text("", encoding="utf-8")
    assert layout_hash(tmp_path) != changed  # a new widget counts too


def test_update_readme_replaces_only_the_marked_screen() -> None:
    old = "# kvtop\n\nIntro.\n\n```\nold screen\n```\n\n## Quick start\n\n```sh\nkvtop --demo\n```\n"
    first = update_readme(old, ["line 1", "line 2"], "0123456789abcdef")
    assert readme_hash(first) == "0123456789abcdef"
    assert "old screen" not in first and "line 1\nline 2\n```\n<!-- /kvtop-demo-screen -->" in first
    assert first.endswith("## Quick start\n\n```sh\nkvtop --demo\n```\n")
    again = update_readme(first, ["new"], "fedcba9876543210")
    assert (
        readme_hash(again) == "fedcba9876543210"
        and "line 1" not in again
        and again.count("kvtop-demo-screen layout") == 1
    )
    assert again.endswith("## Quick start\n\n```sh\nkvtop --demo\n```\n")


def test_the_picture_is_taken_with_a_new_users_config_and_state(tmp_path: Path) -> None:
    """A panel choice saved on this machine (``m`` pressed once) must not end up in the README."""
    from kvtop.config.ui_state import save_panels, saved_panels
    from kvtop.demo.picture import _fresh_user_dirs

    save_panels({"map": "on"})  # this user's state (the test's XDG_STATE_HOME, see conftest)
    assert saved_panels()["map"] == "on"
    with _fresh_user_dirs(tmp_path / "picture"):
        assert saved_panels() == {"map": "auto", "alerts": "auto", "history": "auto", "events": "auto"}
    assert saved_panels()["map"] == "on"
