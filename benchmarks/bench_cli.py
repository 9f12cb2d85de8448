"""Wall-clock of the CLI, measured the way a user meets it: a fresh process each time.

Target (issue 13): `trainbudget estimate --model llama-3-70b --tokens 15T --gpus 1024 --gpu
h100-sxm --seq-len 8192 --json` answers in at most 0.15 s (median) on a quiet machine. Each
timed run is paired with a run of `python -c pass` in the same loop (interleaved, so that a
machine that gets busier or quieter during the benchmark moves both), and the interpreter's own
start-up is printed beside it: the part of the wall time that is trainbudget's is the
difference. The other cases keep the older 0.3 s targets (issue 2). Exits 1 if a median misses
its target; on a loaded machine every figure grows, so read the `python -c pass` line first.

On a busy machine a process waits for a core, and its wall time says more about the others
than about it; its CPU time (user + system, every thread) is what the work costs, and what an
idle core would take at most (contention for caches slows the work itself a little too). So
each case that misses on wall is given a quiet-machine estimate: its CPU median, and (`own
cpu`) the part of it beyond `python -c pass`.

Where the 70B estimate's CPU goes (in one process, medians of 9 on the shared 2-core machine at
load 8, milliseconds; `python -c pass` takes 9 more): the standard library it needs (argparse,
dataclasses, json, re) 13; numpy 39, for the planner's grid of 53,202 layouts (one at a
time, `planner.evaluate` takes about 0.2 ms each: 10 s); the estimator's modules 38, over half
of it spent generating the methods of its 52 frozen dataclasses; the search and the answer 47
(enumeration 11, memory of every layout 9, step time of the 30,736 that fit 13). Three
settings of `cli.main` save more than any code change: for the commands without torch,
numpy's OpenBLAS loaded with one thread (its threads, one per core, spin-wait for BLAS work the
element-wise grid never gives them: 0.09 s of CPU a run, which a busy machine pays in wall
time); for the short ones (`cli.main.SHORT_COMMANDS`), no garbage collection during the run
(0.008 s) or over every object at teardown (0.02 s).

The commands run with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE is dropped from their
environment), so the untimed first run of each case leaves the .pyc files an installed package
has: with the cache off every run would compile each trainbudget module again (about 0.1 s of
CPU), which no user pays after the first run.

    python benchmarks/bench_cli.py [--runs 21]
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
ESTIMATE_70B = (
    "estimate --model llama-3-70b --tokens 15T --gpus 1024 --gpu h100-sxm --seq-len 8192 --json"
)
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPATH": SRC,
}
CASES = [
    ("estimate --json (llama-3-70b)", 0.15, ESTIMATE_70B.split()),
    ("estimate --json (dense:70e9)", 0.3, "estimate --model dense:70e9 --tokens 15e12 --json"),
    ("estimate --help", 0.3, ["estimate", "--help"]),
    ("models", 0.3, ["models"]),
]


def time_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds from spawn to exit, CPU seconds the process used: user + system). On a
    busy machine the wall time waits for a core; the CPU time is what the work costs."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=CHILD_ENV, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def paired_medians(argv: list[str], runs: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """The command's and `python -c pass`'s median (wall, CPU) seconds, the two alternating."""
    command = [sys.executable, "-m", "trainbudget", *argv]
    baseline = [sys.executable, "-c", "pass"]
    time_once(command)  # warm the file cache and write the bytecode cache of every module
    ours, python = [], []
    for _ in range(runs):
        ours.append(time_once(command))
        python.append(time_once(baseline))
    return _medians(ours), _medians(python)


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per case (default 21)")
    runs = parser.parse_args().runs
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print("PYTHONDONTWRITEBYTECODE is set here; the timed commands run without it")
    head = ("case", "wall s", "python", "x python", "cpu s", "python", "own cpu", "target s")
    print(f"{head[0]:<30}" + "".join(f"{h:>9}" for h in head[1:]) + "  met")
    failed, quiet = False, []
    for name, target, argv in CASES:
        argv = argv.split() if isinstance(argv, str) else argv
        (wall, cpu), (py_wall, py_cpu) = paired_medians(argv, runs)
        met = wall <= target
        failed |= not met
        figures = (wall, py_wall, wall / py_wall, cpu, py_cpu, cpu - py_cpu, target)
        cells = "".join(f"{x:>9.3f}" for x in figures)
        print(f"{name:<30}{cells}  {'yes' if met else 'NO'}")
        if not met:
            quiet.append(_quiet_estimate(name, wall, cpu, py_cpu, target))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n".join(quiet))
    return 1 if failed else 0


def _quiet_estimate(name: str, wall: float, cpu: float, py_cpu: float, target: float) -> str:
    """What a miss on wall time would be on an idle core: at most the CPU time the run used
    here (a busy machine's shared caches and cores slow the work itself too)."""
    verdict = "within" if cpu <= target else "not shown within"
    return (
        f"{name}: {wall:.3f} s wall here; on a quiet machine at most about its CPU time here, "
        f"{cpu:.3f} s ({cpu - py_cpu:.3f} s beyond python -c pass, itself {py_cpu:.3f} s of "
        f"CPU here), {verdict} the {target} s target"
    )


if __name__ == "__main__":
    sys.exit(main())
