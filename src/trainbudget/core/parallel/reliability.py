"""Failures, checkpoints and goodput of a large training job.

Seed 004 gives the two headline numbers: a step that fails with probability p on one node fails
with 1 - (1 - p)^128 on 128 nodes (B-fail-128), and "8 % of GPUs fail per month" makes a
1000-GPU job fail on most days (B-fail-1000). From a per-GPU failure rate this module derives
the job's mean time between failures (MTBF), the checkpoint interval that minimises lost time
(Young 1974; Daly 2006) and the fraction of wall-clock time that is useful training (goodput).

Conventions: probabilities are fractions in [0, 1); failures of different GPUs and of different
days are independent; every GPU failure interrupts the whole job, which rolls back to its last
checkpoint. Sanity reference: Llama 3 405B (Dubey et al. 2024, arXiv 2407.21783, Sec. 3.3.4)
saw 466 interruptions in 54 days on 16,384 H100s, 419 of them unexpected, and kept more than
90 % effective training time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.units import SECONDS_PER_DAY

DAYS_PER_MONTH = 30
"""A month of failure statistics, as seed 004 counts it ("8 % per month" -> "0.27 % per day")."""

DEFAULT_RESTART_SECONDS = 600.0
"""Detect, reschedule, reload: seed 004 (DLRover) aims to respond to any fault within 10 minutes."""

ASSUMPTIONS: tuple[str, ...] = (
    "GPUs fail independently, each a Poisson process with rate -ln(1 - p_day) per day; "
    "any GPU failure interrupts the whole job",
    f"a per-month rate is converted per day by compounding over {DAYS_PER_MONTH} independent "
    f"days, 1 - (1 - p)^(1/{DAYS_PER_MONTH}), not by the linear p/{DAYS_PER_MONTH}",
    "checkpoint writes are synchronous: training stalls for checkpoint_write_seconds",
    "optimal interval: Daly 2006 higher-order estimate (young_interval_seconds: Young 1974, "
    "sqrt(2 delta M)); intervals are compute time between checkpoints",
    "each failure loses half an interval of work plus the restart time; "
    "goodput = (1 - (tau/2 + R)/M) / (1 + delta/tau), first order, valid for tau/2 + R << M",
)
"""The model's assumptions in words, one sentence each: what `trainbudget reliability --json`
lists and the plan report's failures section repeats."""


