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
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="needs PyTorch (not installed)")
    for item in items:
        if item.get_closest_marker("torch") is not None:
            item.add_marker(skip)
