"""Failure probability, MTBF, Young/Daly checkpoint intervals and goodput.

Published numbers: seed 004 (B-fail-128, B-fail-1000); Young 1974 and Daly 2006 closed forms;
Llama 3 (Dubey et al. 2024, arXiv 2407.21783, Sec. 3.3.4) as an order-of-magnitude check.
"""

from __future__ import annotations

import itertools
import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.reliability import (
    DAYS_PER_MONTH,
    checkpoint_write_seconds,
    daily_rate_from_period,
    daily_rate_linear,
    daly_interval_seconds,
    goodput,
    job_failure_probability,
    mtbf_seconds,
    young_interval_seconds,
)
from trainbudget.core.units import GB, SECONDS_PER_DAY, SECONDS_PER_HOUR, TB

# ---- seed 004 -----------------------------------------------------------------------------------


def test_B_fail_128() -> None:
    # 1 % per node, 128 nodes: 1 - 0.99^128
    assert job_failure_probability(128, 0.01) == pytest.approx(0.7237, abs=5e-5)
    assert round(job_failure_probability(128, 0.01) * 100, 2) == 72.37


def test_B_fail_1000() -> None:
    # "8 % of GPUs fail per month" -> per GPU-day. Compounded over 30 independent days:
    exact = daily_rate_from_period(0.08, DAYS_PER_MONTH)
    assert exact == pytest.approx(1 - 0.92 ** (1 / 30), rel=1e-12)
    assert exact == pytest.approx(0.002776, abs=5e-7)
    # the linear approximation 8 %/30 = 0.2667 %
    linear = daily_rate_linear(0.08, DAYS_PER_MONTH)
    assert linear == pytest.approx(0.08 / 30, rel=1e-12)
    # the seed's "0.27 %": the linear form rounds to it, the exact one truncates to it
    assert round(linear * 100, 2) == 0.27
    assert math.floor(exact * 1e4) / 100 == 0.27
    # "a 1000-GPU job fails within one day with 93 %": from the seed's rounded 0.27 %
    assert round(job_failure_probability(1000, 0.0027) * 100, 2) == 93.30
    assert job_failure_probability(1000, 0.0027) == pytest.approx(0.93304, abs=1e-5)
    # from the unrounded rates: exact 93.8 %, linear 93.1 % (the seed's 93 % either way)
    assert job_failure_probability(1000, exact) == pytest.approx(0.9379, abs=1e-4)
    assert job_failure_probability(1000, linear) == pytest.approx(0.9308, abs=1e-4)


def test_daily_rate_compounds_back_to_the_period() -> None:
    p_day = daily_rate_from_period(0.08, 30)
    assert job_failure_probability(30, p_day) == pytest.approx(0.08, rel=1e-12)


# ---- MTBF ---------------------------------------------------------------------------------------


def test_mtbf_is_one_over_n_lambda() -> None:
    p = 0.001
    expected = SECONDS_PER_DAY / (100 * -math.log(1 - p))
    assert mtbf_seconds(100, p) == pytest.approx(expected, rel=1e-12)
    # small p: close to the simple 1 / (n p) days
    assert mtbf_seconds(100, p) == pytest.approx(SECONDS_PER_DAY / (100 * p), rel=1e-3)


def test_mtbf_poisson_matches_daily_probability() -> None:
    # P(no interruption in a day) = exp(-day / MTBF) = (1 - p)^n
    n, p = 1000, 0.0027
    assert math.exp(-SECONDS_PER_DAY / mtbf_seconds(n, p)) == pytest.approx((1 - p) ** n)


def test_mtbf_zero_rate_is_infinite() -> None:
    assert mtbf_seconds(8, 0.0) == math.inf


