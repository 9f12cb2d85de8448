"""Failure and checkpoint figures inside the `estimate` and `plan` answers, when the two rates
are given: the block the API returns and the CLI prints (cli/tools/reliability_view.py)."""

from __future__ import annotations

import argparse

from trainbudget.api.inputs.values import duration_seconds, parse_probability
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.reliability import reliability_report
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, parse_bandwidth


def reliability_json(
    args: argparse.Namespace, *, n_gpus: int, checkpoint_bytes: float, useful_seconds: float | None
) -> dict | None:
    """The reliability block, or None when neither rate option was given."""
    rate, write = args.gpu_failure_rate_per_day, args.checkpoint_write_bytes_per_second
    if rate is None and write is None:
        return None
    if rate is None or write is None:
        missing = (
            "--gpu-failure-rate-per-day" if rate is None else "--checkpoint-write-bytes-per-second"
        )
        raise SpecError(missing, None, "is needed with the other failure/checkpoint option")
    bandwidth = parse_bandwidth(write, "checkpoint_write_bytes_per_second")
    if bandwidth <= 0:
        raise SpecError("checkpoint_write_bytes_per_second", write, "must be positive")
    report = reliability_report(
        n_gpus=n_gpus,
        gpu_failure_rate_per_day=parse_probability("gpu_failure_rate_per_day", rate),
        checkpoint_bytes=checkpoint_bytes,
        write_bytes_per_second=bandwidth,
        useful_seconds=useful_seconds or SECONDS_PER_DAY,
        restart_seconds=duration_seconds("restart_seconds", args.restart_seconds),
    )
    g = report.plan
    return {
        "job_failure_probability_per_day": report.job_failure_probability_per_day,
        "mtbf_hours": report.mtbf_seconds / SECONDS_PER_HOUR,
        "checkpoint_bytes": checkpoint_bytes,
        "checkpoint_write_seconds": report.checkpoint_seconds,
        "optimal_checkpoint_interval_seconds": g.interval_seconds,
        "young_interval_seconds": report.young_interval_seconds,
        "goodput": g.goodput,
        "expected_failures": g.expected_failures if useful_seconds else None,
        "wall_clock_days": g.wall_clock_seconds / SECONDS_PER_DAY if useful_seconds else None,
    }
