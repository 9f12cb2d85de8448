"""`import trainbudget` stays light: the API loads on first use, so no torch, numpy or
matplotlib comes with the package (proved in a fresh interpreter: an earlier test here may
have imported them). Its time is measured in benchmarks/bench_cli.py, not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("torch", "numpy", "matplotlib")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True
    ).stdout
    return set(out.split())


def test_import_trainbudget_loads_no_heavy_package_and_not_the_api():
    loaded = _modules_after("import trainbudget")
    assert not [m for m in loaded if m.split(".")[0] in HEAVY]
    assert "trainbudget.api" not in loaded  # loaded on first use of tb.estimate / tb.plan


def test_a_one_gpu_estimate_from_python_needs_no_numpy_or_torch():
    loaded = _modules_after("import trainbudget as tb\ntb.estimate('llama-3-8b', tokens='1T')")
    assert "trainbudget.api" in loaded
    assert not [m for m in loaded if m.split(".")[0] in HEAVY]


def test_the_api_names_resolve_and_unknown_ones_fail_as_attributes_do():
    import pytest

    import trainbudget as tb

    assert tb.estimate.__module__ == "trainbudget.api.entry"
    assert {"estimate", "plan", "Estimate", "PlanResult"} <= set(dir(tb))
    with pytest.raises(AttributeError, match="no attribute 'estmate'"):
        _ = tb.estmate
