"""`trainbudget` entry point. Only the command that runs is imported and given its options, so
that one command does not pay for every other's imports (issue 13: `estimate --json` in 0.15 s)."""

from __future__ import annotations

import gc
import importlib
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing before `main` runs
if TYPE_CHECKING:
    from trainbudget.cli.args import OneLineParser

COMMANDS = {
    "estimate": (
        "trainbudget.cli.plan.estimate_cmd",
        "parameters, FLOPs, memory, time and cost of a training run",
    ),
    "fit": ("trainbudget.cli.tools.fit_cmd", "the largest model a set of GPUs can train"),
    "models": ("trainbudget.cli.tools.catalog_cmd", "list model presets with parameter counts"),
    "hardware": (
        "trainbudget.cli.tools.catalog_cmd",
        "list accelerators with peaks and bandwidths",
    ),
    "dtypes": ("trainbudget.cli.tools.catalog_cmd", "number formats: bits, range, epsilon"),
    "intensity": (
        "trainbudget.cli.tools.intensity_cmd",
        "arithmetic intensity of a dot product or matmul vs a chip's ridge point",
    ),
    "mfu": ("trainbudget.cli.tools.mfu_cmd", "model FLOPs utilisation from a measured step time"),
    "plan": (
        "trainbudget.cli.plan.plan_cmd",
        "search every parallel layout; the fastest that fit, and why",
    ),
    "reliability": (
        "trainbudget.cli.tools.reliability_cmd",
        "failure probability, MTBF, optimal checkpoint interval and goodput",
    ),
    "validate": (
        "trainbudget.cli.tools.validate_cmd",
        "predicted vs measured step times: published training runs, or your own (--runs)",
    ),
    "bench": (
        "trainbudget.cli.run.bench_cmd",
        "matmul FLOP/s and memory bandwidth of this device (its roofline)",
    ),
    "profile": (
        "trainbudget.cli.run.profile_cmd",
        "predicted vs measured memory and FLOPs of a real PyTorch training step",
    ),
    "data": (
        "trainbudget.cli.run.data_cmd",
        "prepare token files from text (byte or BPE tokenizer), with sources, weights and a "
        "held-out split",
    ),
    "train": (
        "trainbudget.cli.run.train_cmd",
        "train the reference model with predicted vs measured on every log line",
    ),
    "report": (
        "trainbudget.cli.plan.report_cmd",
        "one HTML page with plots: a planned run (--model) or a training run (--run)",
    ),
    "plot": (
        "trainbudget.cli.run.plot_cmd",
        "loss curves (train, validation) and tokens/s of training runs as a PNG",
    ),
    "eval": (
        "trainbudget.cli.run.eval_cmd",
        "validation loss and perplexity of a checkpoint, per data source",
    ),
    "sample": ("trainbudget.cli.run.sample_cmd", "generate text from a checkpoint"),
    "serve": (
        "trainbudget.cli.plan.serve_cmd",
        "a local planner page: inputs on the left, plans, memory and days updating on the right",
    ),
}


