"""Folders are rooms (STYLE.md point 13, issue 24): no two modules import each other, directly or
through others, and no folder holds more modules than a newcomer can take in at once.

The import graph is test_layers.py's (every module of src/trainbudget parsed with ast, nothing
executed). Every import counts: at the top of a module, inside a function, and under
`if TYPE_CHECKING:`. A lazy or annotation-only import still ties the two modules together (the
reader of one must read the other, and moving one breaks the other), so a circle through one is
a circle. A child module's implicit load of its parent packages is not an edge: Python
initialises the parents first, and every `__init__` here holds a docstring at most, or loads on
first use (trainbudget.__getattr__), so nothing can come back round through it.
"""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from test_layers import PACKAGE, SRC, all_modules, edges

MAX_MODULES_PER_FOLDER = 15
"""Issue 24: "No folder holds more than ~15 modules" (STYLE.md point 13: "about a dozen modules
at most; more means two concerns sharing a room"). Every .py file counts, `__init__.py` too."""


def module_graph(found: dict[str, set[str]]) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports, itself left out."""
    return {m: {t for t in imported if t in found and t != m} for m, imported in found.items()}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, first module repeated at the end, or None."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as err:
        return list(reversed(err.args[1]))  # graphlib lists it importer-last
    return None


def test_no_module_imports_itself_back_through_others() -> None:
    found = circle(module_graph(edges()))
    assert found is None, "modules that import each other: " + " -> ".join(found)


def test_the_check_finds_a_circle_through_a_lazy_import() -> None:
    # run imports comm_count at the top; comm_count imports run inside a function (the circle
    # issue 24 found in train/, before comm.json's document moved to train.summary)
    run, count, errors = "trainbudget.train.run", "trainbudget.train.observe.comm_count", "x"
    found = circle(module_graph({run: {count, errors}, count: {run}, errors: set()}))
    assert found is not None and found[0] == found[-1]
    assert set(found) == {run, count}
    assert circle({"a": {"b"}, "b": set()}) is None


def folder_sizes() -> dict[str, int]:
    """Each folder under src/trainbudget, as a path from src/, with its number of .py files."""
    sizes: dict[str, int] = {}
    for path in all_modules().values():
        folder = path.parent.relative_to(SRC).as_posix()
        sizes[folder] = sizes.get(folder, 0) + 1
    return sizes


def test_no_folder_holds_more_than_a_room_of_modules() -> None:
    sizes = folder_sizes()
    assert f"{PACKAGE}/train" in sizes and f"{PACKAGE}/core/parallel" in sizes
    crowded = {f: n for f, n in sorted(sizes.items()) if n > MAX_MODULES_PER_FOLDER}
    assert not crowded, (
        f"folders with more than {MAX_MODULES_PER_FOLDER} modules (split each into rooms, "
        f"with a row in tests/test_layers.py): {crowded}"
    )
