import importlib.util
import sys
from pathlib import Path

import pytest

# make tests/clirun.py importable as `clirun` without installing the tests as a package
sys.path.insert(0, str(Path(__file__).parent))

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items) -> None:
    """The `torch` marker's promise (pyproject.toml): a marked test is skipped where PyTorch is
    not installed, so plain `pytest` passes on a torch-less install, not only `-m "not torch"`.
    (A module that imports torch at its top must still guard that import with importorskip:
    collection happens before this hook.)"""
    _group_the_trainer_runs(items)
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="needs PyTorch (not installed)")
    for item in items:
        if item.get_closest_marker("torch") is not None:
            item.add_marker(skip)


# Tests that start trainer processes (torchrun, gloo ranks, a whole README walk): under
# pytest-xdist (`-n 2 --dist loadgroup`, the README's test command) they run one after another
# on one worker, while the other worker takes the rest of the suite. Two multi-rank runs at
# once on CI's two cores would each wait on the other's ranks inside their collectives.
SERIAL_GROUP = "trainer-processes"
SERIAL_PATHS = ("tests/train/", "tests/test_readme_order.py", "tests/test_readme_newcomer.py")


def _group_the_trainer_runs(items) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
