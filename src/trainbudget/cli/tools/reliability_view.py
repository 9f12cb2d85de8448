"""Failure and checkpoint options of `estimate` and `plan`, and their block printed as a line
(the block itself: api/answers/reliability.py)."""

from __future__ import annotations

import argparse

from trainbudget.core.parallel.reliability import DEFAULT_RESTART_SECONDS


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
