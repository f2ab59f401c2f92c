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
    on_disk = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "kvtop").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert "kvtop.model.alerts" in on_disk
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_data_file_of_a_package_ships_in_the_wheel() -> None:
    """Each file other than Python source in a listed package's folder matches that package's
    ``package-data`` globs, so ``pip install .`` (not editable) carries it: a theme, stylesheet,
    scenario or recording outside the globs is missing from the wheel, which the editable
    install the tests run from would not notice. (The wheel itself, built with build isolation,
    takes 3.2 s and needs setuptools>=68 from an index; this reads the same configuration.)"""
    from fnmatch import fnmatch

    tool = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    package_dir: dict[str, str] = tool.get("package-dir", {})
    globs: dict[str, list[str]] = tool.get("package-data", {})
    missing: list[str] = []
    seen_data = 0
    for package in tool["packages"]:
        folder = REPO / package_dir.get(package, package.replace(".", "/"))
        assert folder.is_dir(), f"{package}: {folder} does not exist"
        for path in folder.iterdir():
            if not path.is_file() or path.suffix in (".py", ".pyc"):
                continue
            seen_data += 1
            if not any(fnmatch(path.name, g) for g in globs.get(package, ())):
                missing.append(str(path.relative_to(REPO)))
    assert seen_data >= 9  # kvtop.tcss, four themes, two scenarios, two recordings
    assert missing == [], "add a [tool.setuptools.package-data] glob for these (they would not ship)"
