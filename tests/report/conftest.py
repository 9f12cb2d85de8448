import sys
from pathlib import Path

import pytest

# make tests/report/synthetic_runs.py and page_check.py importable by their names
sys.path.insert(0, str(Path(__file__).parent))

from synthetic_runs import write_run


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "synthetic")
