"""Failure and checkpoint figures inside `estimate` and `plan`, when the rates are given."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import duration_seconds
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.reliability import DEFAULT_RESTART_SECONDS, reliability_report
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR, parse_bandwidth


def add_reliability_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("failures and checkpoints (both options together)")
    g.add_argument(
        "--gpu-failure-rate-per-day",
        help="probability one GPU fails on a given day, e.g. 0.0027 or 0.27%%",
    )
    g.add_argument(
        "--checkpoint-write-bytes-per-second",
        help="checkpoint write bandwidth of the job, e.g. 20GB/s",
    )
    g.add_argument(
        "--restart-seconds",
        default=str(int(DEFAULT_RESTART_SECONDS)),
        help="detect, restart and reload after a failure (default 600)",
    )


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
    from trainbudget.cli.reliability_cmd import parse_probability  # only when the rates are given

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


def reliability_line(block: dict) -> str:
    wall = (
        f"; {block['wall_clock_days']:.1f} wall-clock days with "
        f"{block['expected_failures']:.0f} expected failures"
        if block["wall_clock_days"] is not None
        else ""
    )
    return (
        f"failures     job fails within a day with p = "
        f"{100 * block['job_failure_probability_per_day']:.1f} %, MTBF "
        f"{block['mtbf_hours']:.2f} h; checkpoint {block['checkpoint_write_seconds']:.0f} s "
        f"every {block['optimal_checkpoint_interval_seconds'] / 60:.0f} min; goodput "
        f"{100 * block['goodput']:.1f} %{wall}"
    )