def build_parser(only: str | None = None) -> OneLineParser:
    """The parser. With `only` a command's name, just that command (its module imported, its
    options added): parsing its argv needs no other. With `only` "", every command listed by
    name and help alone (the top-level --help), none imported. With None, every command whole."""
    # here, not at the top: `main` first sets how the process runs (see SHORT_COMMANDS), then
    # the argument helpers and the core tables they read are imported
    from trainbudget.cli.args import OneLineParser

    parser = OneLineParser(
        prog="trainbudget",
        description="How long, how much memory, which layout: exact accounting for transformer "
        "training. Every command takes --json; estimate takes --explain.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, (module, help_text) in COMMANDS.items():
        if only and name != only:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if only is None or name == only:
            # each module adds its own options; importing it is cheap (no torch)
            importlib.import_module(module).add_arguments(p, name)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command argv names, if any (the top level takes no option but --help)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


# optional dependencies (pyproject's extras) -> how to get them; torch first and pinned, so that
# pip does not pull a CUDA build (the README's set-up line does the same)
INSTALL_HINTS = {
    "torch": "pip install torch==2.13.0 && pip install -e '.[train]' (GPU hosts: torch>=2.6)",
    "tokenizers": "pip install -e '.[data]'",
    "tensorboard": "pip install -e '.[train]'",
    "matplotlib": "pip install -e '.[report]'",
}


# commands that run torch, whose CPU kernels may call a BLAS (OpenBLAS on some platforms)
TORCH_COMMANDS = frozenset({"bench", "profile", "train", "eval", "sample"})


def _one_blas_thread(command: str | None) -> None:
    """Load numpy's OpenBLAS with one thread, unless the user chose a number. The other commands
    use numpy element-wise only (the planner's grid), never its BLAS; yet at load OpenBLAS
    starts a thread per core, which spin-wait for work: measured, `import numpy` costs 0.10 s
    of CPU with them and 0.06 s without, and a short command on a busy machine waits for them."""
    if command not in TORCH_COMMANDS:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# commands that may search the planner's grid: arrays of hundreds of KiB (one element per
# layout), made and dropped by the thousand
GRID_COMMANDS = frozenset({"estimate", "plan", "report", "serve"})
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def _keep_freed_memory(command: str | None, argv: list[str]) -> None:
    """Have malloc keep the blocks the grid's arrays free, for the next ones. glibc serves a
    block over its mmap threshold (128 KiB at first) by mapping fresh pages from the kernel
    and unmaps them when it is freed, so every such array is page-faulted in anew; a fixed
    threshold of 32 MiB (glibc's largest) and a trim threshold to match serve them from the
    heap it keeps. Measured on the 70B estimate (53,202 layouts), median of 31 runs: 5 % of
    the wall time (system time 0.04 -> 0.03 s), for 1.3 MiB more peak memory; ctypes costs the
    one-GPU estimate, which runs no search, about 1 ms: an estimate without --gpus (one GPU,
    no layout to search) skips it. Without glibc's mallopt: nothing."""
    if command not in GRID_COMMANDS:
        return
    if command == "estimate" and not any(a == "--gpus" or a.startswith("--gpus=") for a in argv):
        return
    import ctypes  # numpy imports it too, for the search

    from trainbudget.core.units import MiB

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # no C library to load, or none with mallopt
        return
    mallopt(M_MMAP_THRESHOLD, 32 * MiB)
    mallopt(M_TRIM_THRESHOLD, 64 * MiB)


# commands that answer from the core's tables in well under a second: no torch, no corpus, no
# figures (matplotlib's artists hold cycles); `serve` runs until stopped, so it keeps the
# collector
SHORT_COMMANDS = frozenset(COMMANDS) - TORCH_COMMANDS - {"data", "report", "plot", "serve"}


def main(argv: list[str] | None = None) -> int:
    if argv is not None:  # called from Python (tests, scripts): the process is not ours to set
        return _run(list(argv))
    command = _command(sys.argv[1:])
    _one_blas_thread(command)
    _keep_freed_memory(command, sys.argv[2:])
    if command not in SHORT_COMMANDS:
        return _run(sys.argv[1:])
    # Reference counts free what a short command drops, and the little cyclic garbage it may
    # make goes with the process; yet its imports alone set off some fifty collections, 0.008 s
    # of `estimate --json`'s CPU, measured. When the answer is out, what is left is the
    # interpreter's teardown, whose collections walk every object numpy and the estimator's
    # modules made (0.02 s more): frozen, they are freed by reference count alone.
    gc.disable()
    try:
        return _run(sys.argv[1:])
    finally:
        gc.freeze()


def _run(argv: list[str]) -> int:
    from trainbudget.core.errors import SpecError

    parser = build_parser(only=_command(argv) or "")
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return importlib.import_module(args._module).run(args)
    except SpecError as err:
        sys.stderr.write(f"trainbudget {args.command}: error: {err}\n")
        return 2
    except ModuleNotFoundError as err:
        if err.name not in INSTALL_HINTS:
            raise
        sys.stderr.write(
            f"trainbudget {args.command}: error: needs {err.name}, which is not installed: "
            f"{INSTALL_HINTS[err.name]}\n"
        )
        return 2
    except BrokenPipeError:  # `trainbudget models | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
