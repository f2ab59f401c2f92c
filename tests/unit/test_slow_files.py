"""The ``slow`` marker's list (``tests/conftest.py``): every entry names a test file that exists, so
a renamed or removed file does not silently leave its tests in the inner loop or the list stale."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FILES

REPO = Path(__file__).resolve().parents[2]


def test_every_slow_file_exists() -> None:
    missing = sorted(f for f in SLOW_FILES if not (REPO / f).is_file())
    assert missing == [], "remove these from SLOW_FILES in tests/conftest.py (or fix their paths)"


def test_the_slow_files_are_test_files() -> None:
    assert SLOW_FILES and all(
        f.startswith("tests/") and Path(f).name.startswith("test_") and f.endswith(".py") for f in SLOW_FILES
    )
