"""The code's shape: no two modules of the app import each other, directly or round a circle.

Imports are read from the source (``ast``), so the check sees every module, imported by a test or not.
An import under ``if TYPE_CHECKING:`` counts for the modules at the root (a reader following a type
follows it too); the server package's workers name their ``Library`` only for type checkers, which is no
circle at run time, so there only run-time imports count.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_names() -> dict[str, Path]:
    modules = {path.stem: path for path in ROOT.glob("*.py")}
    modules |= {f"server.{path.stem}": path for path in (ROOT / "server").glob("*.py")}
    return modules


def _type_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            lines |= {inner.lineno for inner in ast.walk(node) if isinstance(inner, (ast.Import, ast.ImportFrom))}
    return lines


@lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """Each module of the app -> the modules of the app it imports."""
    modules = _module_names()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_only(tree) if name.startswith("server.") else set()
        imported = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
                continue
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif node.module and node.level == 0:
                imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = imported & modules.keys() - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (strongly connected, more than one)."""
    found, reach = [], {}
    for start in graph:  # the graph is small: each module's reach by a plain walk
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        reach[start] = seen
    for module in sorted(graph):
        group = sorted(m for m in graph if m == module or (m in reach[module] and module in reach[m]))
        if len(group) > 1 and group not in found:
            found.append(group)
    return found


def test_circles_finds_a_circle_of_three():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_app_imports_round_a_circle():
    assert circles(import_graph()) == []


def test_the_records_module_imports_nothing_of_the_app():
    assert import_graph()["records"] == set()
