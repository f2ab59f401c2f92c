"""The import contract (ARCHITECTURE.md "Layers"): read from the source, nothing imported.

1. **Layers**: no kvtop module imports a layer above its own::

       faces     kvtop.ui, kvtop.cli, kvtop.plan_cli, kvtop.inspect_log, kvtop.inspect_changes, kvtop.report, kvtop.export,
                 kvtop.demo, kvtop.__main__ (the faces may import each other)
       engine    kvtop.engine
       settings  kvtop.config (the resolved settings; it reads the access options of kvtop.sources)
       sources   kvtop.sources
       model     kvtop.model
       logparse  kvtop.logparse
       leaves    kvtop.core (standard library only), kvtop.textsafe, kvtop.redact, kvtop.bundled, kvtop

2. **No Textual or Rich below the faces**, and in the faces only in ``kvtop.ui`` (plus the known
   exceptions in ``FACE_TOOLKIT_EXCEPTIONS``, each with its reason).
3. **No import circle** (a strongly connected component of the import graph), except those in
   ``CIRCLES_ALLOWED``.

The graph is ``tests/import_graph.py``'s: every import counts, module-level, function-level
("lazy") and ``if TYPE_CHECKING:`` alike. A lazy import is still a dependency (the issue counts the
circles it hides), and an annotation-only import is a dependency of the module's meaning (mypy
follows it); counting both keeps the rule one rule. ``python tests/import_graph.py --edges`` prints
the circles with the lines that make them.

An equivalent test of our own rather than import-linter: the graph is 200 lines of ``ast`` with no
dependency, it counts function-level imports the same way as the rest, and the allowlists below can
insist on staying true (import-linter's ``ignore_imports`` does not fail when an ignored import is
gone).

The allowlists may only shrink: the test fails when a listed circle or exception no longer exists
exactly as listed, so that whoever breaks one also deletes (or narrows) its entry.
"""

from __future__ import annotations

import sys

import pytest

from tests.import_graph import all_modules, circles, edges, graph, imports_of

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "faces",
        (
            "kvtop.ui",
            "kvtop.cli",
            "kvtop.plan_cli",
            "kvtop.inspect_log",
            "kvtop.inspect_changes",
            "kvtop.report",
            "kvtop.export",
            "kvtop.demo",
            "kvtop.__main__",
        ),
    ),
    ("engine", ("kvtop.engine",)),
    ("settings", ("kvtop.config",)),
    ("sources", ("kvtop.sources",)),
    ("model", ("kvtop.model",)),
    ("logparse", ("kvtop.logparse",)),
    ("leaves", ("kvtop.core", "kvtop.textsafe", "kvtop.redact", "kvtop.bundled", "kvtop")),
)
"""Top to bottom. A module belongs to the layer of its longest matching prefix (``kvtop`` itself
only as the package ``kvtop/__init__.py``)."""

CIRCLES_ALLOWED: frozenset[frozenset[str]] = frozenset({})
"""Import circles that exist today, each with what removes it. Only ever shrinks."""

LAYER_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()
"""``(importer, imported)`` pairs allowed to import upwards. None today; only ever shrinks."""

FACE_TOOLKIT_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("kvtop.report", "rich"): "rich.cells.cell_len: the terminal cell width of a name in the --once table's columns",
    ("kvtop.cli", "textual"): "textual.theme.BUILTIN_THEMES, function-level: the theme names --theme accepts",
}
"""Faces other than ``kvtop.ui`` that import Textual or Rich, with why. Only ever shrinks."""

TOOLKITS = ("textual", "rich")


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "kvtop" and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__} and ARCHITECTURE.md")
    return best[1]


def test_every_module_has_a_layer() -> None:
    for module in all_modules():
        layer_of(module)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = {(e.source, e.target): e for e in edges() if layer_of(e.target) < layer_of(e.source)}
    unexpected = sorted(
        f"{e.source}:{e.line} ({LAYERS[layer_of(e.source)][0]}) imports {e.target} ({LAYERS[layer_of(e.target)][0]}, {e.kind})"
        for pair, e in upward.items()
        if pair not in LAYER_EXCEPTIONS
    )
    assert not unexpected, "imports of a layer above:\n" + "\n".join(unexpected)
    stale = sorted(LAYER_EXCEPTIONS - set(upward))
    assert not stale, f"listed in LAYER_EXCEPTIONS but gone: delete them: {stale}"


