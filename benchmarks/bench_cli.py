"""Wall-clock of the CLI, measured the way a user meets it: a fresh process each time.

Target (issue 2): `trainbudget estimate ... --json` answers in under 0.3 s on the 2-core CI
machine, and `--help` starts "in well under a second". Prints the median of N runs and its
ratio to the target; exits 1 if a median misses its target.

    python benchmarks/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
CASES = [
    (
        "estimate --json (dense:70e9)",
        0.3,
        [
            "estimate",
            "--model",
            "dense:70e9",
            "--tokens",
            "15e12",
            "--gpus",
            "1024",
            "--gpu",
            "h100-sxm",
            "--mfu",
            "0.5",
            "--json",
        ],
    ),
    (
        "estimate --json (llama-3-405b)",
        0.3,
        [
            "estimate",
            "--model",
            "llama-3-405b",
            "--tokens",
            "15.6T",
            "--gpus",
            "16384",
            "--seq-len",
            "8192",
            "--recompute",
            "full",
            "--json",
        ],
    ),
    ("estimate --help", 0.3, ["estimate", "--help"]),
    ("models", 0.3, ["models"]),
]


def time_once(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": SRC}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainbudget", *argv], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    baseline = statistics.median(time_once_python() for _ in range(runs))
    print(f"{'case':<34} {'median s':>9} {'target s':>9} {'ratio':>6}")
    print(f"{'python -c pass (interpreter only)':<34} {baseline:>9.3f}")
    failed = False
    for name, target, argv in CASES:
        time_once(argv)  # warm the file cache
        median = statistics.median(time_once(argv) for _ in range(runs))
        ratio = median / target
        failed |= ratio > 1
        print(f"{name:<34} {median:>9.3f} {target:>9.3f} {ratio:>6.2f}")
    return 1 if failed else 0


def time_once_python() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
