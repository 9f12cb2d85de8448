"""`trainbudget reliability`: the seed 004 failure numbers, the --json contract, text output and
one-line errors for malformed input."""

from __future__ import annotations

import json
import math

import pytest

from clirun import cli, cli_json
from trainbudget.core.parallel.reliability import (
    ASSUMPTIONS,
    daily_rate_from_period,
    daly_interval_seconds,
    goodput,
    mtbf_seconds,
)
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

BASE = ("--checkpoint-bytes", "80GB", "--write-bytes-per-second", "10GB/s")
R = ("reliability", "--gpus", "1000", "--gpu-failure-rate-per-day", "0.0027", *BASE)

KEYS = {
    "job_failure_probability_per_day",
    "mtbf_hours",
    "checkpoint_write_seconds",
    "optimal_checkpoint_interval_seconds",
    "young_interval_seconds",
    "goodput",
    "expected_failures",
    "wall_clock_days",
    "inputs",
    "assumptions",
}


def test_B_fail_128() -> None:
    # 1 % per node per step on 128 nodes: the per-day probability field is 1 - (1 - p)^n
    out = cli_json("reliability", "--gpus", "128", "--gpu-failure-rate-per-day", "0.01", *BASE)
    assert round(out["job_failure_probability_per_day"] * 100, 2) == 72.37


def test_B_fail_1000() -> None:
    # the seed's rounded 0.27 % per GPU-day on 1000 GPUs: 93.3 % per job-day
    out = cli_json(*R)
    assert round(out["job_failure_probability_per_day"] * 100, 2) == 93.30
    assert cli_json(*R[:4], "0.27%", *BASE) == out
    # "8 % per month": the CLI compounds over 30 days (0.2776 %/day), giving 93.8 % per job-day
    monthly = cli_json("reliability", "--gpus", "1000", "--failure-rate-per-month", "8%", *BASE)
    assert monthly["inputs"]["gpu_failure_rate_per_day"] == pytest.approx(
        1 - 0.92 ** (1 / 30), rel=1e-12
    )
    assert monthly["inputs"]["failure_rate_per_month"] == 0.08
    assert monthly["job_failure_probability_per_day"] == pytest.approx(0.9379, abs=1e-4)


def test_json_contract() -> None:
    out = cli_json(*R, "--train-days", "30")
    assert set(out) == KEYS
    assert out["checkpoint_write_seconds"] == 8.0
    assert out["young_interval_seconds"] == pytest.approx(
        math.sqrt(2 * 8 * out["mtbf_hours"] * SECONDS_PER_HOUR)
    )
    mtbf = mtbf_seconds(1000, 0.0027)
    assert out["mtbf_hours"] == pytest.approx(mtbf / SECONDS_PER_HOUR)
    assert out["optimal_checkpoint_interval_seconds"] == pytest.approx(
        daly_interval_seconds(8.0, mtbf)
    )
    g = goodput(useful_seconds=30 * SECONDS_PER_DAY, mtbf_seconds=mtbf, checkpoint_seconds=8.0)
    assert out["goodput"] == pytest.approx(g.goodput)
    assert out["wall_clock_days"] == pytest.approx(30 / g.goodput)
    assert out["expected_failures"] == pytest.approx(g.expected_failures)
    assert out["inputs"] == {
        "gpus": 1000,
        "gpu_failure_rate_per_day": 0.0027,
        "failure_rate_per_month": None,
        "checkpoint_bytes": 80e9,
        "write_bytes_per_second": 10e9,
        "restart_seconds": 600.0,
        "train_days": 30.0,
    }
    # the reliability model states its assumptions once; the command lists them as they are
    assert out["assumptions"] == list(ASSUMPTIONS) and all(out["assumptions"])


def test_without_train_days_no_wall_clock() -> None:
    out = cli_json(*R)
    assert out["wall_clock_days"] is None
    assert out["expected_failures"] is None
    assert 0 < out["goodput"] < 1


def test_restart_time_lowers_goodput() -> None:
    fast = cli_json(*R, "--restart-seconds", "60")["goodput"]
    slow = cli_json(*R, "--restart-seconds", "1800")["goodput"]
    assert fast > slow


def test_monthly_rate_equals_its_daily_equivalent() -> None:
    p_day = daily_rate_from_period(0.05, 30)
    a = cli_json("reliability", "--gpus", "512", "--failure-rate-per-month", "0.05", *BASE)
    b = cli_json("reliability", "--gpus", "512", "--gpu-failure-rate-per-day", repr(p_day), *BASE)
    assert a["goodput"] == pytest.approx(b["goodput"], rel=1e-12)
    assert a["mtbf_hours"] == pytest.approx(b["mtbf_hours"], rel=1e-12)


def test_llama3_scale_via_cli() -> None:
    # 16,384 GPUs, 419 unexpected interruptions in 54 days: MTBF about 3.1 hours
    rate = 419 / (54 * 16384)
    out = cli_json(
        "reliability", "--gpus", "16384", "--gpu-failure-rate-per-day", repr(rate), *BASE
    )
    assert out["mtbf_hours"] == pytest.approx(3.1, abs=0.05)


