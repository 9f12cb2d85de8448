"""Failures and checkpoints of the planned job, from `core.reliability`. Pure.

Besides the figures `trainbudget reliability` prints, the goodput at checkpoint intervals
around the optimum (each from `reliability.goodput` with that interval) shows how flat the
optimum is.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.reliability import goodput, reliability_report
from trainbudget.core.units import SECONDS_PER_DAY

CURVE_SPAN = 16.0
"""The goodput curve runs from optimum / CURVE_SPAN to optimum x CURVE_SPAN."""
CURVE_POINTS = 41


@dataclass(frozen=True, kw_only=True)
class Failures:
    n_gpus: int
    gpu_failure_rate_per_day: float
    job_failure_probability_per_day: float
    mtbf_seconds: float
    checkpoint_bytes: float
    write_bytes_per_second: float
    checkpoint_write_seconds: float
    restart_seconds: float
    daly_interval_seconds: float
    """The optimum interval used (Daly 2006)."""
    young_interval_seconds: float
    goodput: float
    checkpoint_overhead_fraction: float
    waste_per_failure_seconds: float
    useful_days: float
    """Failure-free training days (the plan's answer)."""
    wall_clock_days: float
    expected_failures: float
    goodput_curve: tuple[tuple[float, float], ...]
    """(checkpoint interval seconds, goodput) around the optimum."""


def failures(
    *,
    n_gpus: int,
    gpu_failure_rate_per_day: float,
    checkpoint_bytes: float,
    write_bytes_per_second: float,
    restart_seconds: float,
    useful_seconds: float,
) -> Failures:
    r = reliability_report(
        n_gpus=n_gpus,
        gpu_failure_rate_per_day=gpu_failure_rate_per_day,
        checkpoint_bytes=checkpoint_bytes,
        write_bytes_per_second=write_bytes_per_second,
        useful_seconds=useful_seconds,
        restart_seconds=restart_seconds,
    )
    g = r.plan
    curve = []
    tau = g.interval_seconds
    if tau > 0:
        for i in range(CURVE_POINTS):
            interval = tau * CURVE_SPAN ** (2 * i / (CURVE_POINTS - 1) - 1)
            try:
                point = goodput(
                    useful_seconds=useful_seconds,
                    mtbf_seconds=r.mtbf_seconds,
                    checkpoint_seconds=r.checkpoint_seconds,
                    restart_seconds=restart_seconds,
                    interval_seconds=interval,
                )
            except SpecError:  # intervals so long that failures leave no time to train
                continue
            curve.append((interval, point.goodput))
    return Failures(
        n_gpus=n_gpus,
        gpu_failure_rate_per_day=gpu_failure_rate_per_day,
        job_failure_probability_per_day=r.job_failure_probability_per_day,
        mtbf_seconds=r.mtbf_seconds,
        checkpoint_bytes=checkpoint_bytes,
        write_bytes_per_second=write_bytes_per_second,
        checkpoint_write_seconds=r.checkpoint_seconds,
        restart_seconds=restart_seconds,
        daly_interval_seconds=g.interval_seconds,
        young_interval_seconds=r.young_interval_seconds,
        goodput=g.goodput,
        checkpoint_overhead_fraction=g.checkpoint_overhead_fraction,
        waste_per_failure_seconds=g.waste_per_failure_seconds,
        useful_days=useful_seconds / SECONDS_PER_DAY,
        wall_clock_days=g.wall_clock_seconds / SECONDS_PER_DAY,
        expected_failures=g.expected_failures,
        goodput_curve=tuple(curve),
    )
