"""The device fits rule's margin table (core/parallel/fits_margins.json) is the one the code
and the published runs give now, and the estimate path reads it without the published runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from trainbudget.core.parallel.fits import MARGIN_PERCENTILE, MARGINS_FILE
from trainbudget.uncertainty import MIN_RUNS, MemoryRatio, computed_memory_ratios, percentile

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "refresh_fits_margins.py"
_spec = importlib.util.spec_from_file_location("refresh_fits_margins", SCRIPT)
fits_margins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fits_margins)


def test_the_stored_table_is_the_computed_one() -> None:
    stale = f"fits_margins.json is stale: run {fits_margins.REFRESH_COMMAND}"
    assert Path(MARGINS_FILE).read_text(encoding="utf-8") == fits_margins.computed_json(), stale


def test_a_framework_gets_its_own_margin_only_with_enough_rows() -> None:
    rows = [MemoryRatio(f"a{i}", "s1", "megatron", 1.0 + i / 100) for i in range(MIN_RUNS)]
    rows += [MemoryRatio("b0", "s2", "deepspeed", 2.0)]
    table = fits_margins.margin_table(rows)
    assert set(table["frameworks"]) == {"megatron"}
    assert table["frameworks"]["megatron"] == {"margin": 1.02, "n_runs": MIN_RUNS}
    assert table["all"]["margin"] == percentile([r.ratio for r in rows], MARGIN_PERCENTILE)


def test_every_framework_margin_rests_on_published_memory_rows() -> None:
    rows = computed_memory_ratios()
    table = fits_margins.margin_table(rows)
    assert table["all"]["n_runs"] == len(rows) >= 40
    for name, entry in table["frameworks"].items():
        assert entry["n_runs"] == sum(r.framework_row == name for r in rows) >= MIN_RUNS


def test_the_estimate_path_imports_no_published_runs() -> None:
    """Each verdict reads the stored table: `estimate` loads no published run."""
    args = ["estimate", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-sxm", "--json"]
    command = [sys.executable, "-X", "importtime", "-m", "trainbudget", *args]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert not any(m.startswith("trainbudget.published") for m in imported)
    assert "trainbudget.core.parallel.fits" in imported