def _probability(field: str, p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise SpecError(field, p, "must be a probability in [0, 1)")
    return float(p)


def _positive_count(field: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise SpecError(field, n, "must be a positive integer")
    return n


def _positive(field: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf:
        raise SpecError(field, x, "must be a positive finite number")
    return float(x)


def _nonnegative(field: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < math.inf:
        raise SpecError(field, x, "must be a finite number >= 0")
    return float(x)


# ---- failure probability and MTBF -------------------------------------------------------------


def job_failure_probability(n_units: int, p_unit: float) -> float:
    """P(at least one of n independent units fails) = 1 - (1 - p)^n.

    Seed 004 (B-fail-128): 1 % per node on 128 nodes -> 1 - 0.99^128 = 72.37 %.
    """
    n = _positive_count("n_units", n_units)
    p = _probability("p_unit", p_unit)
    return -math.expm1(n * math.log1p(-p))  # 1 - (1-p)^n without cancellation for tiny p


def daily_rate_from_period(p_period: float, days_in_period: float = DAYS_PER_MONTH) -> float:
    """Per-day failure probability from a per-period one, days independent: 1 - (1 - p)^(1/d).

    Seed 004 (B-fail-1000): 8 % per month (30 days) -> 1 - 0.92^(1/30) = 0.2776 % per GPU-day.
    The seed's "0.27 %" equals the linear form p/d = 0.2667 % to two digits (see
    `daily_rate_linear`); the compounded form is exact under independence and is the one the
    CLI uses.
    """
    p = _probability("p_period", p_period)
    d = _positive("days_in_period", days_in_period)
    return -math.expm1(math.log1p(-p) / d)


def daily_rate_linear(p_period: float, days_in_period: float = DAYS_PER_MONTH) -> float:
    """The first-order approximation p/d of `daily_rate_from_period` (8 %/30 = 0.2667 %)."""
    p = _probability("p_period", p_period)
    return p / _positive("days_in_period", days_in_period)


def mtbf_seconds(n_gpus: int, gpu_failure_rate_per_day: float) -> float:
    """Expected seconds between job interruptions: 1 / (n * lambda).

    Each GPU's failures are a Poisson process whose rate lambda = -ln(1 - p_day) per day makes
    P(no failure in a day) = 1 - p_day exactly; n independent GPUs superpose to rate n * lambda.
    For small p this is the familiar MTBF = 1 / (n * p_day) days. A zero rate gives math.inf.
    Llama 3 (arXiv 2407.21783, Sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384
    GPUs is p_day = 4.74e-4 per GPU and an MTBF of 3.1 hours.
    """
    n = _positive_count("n_gpus", n_gpus)
    p = _probability("gpu_failure_rate_per_day", gpu_failure_rate_per_day)
    rate_per_day = -n * math.log1p(-p)
    return math.inf if rate_per_day == 0 else SECONDS_PER_DAY / rate_per_day


def checkpoint_write_seconds(checkpoint_bytes: float, write_bytes_per_second: float) -> float:
    """Time training stalls to write one checkpoint: bytes / write bandwidth."""
    size = _nonnegative("checkpoint_bytes", checkpoint_bytes)
    return size / _positive("write_bytes_per_second", write_bytes_per_second)


# ---- optimal checkpoint interval ---------------------------------------------------------------


def young_interval_seconds(checkpoint_seconds: float, mtbf: float) -> float:
    """Young's first-order optimum tau = sqrt(2 delta M).

    J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9),
    1974. delta = checkpoint write time, M = MTBF; tau is compute time between checkpoints.
    """
    delta = _nonnegative("checkpoint_seconds", checkpoint_seconds)
    return math.sqrt(2 * delta * _positive("mtbf_seconds", mtbf))


def daly_interval_seconds(checkpoint_seconds: float, mtbf: float) -> float:
    """Daly's higher-order optimum.

    J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
    Future Generation Computer Systems 22(3), 2006, pp. 303-312:
        tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + (1/9) delta/(2M)] - delta,  delta < 2M
        tau = M,                                                                      delta >= 2M
    Slightly shorter than Young's for delta << M; delta -> 0 gives tau -> 0.
    """
    delta = _nonnegative("checkpoint_seconds", checkpoint_seconds)
    m = _positive("mtbf_seconds", mtbf)
    if delta >= 2 * m:
        return m
    x = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta


# ---- goodput ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """Expected cost of failures and checkpoints for `useful_seconds` of training.

    First-order model: per useful second the job spends delta/tau writing checkpoints; failures
    arrive at 1/M per wall-clock second and each loses half an interval of work plus a restart.
    """

    useful_seconds: float
    """T: failure-free compute time the run needs."""
    mtbf_seconds: float
    """M: mean wall-clock time between job interruptions."""
    checkpoint_seconds: float
    """delta: time one checkpoint write stalls training."""
    restart_seconds: float
    """R: detect the failure, reschedule, reload the checkpoint."""
    interval_seconds: float
    """tau: compute time between checkpoints."""

    @property
    def checkpoint_overhead_fraction(self) -> float:
        """delta / tau: checkpoint time per useful second (0 when checkpoints are free)."""
        return (
            0.0 if self.checkpoint_seconds == 0 else self.checkpoint_seconds / self.interval_seconds
        )

    @property
    def waste_per_failure_seconds(self) -> float:
        """tau/2 + R: on average half an interval of work is redone, after a restart."""
        return self.interval_seconds / 2 + self.restart_seconds

    @property
    def goodput(self) -> float:
        """Useful / wall-clock time = (1 - (tau/2 + R)/M) / (1 + delta/tau)."""
        return (1 - self.waste_per_failure_seconds / self.mtbf_seconds) / (
            1 + self.checkpoint_overhead_fraction
        )

    @property
    def wall_clock_seconds(self) -> float:
        """T (1 + delta/tau) / (1 - (tau/2 + R)/M) = T / goodput."""
        return self.useful_seconds / self.goodput

    @property
    def expected_failures(self) -> float:
        """Interruptions expected over the wall-clock run: wall / M."""
        return self.wall_clock_seconds / self.mtbf_seconds


def goodput(
    *,
    useful_seconds: float,
    mtbf_seconds: float,
    checkpoint_seconds: float,
    restart_seconds: float = DEFAULT_RESTART_SECONDS,
    interval_seconds: float | None = None,
) -> Goodput:
    """Goodput and wall-clock time, checkpointing every `interval_seconds` (default: Daly's).

    Assumptions: failures form a Poisson process of mean gap M that does not change with time;
    checkpoint writes are synchronous (training stalls for delta); a failure loses tau/2 of work
    on average (the failure point is uniform in an interval; writes and restarts are short next
    to tau) plus the restart R; failures during a restart are not counted separately. Valid
    while tau/2 + R is well below M. Llama 3 reports more than 90 % effective training time at
    an MTBF of about 3 hours (arXiv 2407.21783, Sec. 3.3.4).
    """
    t = _nonnegative("useful_seconds", useful_seconds)
    m = _positive("mtbf_seconds", mtbf_seconds)
    delta = _nonnegative("checkpoint_seconds", checkpoint_seconds)
    r = _nonnegative("restart_seconds", restart_seconds)
    if delta >= m:
        raise SpecError(
            "checkpoint_seconds",
            delta,
            f"must be shorter than mtbf_seconds ({m:g}): a job that fails before one checkpoint "
            "is written keeps none (a faster write, a smaller checkpoint, fewer GPUs or a lower "
            "failure rate)",
        )
    if interval_seconds is None:
        tau = daly_interval_seconds(delta, m)
    else:
        tau = _positive("interval_seconds", interval_seconds)
    if tau / 2 + r >= m:
        raise SpecError(
            "mtbf_seconds",
            m,
            f"must exceed restart_seconds ({r:g}) + half the checkpoint interval ({tau / 2:g}): "
            "failures this frequent leave no time to train (fewer GPUs, a lower failure rate "
            "or a faster restart)",
        )
    return Goodput(
        useful_seconds=t,
        mtbf_seconds=m,
        checkpoint_seconds=delta,
        restart_seconds=r,
        interval_seconds=tau,
    )


@dataclass(frozen=True, kw_only=True)
class ReliabilityReport:
    """Everything the CLI reports about failures for one job."""

    n_gpus: int
    gpu_failure_rate_per_day: float
    job_failure_probability_per_day: float
    mtbf_seconds: float
    checkpoint_seconds: float
    young_interval_seconds: float
    plan: Goodput


def reliability_report(
    *,
    n_gpus: int,
    gpu_failure_rate_per_day: float,
    checkpoint_bytes: float,
    write_bytes_per_second: float,
    useful_seconds: float,
    restart_seconds: float = DEFAULT_RESTART_SECONDS,
) -> ReliabilityReport:
    """Failure probability, MTBF, checkpoint cost, Young and Daly intervals and goodput of a
    job of `n_gpus` that needs `useful_seconds` of failure-free training."""
    mtbf = mtbf_seconds(n_gpus, gpu_failure_rate_per_day)
    delta = checkpoint_write_seconds(checkpoint_bytes, write_bytes_per_second)
    return ReliabilityReport(
        n_gpus=n_gpus,
        gpu_failure_rate_per_day=gpu_failure_rate_per_day,
        job_failure_probability_per_day=job_failure_probability(n_gpus, gpu_failure_rate_per_day),
        mtbf_seconds=mtbf,
        checkpoint_seconds=delta,
        young_interval_seconds=young_interval_seconds(delta, mtbf),
        plan=goodput(
            useful_seconds=useful_seconds,
            mtbf_seconds=mtbf,
            checkpoint_seconds=delta,
            restart_seconds=restart_seconds,
        ),
    )
