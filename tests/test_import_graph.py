"""No import circles in distvlog: the graph of which module imports which, built from the source (imports at
the top, inside functions and under `if TYPE_CHECKING:` alike: a circle of type hints still couples the modules),
has no cycle. A package's `__init__` counts as a module; `from . import x` is an edge to the submodule x."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "distvlog"


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported(module: str, is_package: bool, node: ast.AST, known: dict) -> list[str]:
    """The distvlog modules one import statement names (the deepest known module of each dotted name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: None if is_package else -1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" for alias in node.names]
    else:
        return []
    targets = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.append(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {
        module: {t for node in ast.walk(ast.parse(path.read_text())) for t in _imported(module, is_pkg, node, known)}
        for module, (path, is_pkg) in known.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "distvlog.autograd.engine" in graph["distvlog.autograd.graphviz"]
    assert "distvlog.tools.read._source" in graph["distvlog.tools.read._open"]


def test_distvlog_has_no_import_circle() -> None:
    assert cycles(import_graph()) == []
