"""The core's modules import one way (STYLE.md point 13): no module imports another that
imports it back, directly or through others. Imports inside functions count too (a lazy
import still ties the two modules together), so the source is parsed, not run."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _core_imports() -> dict[str, set[str]]:
    """core module -> the core modules it imports (`from a.b import c` names a.b.c when c is a
    module, else a.b)."""
    paths = {
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (SRC / "trainbudget" / "core").rglob("*.py")
    }
    graph = {}
    for module, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in paths else node.module)
        graph[module] = {m for m in found if m in paths and m != module}
    return graph


def test_core_modules_import_one_way():
    try:
        TopologicalSorter(_core_imports()).prepare()
    except CycleError as err:
        raise AssertionError(f"modules that import each other: {err.args[1]}") from None


def test_the_planner_is_imported_by_its_search_not_the_reverse():
    graph = _core_imports()
    planner = "trainbudget.core.parallel.search.planner"
    search = "trainbudget.core.parallel.search.planner_fast"
    assert planner in graph[search]
    assert search not in graph[planner]