def test_no_import_circle_beyond_the_known_ones() -> None:
    found = set(circles(graph()))
    new = [sorted(c) for c in found - CIRCLES_ALLOWED]
    assert not new, f"new import circles (python tests/import_graph.py --edges shows their lines): {new}"
    gone = [sorted(c) for c in CIRCLES_ALLOWED - found]
    assert not gone, f"listed in CIRCLES_ALLOWED but no longer a circle as listed: delete or narrow them: {gone}"


def test_no_textual_nor_rich_below_the_faces_and_only_the_ui_among_them() -> None:
    faces = 0
    below: list[str] = []
    seen: set[tuple[str, str]] = set()
    for e in edges(external=True):
        if not e.external or e.target not in TOOLKITS:
            continue
        if layer_of(e.source) != faces:
            below.append(f"{e.source}:{e.line} imports {e.target} ({e.kind})")
        elif not (e.source == "kvtop.ui" or e.source.startswith("kvtop.ui.")):
            seen.add((e.source, e.target))
    assert not below, "Textual/Rich below the faces:\n" + "\n".join(below)
    unexpected = sorted(seen - set(FACE_TOOLKIT_EXCEPTIONS))
    assert not unexpected, (
        f"faces other than kvtop.ui importing Textual/Rich (list them with a reason or move the code to kvtop.ui): {unexpected}"
    )
    stale = sorted(set(FACE_TOOLKIT_EXCEPTIONS) - seen)
    assert not stale, f"listed in FACE_TOOLKIT_EXCEPTIONS but gone: delete them: {stale}"


def test_core_is_standard_library_only() -> None:
    """``kvtop.core`` is the leaf every layer may import: nothing of kvtop, nothing installed."""
    core = [e for e in edges(external=True) if e.source == "kvtop.core" or e.source.startswith("kvtop.core.")]
    assert core, "no import found in kvtop.core: is the graph reading the files?"
    bad = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in core
        if not e.external
        and not e.target.startswith("kvtop.core")
        or e.external
        and e.target not in sys.stdlib_module_names
        and e.target != "__future__"
    ]
    assert not bad, bad


# --------------------------------------------------------------------------------------------
# The graph itself (so that the rules above cannot pass on a graph that misses imports)

MODULES = {"kvtop", "kvtop.a", "kvtop.a.b", "kvtop.a.c", "kvtop.d"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import kvtop.a.b", {("kvtop.a.b", "module")}),
        ("from kvtop.a import b, x", {("kvtop.a.b", "module"), ("kvtop.a", "module")}),
        ("from kvtop.a.b import thing", {("kvtop.a.b", "module")}),
        ("from . import c", {("kvtop.a.c", "module")}),
        ("from .. import d", {("kvtop.d", "module")}),
        ("def f():\n    from kvtop.d import y\n", {("kvtop.d", "function")}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvtop.d import y\n", {("kvtop.d", "type")}),
        (
            "import typing\nif typing.TYPE_CHECKING:\n    import kvtop.d\nelse:\n    import kvtop.a.c\n",
            {("kvtop.d", "type"), ("kvtop.a.c", "module")},
        ),
        ("class K:\n    async def f(self):\n        import kvtop.d\n", {("kvtop.d", "function")}),
        ("import kvtop.a.b.missing", {("kvtop.a.b", "module")}),
    ],
)
def test_the_graph_sees_every_kind_of_import(source: str, expected: set[tuple[str, str]]) -> None:
    found = {(e.target, e.kind) for e in imports_of(source, "kvtop.a.e", MODULES) if not e.external}
    assert found == expected


def test_external_imports_are_named_by_their_top_package() -> None:
    found = {
        (e.target, e.kind) for e in imports_of("import rich.text\nfrom textual.app import App\n", "kvtop.d", MODULES)
    }
    assert found == {("rich", "module"), ("textual", "module")}


def test_circles_are_the_strongly_connected_components() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert set(circles(g)) == {frozenset("abc"), frozenset("de")}
    assert circles({"a": {"b"}, "b": set()}) == []
