"""No import cycle among vitbench's modules.

The graph: one node per module (a package is its __init__); an edge from a module to every vitbench module it
imports, wherever the import statement is, at module level or inside a function: a lazy import is still a
dependency (it only moves the cycle from import time to call time, and it is the usual way a cycle is hidden), so
it counts. Imports under `if TYPE_CHECKING:` never run and make no edge. Importing `a.b.c` also runs `a` and `a.b`,
so it is an edge to each of them, except to a package the importing module is inside (already running).
Plug-ins loaded by name (vitbench.registry's module strings, entry points) are not imports and make no edge:
that is how shared code reaches the plug-ins without depending on them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vitbench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _executed(tree: ast.AST):
    """Every node, except what sits under `if TYPE_CHECKING:` (never run: an annotation's import)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _executed_all(child))
            continue
        yield node
        yield from _executed(node)


def _executed_all(node: ast.AST):
    yield node
    yield from _executed(node)


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}

    def add(src: str, target: str) -> None:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            implicit_parent = name != target and src.startswith(name + ".")  # already running: no edge
            if name in files and name != src and not implicit_parent:
                graph[src].add(name)

    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _executed(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(mod, a.name)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node, mod, is_package)
                submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
                for sub in submodules:  # `from pkg import submodule`: the package only runs as its parent
                    add(mod, sub)
                if len(submodules) < len(node.names):  # a name defined in `target` itself
                    add(mod, target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    import sys

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    g = import_graph()
    assert "vitbench.registry" in g["vitbench.models.families.plugin"]  # a module-level import
    assert "vitbench.insight.pictures" in g["vitbench.insight.result"]  # inside InspectResult.write_pictures
    assert "vitbench.insight.result" not in g["vitbench.insight.pictures"]  # under `if TYPE_CHECKING:` only


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
