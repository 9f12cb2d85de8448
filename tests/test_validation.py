"""Predicted step times against published training runs (docs/validation.md).

The issue's target: mean absolute error under 10 % on measured step times, with one set of
efficiency constants for every run. Sources and assumptions per run are in
trainbudget/published/ (the records themselves are tested in tests/published/).
"""

from __future__ import annotations

import pytest

from clirun import cli, cli_json
from trainbudget.published import PUBLISHED_RUNS, get_run
from trainbudget.validation import (
    EXCLUDED,
    compare,
    compare_all,
    leave_one_out_errors,
    mean_absolute_error,
    measured_step_seconds,
    megatron_flops,
    plan_of,
    scored,
)


def test_every_run_is_a_consistent_layout():
    for run in PUBLISHED_RUNS:
        plan = plan_of(run)
        assert plan.n_gpus == run.n_gpus, run.id
        assert plan.global_batch == run.layout.global_batch, run.id


def test_mean_absolute_error_under_ten_percent():
    comparisons = scored(compare_all())
    assert len(comparisons) >= 20
    assert mean_absolute_error(comparisons) < 0.10


def test_leave_one_out_error_under_ten_percent():
    loo = leave_one_out_errors()
    assert sum(abs(e) for e in loo.values()) / len(loo) < 0.10


@pytest.mark.parametrize(
    "run",
    [r for r in PUBLISHED_RUNS if r.id not in EXCLUDED and not r.gpu.startswith("other:")],
    ids=lambda r: r.id,
)
def test_each_run_within_25_percent(run):
    c = compare(run)
    assert c is not None
    assert abs(c.error) < 0.25, f"{run.id}: {100 * c.error:+.1f} %"


def test_megatron_formula_reproduces_published_tflops():
    # Korthikanti 530B selective: 72Bslh^2(1 + s/6h + V/12lh) over 37.83 s on 280 A100s is
    # 174.9 TFLOP/s = 56.0 % of 312 (the Megatron-LM README's MFU for this run)
    run = get_run("korthikanti-530b-selective-sp")
    tflops = megatron_flops(run, 3) / (37.83 * 280) / 1e12
    assert tflops / 312 == pytest.approx(0.560, abs=0.0015)
    assert measured_step_seconds(run) == 37.83


def test_validate_command():
    j = cli_json("validate")
    assert j["scored"] >= 20 and j["mean_absolute_error"] < 0.10
    code, out, _ = cli("validate", "--markdown")
    assert code == 0 and out.startswith("| run |") and "mean absolute error" in out
