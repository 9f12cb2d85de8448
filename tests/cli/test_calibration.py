"""--calibration: a device's measured efficiencies (trainbudget bench --save-calibration)
replace the defaults in plan and in estimate's plan mode."""

from __future__ import annotations

import json

import pytest

from clirun import cli, cli_json

PLAN = (
    "plan",
    "--model",
    "llama-2-7b",
    "--gpus",
    "64",
    "--global-batch",
    "256",
    "--seq-len",
    "4096",
    "--top",
    "1",
)


def _calibration(tmp_path, **over) -> str:
    doc = {
        "format": "trainbudget-calibration",
        "version": 1,
        "device_name": "NVIDIA H100 80GB HBM3",
        "catalog_key": "h100-sxm",
        "matmul_fraction_of_peak": {"bf16": 0.5},
        "hbm_fraction_of_peak": 0.9,
        "best_flops_per_second": {"bf16": 4.9e14},
        "bandwidth_bytes_per_second": 3.0e12,
        **over,
    }
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_plan_uses_the_measured_matmul_efficiency(tmp_path):
    default = cli_json(*PLAN)["plans"][0]
    calibrated = cli_json(*PLAN, "--calibration", _calibration(tmp_path))["plans"][0]
    # a matmul efficiency of 0.5 instead of the default 0.7 makes every step slower
    assert calibrated["step_seconds"] > default["step_seconds"]


def test_the_matmul_fraction_of_the_runs_compute_dtype_is_used(tmp_path):
    # an fp32 run takes the fp32 measurement; a file without one is refused by name, not
    # silently calibrated with bf16's fraction
    both = _calibration(tmp_path, matmul_fraction_of_peak={"bf16": 0.5, "fp32": 0.9})
    fp32 = (*PLAN, "--precision", "fp32", "--calibration")
    fast = cli_json(*fp32, both)["plans"][0]["step_seconds"]
    slow_file = _calibration(tmp_path, matmul_fraction_of_peak={"bf16": 0.9, "fp32": 0.5})
    assert cli_json(*fp32, slow_file)["plans"][0]["step_seconds"] > fast
    code, _, err = cli(*fp32, _calibration(tmp_path))
    assert code == 2 and "has no fp32 entry" in err


def test_estimate_plan_mode_uses_it_too(tmp_path):
    args = (
        "estimate",
        "--model",
        "llama-2-7b",
        "--gpus",
        "8",
        "--zero",
        "1",
        "--global-batch",
        "32",
        "--seq-len",
        "4096",
    )
    assert (
        cli_json(*args, "--calibration", _calibration(tmp_path))["step_seconds"]
        > cli_json(*args)["step_seconds"]
    )


@pytest.mark.parametrize(
    "extra, needle",
    [
        (("--gpu", "a100-80gb"), "not on a100-80gb"),
        (("--within-days", "10", "--tokens", "1T", "--prices", "2"), "--calibration"),
    ],
)
def test_calibration_misuse_is_one_line_exit_2(tmp_path, extra, needle):
    code, out, err = cli(*PLAN, "--calibration", _calibration(tmp_path), *extra)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_broken_calibration_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = cli(*PLAN, "--calibration", str(bad))
    assert code == 2 and "calibration" in err and len(err.strip().splitlines()) == 1
