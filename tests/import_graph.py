"""The kvtop import graph, read from the source with ``ast`` (nothing is imported).

Every ``import``/``from … import`` of a kvtop module counts, wherever it stands: at module level,
inside a function (a "lazy" import still ties the two modules together: one cannot be understood,
moved or tested without the other), and under ``if TYPE_CHECKING:`` (a type named in a signature
is a dependency on its module just the same; mypy follows it, and a circle through it is as real
to a reader). Not counted: ``importlib.import_module("…")`` with a string (``kvtop.logparse``'s
PEP 562 ``__getattr__``), which ``ast`` cannot see.

An edge goes to the module named, not to its parent packages: ``from kvtop.model.state import X``
is an edge to ``kvtop.model.state`` only (Python runs ``kvtop/model/__init__.py`` first, but that is
packaging, not a dependency; import-linter/grimp count it the same way). ``from kvtop.model import
state`` is an edge to ``kvtop.model.state`` when that is a module, else to ``kvtop.model``.

Run it to list the circles (strongly connected components of two or more modules, or a module
that imports itself)::

    .venv/bin/python tests/import_graph.py            # every import counts
    .venv/bin/python tests/import_graph.py --runtime  # without the TYPE_CHECKING-only ones
    .venv/bin/python tests/import_graph.py --edges    # also print each circle's edges

``tests/unit/test_import_contract.py`` checks the layers and the circles with the same graph.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kvtop"


@dataclass(frozen=True)
class Edge:
    """One import of a kvtop module by another, where it stands in the importer."""

    source: str
    target: str
    line: int
    kind: str  # "module", "function" (inside a def) or "type" (under ``if TYPE_CHECKING:``)
    external: bool = False  # the target is outside kvtop (``target`` is the top-level name)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Visitor(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, modules: set[str]) -> None:
        self.name = name
        self.package = name if is_package else name.rpartition(".")[0]
        self.modules = modules
        self.edges: list[Edge] = []
        self._function = 0
        self._type = 0

    def _kind(self) -> str:
        return "type" if self._type else "function" if self._function else "module"

    def _resolve(self, dotted: str) -> str | None:
        """The kvtop module a dotted name refers to (the longest prefix that is a module)."""
        parts = dotted.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in self.modules:
                return candidate
            parts.pop()
        return None

    def _add(self, target: str | None, line: int) -> None:
        if target is not None and target != self.name:
            self.edges.append(Edge(self.name, target, line, self._kind()))

    def _external(self, dotted: str, line: int) -> None:
        top = dotted.split(".")[0]
        if top != "kvtop":
            self.edges.append(Edge(self.name, top, line, self._kind(), external=True))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._function += 1
        self.generic_visit(node)
        self._function -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type += 1
            for child in node.body:
                self.visit(child)
            self._type -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "kvtop" or alias.name.startswith("kvtop."):
                self._add(self._resolve(alias.name), node.lineno)
            else:
                self._external(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            if node.level > 1:
                base = base[: -(node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if not (module == "kvtop" or module.startswith("kvtop.")):
            if module:
                self._external(module, node.lineno)
            return
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            self._add(sub if sub in self.modules else self._resolve(module), node.lineno)


def imports_of(source: str, name: str, modules: set[str], *, is_package: bool = False) -> list[Edge]:
    """The imports in ``source``, the text of module ``name``; ``modules``: every kvtop module."""
    visitor = _Visitor(name, is_package, modules)
    visitor.visit(ast.parse(source, name))
    return visitor.edges


def edges(*, include_type_checking: bool = True, external: bool = False) -> list[Edge]:
    """Every import edge between kvtop modules (and, with ``external``, to other top-level packages)."""
    modules = all_modules()
    names = set(modules)
    out: list[Edge] = []
    for name, path in modules.items():
        found = imports_of(path.read_text(encoding="utf-8"), name, names, is_package=path.name == "__init__.py")
        out.extend(e for e in found if (include_type_checking or e.kind != "type") and (external or not e.external))
    return out


def graph(*, include_type_checking: bool = True) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in all_modules()}
    for e in edges(include_type_checking=include_type_checking):
        g[e.source].add(e.target)
    return g


def circles(g: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(frozenset(component))
    return sorted(out, key=lambda c: (-len(c), sorted(c)))


def main(argv: list[str]) -> int:
    include = "--runtime" not in argv
    all_edges = edges(include_type_checking=include)
    g = graph(include_type_checking=include)
    found = circles(g)
    print(
        f"{len(g)} modules, {sum(len(v) for v in g.values())} edges, {len(found)} circles"
        f" ({'every import' if include else 'TYPE_CHECKING-only imports left out'})"
    )
    for component in found:
        print(f"- {len(component)}: " + " ".join(sorted(component)))
        if "--edges" in argv:
            for e in sorted(set(all_edges), key=lambda e: (e.source, e.target, e.line)):
                if e.source in component and e.target in component:
                    print(f"    {e.source}:{e.line} -> {e.target} ({e.kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
