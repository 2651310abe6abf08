"""The package's shape: no import circles among the cookbook's modules.

Imports are read with ``ast`` from the source — those at the top of a module and those inside
functions alike (a deferred import still ties two modules together: each needs the other to be
understood, tested or changed).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cookbook"


def module_imports(path: Path) -> set[str]:
    """The cookbook modules that ``path`` imports (``from .x import``, ``from . import x``, ``import cookbook.x``,
    ``from cookbook import x``), anywhere in the file."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 or node.module == "cookbook" or (node.module or "").startswith("cookbook."):
                base = (node.module or "").removeprefix("cookbook").lstrip(".") if node.level == 0 else (node.module or "")
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import a, b
                    found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("cookbook."):
                    found.add(a.name.split(".")[1])
    return (found & modules) - {path.stem}


def import_graph() -> dict[str, set[str]]:
    return {p.stem: module_imports(p) for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__"}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_deferred_and_package_imports():
    graph = import_graph()
    assert "plan" in graph["dsconfig"]                      # top of the module
    assert "models" in graph["dsconfig"]                    # inside a function
    assert "hardware" in graph["launch"]


def test_no_import_circles_among_cookbook_modules():
    graph = import_graph()
    found = cycles(graph)
    detail = "; ".join(" ↔ ".join(c) + " (" + ", ".join(f"{a} imports {sorted(graph[a] & set(c))}" for a in c) + ")"
                       for c in found)
    assert not found, f"import circles: {detail}. Move what both need into the module its concern belongs to"