def test_llama3_order_of_magnitude() -> None:
    # Llama 3: 419 unexpected interruptions in 54 days on 16,384 H100s
    n_gpus, days, failures = 16384, 54, 419
    p_day = failures / (days * n_gpus)
    assert p_day == pytest.approx(4.74e-4, rel=1e-3)
    mtbf_hours = mtbf_seconds(n_gpus, p_day) / SECONDS_PER_HOUR
    assert mtbf_hours == pytest.approx(days * 24 / failures, rel=1e-3)  # 3.09 h
    assert mtbf_hours == pytest.approx(3.1, abs=0.05)
    # with a 10-minute restart and a checkpoint written in a minute, goodput is ~90 %
    # (Llama 3: "higher than 90 % effective training time")
    g = goodput(
        useful_seconds=days * SECONDS_PER_DAY,
        mtbf_seconds=mtbf_hours * SECONDS_PER_HOUR,
        checkpoint_seconds=60,
        restart_seconds=600,
    )
    assert 0.8 < g.goodput < 0.95
    assert g.expected_failures == pytest.approx(failures / g.goodput, rel=1e-3)


# ---- checkpoint write time and intervals ------------------------------------------------------


def test_checkpoint_write_seconds() -> None:
    assert checkpoint_write_seconds(80 * GB, 10 * GB) == 8.0
    assert checkpoint_write_seconds(0, 10 * GB) == 0.0


def test_young_known_value() -> None:
    # delta = 60 s, M = 1 day: sqrt(2 x 60 x 86400) = 3219.9 s
    assert young_interval_seconds(60, 86400) == pytest.approx(3219.94, abs=0.01)


def test_daly_known_value() -> None:
    delta, m = 60.0, 86400.0
    x = delta / (2 * m)
    expected = math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    assert daly_interval_seconds(delta, m) == pytest.approx(expected, rel=1e-12)
    assert daly_interval_seconds(delta, m) == pytest.approx(3180.0, abs=0.5)


def test_daly_is_young_for_small_delta() -> None:
    # relative gap ~ delta / sqrt(2 delta M) -> 0
    assert daly_interval_seconds(1e-3, 1e6) == pytest.approx(
        young_interval_seconds(1e-3, 1e6), rel=1e-4
    )
    assert daly_interval_seconds(60, 86400) < young_interval_seconds(60, 86400)


def test_daly_beyond_2m_is_m() -> None:
    assert daly_interval_seconds(300, 100) == 100
    assert daly_interval_seconds(200, 100) == 100
    # just below delta = 2M the series gives 2M (1 + 1/3 + 1/9) - 2M = 8M/9: Daly's piecewise
    # form steps from 8M/9 to M there
    assert daly_interval_seconds(200 - 1e-9, 100) == pytest.approx(800 / 9, rel=1e-6)


def test_intervals_go_to_zero_with_delta() -> None:
    for interval in (young_interval_seconds, daly_interval_seconds):
        assert interval(0, 86400) == 0
        assert interval(1e-9, 86400) < 0.02


@pytest.mark.parametrize("interval", [young_interval_seconds, daly_interval_seconds])
def test_interval_grows_with_delta_and_mtbf(interval) -> None:
    deltas = [1, 10, 60, 600]
    assert all(interval(a, 86400) < interval(b, 86400) for a, b in itertools.pairwise(deltas))
    mtbfs = [3600, 86400, 10 * 86400]
    assert all(interval(60, a) < interval(60, b) for a, b in itertools.pairwise(mtbfs))


# ---- goodput ------------------------------------------------------------------------------------


def test_goodput_formula() -> None:
    t, m, delta, r = 30 * SECONDS_PER_DAY, 8 * 3600.0, 100.0, 600.0
    g = goodput(useful_seconds=t, mtbf_seconds=m, checkpoint_seconds=delta, restart_seconds=r)
    tau = daly_interval_seconds(delta, m)
    assert g.interval_seconds == tau
    assert g.checkpoint_overhead_fraction == pytest.approx(delta / tau)
    assert g.waste_per_failure_seconds == pytest.approx(tau / 2 + r)
    wall = t * (1 + delta / tau) / (1 - (tau / 2 + r) / m)
    assert g.wall_clock_seconds == pytest.approx(wall, rel=1e-12)
    assert g.goodput == pytest.approx(t / wall, rel=1e-12)
    assert g.expected_failures == pytest.approx(wall / m, rel=1e-12)


def test_daly_interval_is_near_the_goodput_optimum() -> None:
    m, delta = 86400.0, 60.0

    def gp(tau: float) -> float:
        return goodput(
            useful_seconds=1.0,
            mtbf_seconds=m,
            checkpoint_seconds=delta,
            restart_seconds=0,
            interval_seconds=tau,
        ).goodput

    best = gp(daly_interval_seconds(delta, m))
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert gp(factor * daly_interval_seconds(delta, m)) < best


