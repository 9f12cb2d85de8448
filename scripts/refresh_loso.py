"""Recompute the leave-one-source-out ratios of the published runs and write them to
src/trainbudget/loso_errors.json, the table `uncertainty.published_errors` reads (every
`estimate` and `plan` range comes from it). Run it after a change to the step-time model, the
published runs or validation's exclusions; tests/test_uncertainty.py fails until then.

    python scripts/refresh_loso.py          # rewrites the file
    python scripts/refresh_loso.py --check  # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainbudget import uncertainty


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    check = parser.parse_args().check
    errors = uncertainty.computed_errors()
    fresh = uncertainty.errors_to_json(errors, uncertainty.computed_memory_ratios())
    path = Path(uncertainty.LOSO_FILE)
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if check:
        if fresh != current:
            print(f"{path} is out of date: run {uncertainty.REFRESH_COMMAND}")
            return 1
        print(f"{path} is up to date")
        return 0
    path.write_text(fresh, encoding="utf-8")
    print(f"wrote {path} ({len(errors)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
