"""Recompute the device fits rule's margins by framework row and write them to
src/trainbudget/core/parallel/fits_margins.json, the table every `estimate`, `plan`, `fit`,
`report` and `serve` verdict reads (core.parallel.fits.framework_margin). Run it after a change
to the memory model, the framework rows or the published memory rows;
tests/core/parallel/test_fits_margins.py fails until then.

For each framework row with at least uncertainty.MIN_RUNS memory rows, the margin is the
fits.MARGIN_PERCENTILE of measured / predicted peak over them (never below 1:
fits.credited_margin); every other framework takes that
percentile over all memory rows ('all'). It is the selection `uncertainty.device_rule` makes for
a run in `validate` (there with the run's own source left out; a plan has none to leave out).

    python scripts/refresh_fits_margins.py          # rewrites the file
    python scripts/refresh_fits_margins.py --check  # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainbudget.core.parallel.fits import MARGIN_PERCENTILE, MARGINS_FILE, credited_margin
from trainbudget.uncertainty import MIN_RUNS, MemoryRatio, computed_memory_ratios, percentile

REFRESH_COMMAND = "python scripts/refresh_fits_margins.py"


def margin_table(rows: list[MemoryRatio] | tuple[MemoryRatio, ...]) -> dict:
    """{"all": {...}, "frameworks": {row: {...}}}, each {"margin", "n_runs"}, from `rows`."""

    def entry(chosen: list[MemoryRatio]) -> dict:
        ratios = [r.ratio for r in chosen]
        margin = credited_margin(percentile(ratios, MARGIN_PERCENTILE))
        return {"margin": round(margin, 6), "n_runs": len(ratios)}

    names = sorted({r.framework_row for r in rows})
    by_row = {n: [r for r in rows if r.framework_row == n] for n in names}
    return {
        "all": entry(list(rows)),
        "frameworks": {n: entry(same) for n, same in by_row.items() if len(same) >= MIN_RUNS},
    }


def table_json(table: dict) -> str:
    """The text of MARGINS_FILE for `table`."""
    head = {
        "generated_by": REFRESH_COMMAND,
        "what": f"the {MARGIN_PERCENTILE:g}th percentile of measured / predicted peak memory "
        "over the published memory rows of each framework row with enough of them, and over "
        "all rows ('all', for every other framework), never below 1: the device fits rule's "
        "margin; "
        "regenerate, do not edit",
    }
    return json.dumps({**head, **table}, indent=1) + "\n"


def computed_json() -> str:
    """MARGINS_FILE's text as the code and the published runs give it now."""
    return table_json(margin_table(computed_memory_ratios()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    check = parser.parse_args().check
    fresh = computed_json()
    path = Path(MARGINS_FILE)
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if check:
        if fresh != current:
            print(f"{MARGINS_FILE} is out of date: run {REFRESH_COMMAND}")
            return 1
        print(f"{MARGINS_FILE} is up to date")
        return 0
    Path(MARGINS_FILE).write_text(fresh, encoding="utf-8")
    print(f"wrote {MARGINS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