def test_goodput_tends_to_one_as_mtbf_grows() -> None:
    values = [
        goodput(
            useful_seconds=1.0, mtbf_seconds=m, checkpoint_seconds=60.0, restart_seconds=600.0
        ).goodput
        for m in (1e4, 1e6, 1e8, 1e12)
    ]
    assert all(a < b for a, b in itertools.pairwise(values))
    assert values[-1] == pytest.approx(1.0, abs=1e-4)


def test_goodput_falls_with_more_gpus_and_slower_writes() -> None:
    def gp(n_gpus: int, write_bytes_per_second: float) -> float:
        m = mtbf_seconds(n_gpus, 0.001)
        delta = checkpoint_write_seconds(1 * TB, write_bytes_per_second)
        return goodput(useful_seconds=1.0, mtbf_seconds=m, checkpoint_seconds=delta).goodput

    assert gp(256, 10 * GB) > gp(1024, 10 * GB) > gp(4096, 10 * GB)
    assert gp(1024, 100 * GB) > gp(1024, 10 * GB) > gp(1024, 1 * GB)


def test_goodput_with_free_checkpoints_is_one_minus_restart_share() -> None:
    g = goodput(useful_seconds=100.0, mtbf_seconds=3600.0, checkpoint_seconds=0.0)
    assert g.interval_seconds == 0
    assert g.checkpoint_overhead_fraction == 0
    assert g.goodput == pytest.approx(1 - 600 / 3600)


def test_goodput_wall_clock_scales_with_useful_time() -> None:
    def wall(t: float) -> float:
        return goodput(
            useful_seconds=t, mtbf_seconds=1e5, checkpoint_seconds=30.0
        ).wall_clock_seconds

    assert wall(2e6) == pytest.approx(2 * wall(1e6))
    assert wall(0.0) == 0


def test_goodput_rejects_mtbf_shorter_than_restart() -> None:
    with pytest.raises(SpecError) as err:
        goodput(useful_seconds=1.0, mtbf_seconds=500.0, checkpoint_seconds=1.0)
    assert err.value.field == "mtbf_seconds"


# ---- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: job_failure_probability(0, 0.01), "n_units"),
        (lambda: job_failure_probability(1.5, 0.01), "n_units"),
        (lambda: job_failure_probability(True, 0.01), "n_units"),
        (lambda: job_failure_probability(8, 1.0), "p_unit"),
        (lambda: job_failure_probability(8, -0.1), "p_unit"),
        (lambda: job_failure_probability(8, math.nan), "p_unit"),
        (lambda: daily_rate_from_period(1.0), "p_period"),
        (lambda: daily_rate_from_period(0.08, 0), "days_in_period"),
        (lambda: daily_rate_linear(0.08, -30), "days_in_period"),
        (lambda: mtbf_seconds(-1, 0.01), "n_gpus"),
        (lambda: mtbf_seconds(8, 1.5), "gpu_failure_rate_per_day"),
        (lambda: checkpoint_write_seconds(-1, 1e9), "checkpoint_bytes"),
        (lambda: checkpoint_write_seconds(1e9, 0), "write_bytes_per_second"),
        (lambda: checkpoint_write_seconds(1e9, math.inf), "write_bytes_per_second"),
        (lambda: young_interval_seconds(-1, 100), "checkpoint_seconds"),
        (lambda: daly_interval_seconds(1, 0), "mtbf_seconds"),
        (lambda: daly_interval_seconds(1, math.inf), "mtbf_seconds"),
        (
            lambda: goodput(useful_seconds=-1, mtbf_seconds=1e5, checkpoint_seconds=1),
            "useful_seconds",
        ),
        (
            lambda: goodput(
                useful_seconds=1, mtbf_seconds=1e5, checkpoint_seconds=1, restart_seconds=-1
            ),
            "restart_seconds",
        ),
        (
            lambda: goodput(
                useful_seconds=1, mtbf_seconds=1e5, checkpoint_seconds=1, interval_seconds=0
            ),
            "interval_seconds",
        ),
    ],
)
def test_bad_inputs_name_the_field(call, field: str) -> None:
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field
    assert field in str(err.value)