def test_json_is_strict() -> None:
    code, out, err = cli(*R, "--train-days", "90", "--json")
    assert code == 0, err

    def no_constants(name: str) -> float:
        raise ValueError(name)

    json.loads(out, parse_constant=no_constants)


def test_text_output() -> None:
    code, out, err = cli(*R, "--train-days", "30")
    assert code == 0, err
    assert err == ""
    assert "93.30 %" in out
    assert "MTBF" in out
    assert "Daly" in out and "Young" in out
    assert "goodput" in out
    assert "wall-clock days" in out
    assert 3 <= len(out.splitlines()) <= 6


def test_help_lists_options() -> None:
    code, out, err = cli("reliability", "--help")
    assert code == 0, err
    for option in (
        "--gpus",
        "--gpu-failure-rate-per-day",
        "--failure-rate-per-month",
        "--checkpoint-bytes",
        "--write-bytes-per-second",
        "--restart-seconds",
        "--train-days",
        "--json",
    ):
        assert option in out, option


# ---- malformed input: exit 2, one stderr line naming the field ----------------------------------


def opt(name: str) -> tuple[str, str]:
    """An option's two spellings in an error: `--write-bytes-per-second` or its field name."""
    return (f"--{name}", name.replace("-", "_"))


def _replace(option: str, value: str) -> tuple[str, ...]:
    argv = list(R)
    argv[argv.index(option) + 1] = value
    return tuple(argv)


P_MONTH = ("reliability", "--gpus", "8", "--failure-rate-per-month")
BAD = [
    ("gpus-zero", _replace("--gpus", "0"), opt("gpus")),
    ("gpus-negative", _replace("--gpus", "-4"), opt("gpus")),
    ("gpus-fraction", _replace("--gpus", "2.5"), opt("gpus")),
    ("gpus-word", _replace("--gpus", "many"), opt("gpus")),
    ("rate-one", _replace("--gpu-failure-rate-per-day", "1"), opt("gpu-failure-rate-per-day")),
    ("rate-zero", _replace("--gpu-failure-rate-per-day", "0"), opt("gpu-failure-rate-per-day")),
    (
        "rate-negative",
        _replace("--gpu-failure-rate-per-day", "-0.1"),
        opt("gpu-failure-rate-per-day"),
    ),
    ("rate-word", _replace("--gpu-failure-rate-per-day", "rare"), opt("gpu-failure-rate-per-day")),
    ("rate-nan", _replace("--gpu-failure-rate-per-day", "nan"), opt("gpu-failure-rate-per-day")),
    (
        "rate-percent-over",
        _replace("--gpu-failure-rate-per-day", "150%"),
        opt("gpu-failure-rate-per-day"),
    ),
    ("month-one", (*P_MONTH, "1.0", *BASE), opt("failure-rate-per-month")),
    ("month-word", (*P_MONTH, "x", *BASE), opt("failure-rate-per-month")),
    (
        "both-rates",
        (*R, "--failure-rate-per-month", "0.08"),
        "--failure-rate-per-month",
    ),
    ("neither-rate", ("reliability", "--gpus", "8", *BASE), "--gpu-failure-rate-per-day"),
    ("bytes-word", _replace("--checkpoint-bytes", "big"), opt("checkpoint-bytes")),
    ("bytes-negative", _replace("--checkpoint-bytes", "-80GB"), opt("checkpoint-bytes")),
    ("bytes-bandwidth", _replace("--checkpoint-bytes", "80GB/s"), opt("checkpoint-bytes")),
    ("bw-zero", _replace("--write-bytes-per-second", "0GB/s"), opt("write-bytes-per-second")),
    ("bw-bytes", _replace("--write-bytes-per-second", "10GB"), opt("write-bytes-per-second")),
    ("bw-word", _replace("--write-bytes-per-second", "fast"), opt("write-bytes-per-second")),
    ("restart-negative", (*R, "--restart-seconds", "-5"), opt("restart-seconds")),
    ("restart-word", (*R, "--restart-seconds", "soon"), opt("restart-seconds")),
    ("train-days-zero", (*R, "--train-days", "0"), opt("train-days")),
    ("train-days-word", (*R, "--train-days", "long"), opt("train-days")),
    ("missing-gpus", ("reliability", "--gpu-failure-rate-per-day", "0.01", *BASE), "--gpus"),
    (
        "missing-bytes",
        ("reliability", "--gpus", "8", "--gpu-failure-rate-per-day", "0.01"),
        "--checkpoint-bytes",
    ),
    (
        "failures-outpace-restarts",
        _replace("--gpus", "10000000"),
        ("mtbf", "restart_seconds"),
    ),
]


@pytest.mark.parametrize(("argv", "needle"), [pytest.param(a, n, id=i) for i, a, n in BAD])
def test_malformed_input_exits_2_with_one_line(
    argv: tuple[str, ...], needle: str | tuple[str, ...]
) -> None:
    code, out, err = cli(*argv)
    assert code == 2, f"exit {code}; stdout={out!r} stderr={err!r}"
    assert out == ""
    assert "Traceback" not in err
    line = err.rstrip("\n")
    assert line and "\n" not in line, err
    assert line.startswith("trainbudget reliability"), line
    spellings = needle if isinstance(needle, tuple) else (needle,)
    assert any(s in line for s in spellings), f"none of {spellings} in {line!r}"
