"""`trainbudget reliability`: failure probability, MTBF, checkpoint interval and goodput."""

from __future__ import annotations

import argparse

from trainbudget.api.inputs.values import (
    dumps_json,
    duration_days,
    duration_seconds,
    parse_probability,
    positive_int,
)
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.reliability import (
    ASSUMPTIONS,
    DAYS_PER_MONTH,
    DEFAULT_RESTART_SECONDS,
    checkpoint_write_seconds,
    daily_rate_from_period,
    goodput,
    job_failure_probability,
    mtbf_seconds,
    young_interval_seconds,
)
from trainbudget.core.units import (
    SECONDS_PER_DAY,
    SECONDS_PER_HOUR,
    format_bytes,
    format_seconds,
    parse_bandwidth,
    parse_bytes,
)


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--gpus", required=True, help="GPUs in the job; any one failing stops it")
    rate = p.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--gpu-failure-rate-per-day",
        help="probability that one GPU fails on a given day, e.g. 0.0027 or 0.27%%",
    )
    rate.add_argument(
        "--failure-rate-per-month",
        help=f"probability that one GPU fails in a month ({DAYS_PER_MONTH} days), e.g. 0.08 or "
        "8%%; converted as 1 - (1 - p)^(1/30) per day",
    )
    p.add_argument(
        "--checkpoint-bytes", required=True, help="size of one checkpoint, e.g. 1.1TB or 80GiB"
    )
    p.add_argument(
        "--write-bytes-per-second",
        required=True,
        help="checkpoint write bandwidth of the whole job, e.g. 10GB/s",
    )
    p.add_argument(
        "--restart-seconds",
        default=str(int(DEFAULT_RESTART_SECONDS)),
        help="time to detect a failure, restart and reload (default 600)",
    )
    p.add_argument(
        "--train-days", help="failure-free training days; gives wall-clock days and failures"
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _positive(field: str, text: str, value: float) -> float:
    if value <= 0:
        raise SpecError(field, text, "must be positive")
    return value


def _inputs(args: argparse.Namespace) -> dict:
    per_month = None
    if args.failure_rate_per_month is not None:
        per_month = parse_probability("failure_rate_per_month", args.failure_rate_per_month)
        per_day = daily_rate_from_period(per_month, DAYS_PER_MONTH)
    else:
        per_day = parse_probability("gpu_failure_rate_per_day", args.gpu_failure_rate_per_day)
    return {
        "gpus": positive_int("gpus", args.gpus),
        "gpu_failure_rate_per_day": per_day,
        "failure_rate_per_month": per_month,
        "checkpoint_bytes": parse_bytes(args.checkpoint_bytes, "checkpoint_bytes"),
        "write_bytes_per_second": _positive(
            "write_bytes_per_second",
            args.write_bytes_per_second,
            parse_bandwidth(args.write_bytes_per_second, "write_bytes_per_second"),
        ),
        "restart_seconds": duration_seconds("restart_seconds", args.restart_seconds),
        "train_days": (
            None
            if args.train_days is None
            else _positive(
                "train_days", args.train_days, duration_days("train_days", args.train_days)
            )
        ),
    }


def run(args: argparse.Namespace) -> int:
    inp = _inputs(args)
    n, p_day = inp["gpus"], inp["gpu_failure_rate_per_day"]
    p_job_day = job_failure_probability(n, p_day)
    mtbf = mtbf_seconds(n, p_day)
    delta = checkpoint_write_seconds(inp["checkpoint_bytes"], inp["write_bytes_per_second"])
    train_days = inp["train_days"]
    useful = (train_days or 1) * SECONDS_PER_DAY  # goodput itself does not depend on it
    g = goodput(
        useful_seconds=useful,
        mtbf_seconds=mtbf,
        checkpoint_seconds=delta,
        restart_seconds=inp["restart_seconds"],
    )
    young = young_interval_seconds(delta, mtbf)
    wall_days = g.wall_clock_seconds / SECONDS_PER_DAY if train_days else None
    failures = g.expected_failures if train_days else None
    if args.json:
        print(
            dumps_json(
                {
                    "job_failure_probability_per_day": p_job_day,
                    "mtbf_hours": mtbf / SECONDS_PER_HOUR,
                    "checkpoint_write_seconds": delta,
                    "optimal_checkpoint_interval_seconds": g.interval_seconds,
                    "young_interval_seconds": young,
                    "goodput": g.goodput,
                    "expected_failures": failures,
                    "wall_clock_days": wall_days,
                    "inputs": inp,
                    "assumptions": list(ASSUMPTIONS),
                }
            )
        )
        return 0
    print(
        f"{n} GPUs at {p_day * 100:.4g} % failure per GPU-day: the job fails within a day with "
        f"probability {p_job_day * 100:.2f} %; MTBF {format_seconds(mtbf)}"
    )
    size = format_bytes(inp["checkpoint_bytes"])
    speed = format_bytes(inp["write_bytes_per_second"])
    if delta > 0:
        print(
            f"checkpoint {size} at {speed}/s: {format_seconds(delta)} per write; checkpoint "
            f"every {format_seconds(g.interval_seconds)} (Daly; Young {format_seconds(young)})"
        )
    else:
        print(f"checkpoint {size}: no write time, so checkpointing continuously costs nothing")
    print(
        f"goodput {g.goodput * 100:.2f} %: {format_seconds(g.waste_per_failure_seconds)} lost "
        f"per failure (half an interval + {format_seconds(g.restart_seconds)} restart), "
        f"checkpoint overhead {g.checkpoint_overhead_fraction * 100:.2f} %"
    )
    if train_days:
        print(
            f"{train_days:g} useful days -> {wall_days:.4g} wall-clock days, "
            f"{failures:.3g} expected failures"
        )
    return 0
