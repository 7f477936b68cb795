"""No import cycle among the modules of om_core, om_api and om_workers.

The imports are read from the sources with ``ast``, not by importing anything. Every import counts: at module
level, inside a function, and under ``if TYPE_CHECKING:``. A deferred import only postpones a cycle to the
first call (both cycles this test was written against closed through one), and a type-only import still
means a module cannot be read or moved without the other. Each edge of a reported cycle names its file, line
and kind, so the message says where to cut.

An import resolves to the most specific module it names: ``from a.b import c`` is an edge to ``a.b.c`` when
that module exists, else to ``a.b``. Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``;
that implicit parent edge is left out, since a package that imports its own submodules (as
``om_core.adapters.store`` does) would otherwise be a cycle with every one of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("om_core", "om_api", "om_workers", "om_mcp", "om_integrations")

Kind = Literal["module", "function", "type-checking"]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int
    kind: Kind

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}  ({self.path}:{self.line}, {self.kind}-level)"


def modules_under(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name → source file, for every module of ``packages`` (a package is its __init__)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, Kind]]:
    def walk(node: ast.AST, kind: Kind) -> Iterator[tuple[ast.Import | ast.ImportFrom, Kind]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, kind
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, "function")
            elif isinstance(child, ast.If) and _is_type_checking(child.test) and kind == "module":
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), "type-checking")
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), kind)
            else:
                yield from walk(child, kind)

    yield from walk(tree, "module")


def import_edges(modules: dict[str, Path], root: Path) -> list[Edge]:
    edges: list[Edge] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, kind in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join([*base, node.module] if node.module else base)
                else:
                    origin = node.module or ""
                targets = [
                    f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                    for alias in node.names
                ]
            for target in targets:
                resolved = _known(target, modules)
                if resolved is not None and resolved != name:
                    edges.append(Edge(name, resolved, path.relative_to(root), node.lineno, kind))
    return edges


def _known(target: str, modules: dict[str, Path]) -> str | None:
    # ``import a.b.c`` binds ``a`` but runs ``a.b.c``: the deepest module the dotted name reaches
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One shortest cycle per strongly connected component of more than one module (Tarjan, then BFS)."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
        graph.setdefault(edge.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_shortest_cycle(graph, component) for component in components]


def _shortest_cycle(graph: dict[str, dict[str, Edge]], component: set[str]) -> list[Edge]:
    start = min(component)
    came_from: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor, edge in sorted(graph[node].items()):
                if successor not in component or successor in came_from:
                    continue
                came_from[successor] = edge
                if successor == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came_from[path[0].source])
                    return path
                following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its own component")


def test_the_packages_import_without_a_cycle() -> None:
    modules = modules_under(ROOT, PACKAGES)
    found = cycles(import_edges(modules, ROOT))
    report = "\n\n".join("\n".join(str(edge) for edge in cycle) for cycle in found)
    assert not found, f"{len(found)} import cycle(s):\n\n{report}"


def test_a_cycle_closed_by_a_deferred_or_type_only_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import B\n")
    (tmp_path / "pkg" / "b.py").write_text("def b():\n    from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    (tmp_path / "pkg" / "d.py").write_text("import pkg.a\n")

    found = cycles(import_edges(modules_under(tmp_path, ("pkg",)), tmp_path))

    assert [[(edge.source, edge.target, edge.kind) for edge in cycle] for cycle in found] == [
        [("pkg.a", "pkg.b", "module"), ("pkg.b", "pkg.c", "function"), ("pkg.c", "pkg.a", "type-checking")]
    ]
