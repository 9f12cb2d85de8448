import sys
from pathlib import Path

import pytest

# make tests/report/page_check.py importable by its name (tests/synthetic_runs.py already is)
sys.path.insert(0, str(Path(__file__).parent))

from synthetic_runs import write_run


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "synthetic")
