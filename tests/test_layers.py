"""The layers of docs/architecture.md, as the code has them: every import edge between vitbench's packages is one
the doc's table allows, and neither the table nor the code has a cycle between packages.

A package is a subpackage of vitbench or a top-level module (`env`, `record`, ...; `vitbench` is the package's own
__init__). An edge is every import of a module of another package, wherever the statement is (at the top or
inside a function: tests/test_import_cycles.import_graph), and every string constant naming a vitbench module (an
import by name: a "module:function" target, a preload list), except the registry's table of built-in plug-in
modules (how shared code reaches plug-ins by name without depending on them). The table is the one declaration of
the allowed edges: this test reads it from the doc.
"""

from __future__ import annotations

import ast
import functools
import re

import pytest

from test_import_cycles import PACKAGE, _executed, _module_name, cycles, import_graph

DOC = PACKAGE.parent / "docs" / "architecture.md"
MARKER = "<!-- allowed-imports:"
ROW = re.compile(r"^\|\s*`([\w.]+)`\s*\|(.*)\|\s*$")


def allowed_edges(text: str | None = None) -> dict[str, set[str]]:
    """The table after MARKER in docs/architecture.md: {package: the packages it may import}."""
    text = DOC.read_text() if text is None else text
    assert MARKER in text, f"{DOC.name}: no '{MARKER}' table"
    out: dict[str, set[str]] = {}
    for line in text.split(MARKER, 1)[1].splitlines()[1:]:
        if not line.startswith("|"):
            if out:
                break  # the table's end
            continue
        m = ROW.match(line)
        if m is None:
            continue  # the header and its rule
        name, targets = m.group(1), m.group(2).strip()
        assert name not in out, f"{DOC.name}: two rows for {name}"
        out[name] = set() if targets == "-" else {t.strip().strip("`") for t in targets.split(",")}
    return out


def package_of(module: str) -> str:
    """'vitbench.backends.torch.backend' -> 'backends'; 'vitbench.env' -> 'env'; 'vitbench' -> 'vitbench'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _plugin_modules() -> set[str]:
    from vitbench.registry import BUILTIN_MODULES

    return {m for mods in BUILTIN_MODULES.values() for m in mods}


def string_edges() -> dict[str, set[str]]:
    """{module: the vitbench modules its string constants name} (a "module:attr" target counts as its module;
    strings under `if TYPE_CHECKING:` never run); the registry's built-in plug-in table left out."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    plugins = _plugin_modules()
    out: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in _executed(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("vitbench."):
                target = node.value.partition(":")[0]
                if target in files and not (mod == "vitbench.registry" and target in plugins):
                    out[mod].add(target)
    return out


@functools.cache
def _module_edges() -> dict[str, frozenset[str]]:
    graph = import_graph()
    for mod, targets in string_edges().items():
        graph[mod] |= targets
    return {m: frozenset(ts) for m, ts in graph.items()}


def module_edges() -> dict[str, set[str]]:
    """{module: the vitbench modules it imports or names} (a fresh copy: a test may add to it)."""
    return {m: set(ts) for m, ts in _module_edges().items()}


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for src, targets in graph.items():
        out[package_of(src)] |= {package_of(t) for t in targets} - {package_of(src)}
    return out


def undeclared(graph: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """'src -> target (pkg -> pkg)' for each module edge between packages the table does not allow."""
    return sorted(f"{src} -> {t} ({package_of(src)} -> {package_of(t)})" for src, targets in graph.items()
                  for t in targets if package_of(t) != package_of(src)
                  and package_of(t) not in allowed.get(package_of(src), set()))


def test_the_table_has_one_row_per_package_and_names_only_packages():
    packages = set(package_graph(module_edges()))
    allowed = allowed_edges()
    assert set(allowed) == packages, (f"packages without a row: {sorted(packages - set(allowed))}; rows of no "
                                      f"package: {sorted(set(allowed) - packages)}")
    unknown = {f"{p} -> {t}" for p, ts in allowed.items() for t in ts if t not in packages or t == p}
    assert not unknown


def test_every_import_edge_between_packages_is_declared():
    bad = undeclared(module_edges(), allowed_edges())
    assert not bad, ("imports between packages that docs/architecture.md's table does not allow (move the code, "
                     "or add the edge to the table if the layering allows it):\n" + "\n".join(bad))


def test_the_declared_layers_have_no_cycle():
    assert cycles(allowed_edges()) == []


def test_no_cycle_between_packages():
    found = cycles(package_graph(module_edges()))
    assert not found, "package cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_edges_include_lazy_imports_and_module_names_in_strings():
    g = module_edges()
    # a function-level import only (inside with_budget), a "module:function" string and a preload list's string
    assert "vitbench.models.analytic" in g["vitbench.transfer.checkpoint"]
    assert "vitbench.measure.throughput" in g["vitbench.measure.group"]
    assert "vitbench.measure.peak" in g["vitbench.executors.local"]
    # the registry names its built-in plug-ins without depending on them
    assert not any(package_of(t) in {"backends", "tasks", "executors"} for t in g["vitbench.registry"])


@pytest.mark.parametrize("edge", [("vitbench.env", "vitbench.backends.spec"),  # the edge this issue removed
                                  ("vitbench.transfer.ops", "vitbench.backends.base"),
                                  ("vitbench.tasks.bench", "vitbench.report.views")])
def test_an_undeclared_edge_fails(edge):
    src, target = edge
    graph = module_edges()
    graph[src].add(target)
    assert undeclared(graph, allowed_edges()) == [f"{src} -> {target} ({package_of(src)} -> {package_of(target)})"]


def test_the_table_is_read_as_written():
    text = f"x\n{MARKER} -->\n| package | may import |\n|---|---|\n| `a` | - |\n| `b` | `a`, `c` |\n\n| `z` | `q` |\n"
    assert allowed_edges(text) == {"a": set(), "b": {"a", "c"}}
    with pytest.raises(AssertionError, match="two rows"):
        allowed_edges(f"{MARKER} -->\n| `a` | - |\n| `a` | `b` |\n")
