import sys
from pathlib import Path

# make tests/clirun.py importable as `clirun` without installing the tests as a package
sys.path.insert(0, str(Path(__file__).parent))
