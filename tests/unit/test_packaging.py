"""Every package under kvtop/ ships in the wheel: pyproject.toml lists packages by hand (the
snapshots and themes folders are mapped into it), and the tests run from an editable install,
which would not notice a package missing from a plain ``pip install .``."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def test_every_kvtop_package_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "kvtop").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    assert "kvtop.model.alerts" in on_disk
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
