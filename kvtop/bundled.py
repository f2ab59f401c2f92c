"""Find the files kvtop ships: the top-level ``snapshots/`` and ``themes/`` folders.

In a wheel they are the packages ``kvtop.snapshots`` and ``kvtop.themes`` (pyproject maps the
folders); run from a source tree (tests, a plain checkout) they are the folders beside ``kvtop/``.
"""

from __future__ import annotations

import sys
from importlib import resources

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable
from pathlib import Path


def bundled_dir(name: str) -> Traversable:
    """The shipped folder ``name`` (``"snapshots"`` or ``"themes"``).

    Raises:
        FileNotFoundError: Neither the package nor the source folder exists.
    """
    try:
        found = resources.files(f"kvtop.{name}")
        if found.is_dir():
            return found
    except (ModuleNotFoundError, TypeError):
        pass
    source = Path(__file__).resolve().parent.parent / name
    if source.is_dir():
        return source
    raise FileNotFoundError(f"kvtop's bundled folder {name!r} is missing from this installation")
