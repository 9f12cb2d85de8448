"""Argument parsing helpers: one-line errors, unit-aware numbers, shared option groups."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, NoReturn

# the values' readers live in the API, so that a keyword and an option read the same text the
# same way; the other commands import them from here
from trainbudget.api.inputs.values import (  # noqa: F401
    comma_list,
    dumps_json,
    duration_days,
    duration_seconds,
    fraction,
    framework_from_args,
    money,
    nonnegative_float,
    positive_int,
    refuse_repeats,
    token_count,
)
from trainbudget.core.errors import SpecError
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.engines import LOSS_KERNELS
from trainbudget.core.spec.fp8_recipes import FP8_RECIPES
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC_NAME
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.precision import OPTIMIZERS, PRECISIONS, TRAINABLE_OPTIMIZERS
from trainbudget.core.units import parse_flops_rate

if TYPE_CHECKING:
    from pathlib import Path


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        # prog is "trainbudget" at the top level and "trainbudget estimate" for a subcommand
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter at every add_argument (to check the metavar), and its
        # default width asks shutil for the terminal's: shutil and the archive modules it
        # imports cost every command's start-up about 1.5 ms. The same width, read directly.
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)

    def _get_values(self, action, arg_strings):
        # argparse before 3.13 drops a '--' given as an option's value (`--tokens=--`) and
        # hands on [] instead: keep the text, so that the option's check quotes what was typed
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns, which argparse's help width is: $COLUMNS if a
    positive integer, else the width of the terminal on stdout, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def writable_file(field: str, text: str) -> Path:
    """An output file that can be written: checked before any work is done, so that a long
    benchmark or search does not end in a failed write."""
    from pathlib import Path  # here, not at the top: every command's start-up imports this file

    path = Path(text)
    if path.is_dir():
        raise SpecError(field, text, "is a folder; expected a file name")
    folder = path.parent
    if not folder.is_dir():
        raise SpecError(field, text, f"its folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SpecError(field, text, "cannot be written here (permission denied)")
    return path


def add_peak_flops_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--peak-flops",
        metavar="RATE",
        help="dense peak FLOP/s of one GPU, e.g. 989.5TFLOPS or 9.895e14 (default: the "
        "catalog's for --gpu and --dtype): for a power- or clock-limited part",
    )


def peak_flops_from_args(args: argparse.Namespace, hardware: Hardware, dtype: str) -> float:
    """--peak-flops when given, else the catalog's dense peak of `hardware` in `dtype`."""
    if args.peak_flops is None:
        return hardware.peak_flops_per_second(dtype)
    value = parse_flops_rate(args.peak_flops, "peak_flops")
    if value <= 0:
        raise SpecError("peak_flops", args.peak_flops, "must be positive")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        metavar="M",
        help="a preset name (see `trainbudget models`), a Hugging Face config.json "
        "path, or dense:N for a bare parameter count (e.g. dense:70e9)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a model field, e.g. --set bias=false (repeatable)",
    )


def add_optimizer_arg(p, *, trainable_only: bool = False, parser_checks: bool = True) -> None:
    """--optimizer on a parser or argument group, its choices and help from the core's table:
    every row for the estimators, the trainable rows where a real optimizer is built.
    parser_checks=False leaves the check to the core (`estimate` and `plan`, whose answers the
    API gives too, so that both print the core's line for an unknown name)."""
    names = TRAINABLE_OPTIMIZERS if trainable_only else tuple(OPTIMIZERS)
    p.add_argument(
        "--optimizer",
        default="adamw",
        choices=names if parser_checks else None,
        metavar="O",
        help=" | ".join(n + " (default)" if n == "adamw" else n for n in names),
    )


def add_framework_arg(p) -> None:
    """--framework on a parser or argument group, its choices and help from the core's table."""
    p.add_argument(
        "--framework",
        default=GENERIC_NAME,
        metavar="NAME",
        help="training stack whose gradient dtypes, reduction timing and buckets to assume: "
        + " | ".join(_framework_choice(name) for name in FRAMEWORKS),
    )
    p.add_argument(
        "--tp-comm-overlap",
        action="store_true",
        help="tensor-parallel collectives pipelined with their GEMMs (Megatron's "
        "--tp-comm-overlap, Transformer Engine userbuffers; default off, as in Megatron)",
    )
    p.add_argument(
        "--compiled",
        action="store_true",
        help="the step runs under torch.compile: Inductor's fused kernels per layer and its "
        "fused cross-entropy (default: the framework's eager kernels)",
    )
    p.add_argument(
        "--fp8-param-gather",
        action="store_true",
        help="with --precision fp8, the data-parallel weight gathers move the FP8 linear "
        "weights at one byte (Megatron-Core's fp8_param_gather, on in the nemo-2 and "
        "megatron-bridge-perf rows; torchao's FSDP2 float8 all-gather)",
    )
    p.add_argument(
        "--loss-kernel",
        default=None,
        metavar="NAME",
        help="the cross-entropy kernel, in place of the framework row's (what it keeps of the "
        "logits sizes the head stage's peak): " + " | ".join(LOSS_KERNELS),
    )
    p.add_argument(
        "--attention-kernel",
        default=None,
        metavar="NAME",
        help="the fused attention kernel, in place of the framework row's, timed from its "
        "measured tables on GPUs that have them: flash1 (FlashAttention-1) | flash2 "
        "(FlashAttention-2, PyTorch SDPA's flash backend) | flash3 (FlashAttention-3, Hopper) "
        "| cudnn (cuDNN fused attention, as Transformer Engine and SDPA's cuDNN backend run it)",
    )
    p.add_argument(
        "--fp8-recipe",
        default=None,
        metavar="NAME",
        help="with --precision fp8, the scaling recipe in place of the framework row's (which "
        "GEMMs run in FP8, what the casts move): " + " | ".join(FP8_RECIPES),
    )


def _framework_choice(name: str) -> str:
    if name == GENERIC_NAME:
        return name + " (default)"
    return name + (" (a past release's, for published runs)" if FRAMEWORKS[name].historical else "")


def add_training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        default="bf16-mixed",
        help=" | ".join(
            n + " (fp32 master, default)" if n == "bf16-mixed" else n for n in PRECISIONS
        ),
    )
    add_optimizer_arg(p, parser_checks=False)
    p.add_argument(
        "--seq-len",
        help="tokens per sequence (default: the model's pre-training length: a config's "
        "rope_scaling.original_max_position_embeddings, else its context length)",
    )
    p.add_argument("--micro-batch", default="1", help="sequences per micro-batch (default 1)")
    p.add_argument(
        "--recompute",
        default="none",
        metavar="{" + ",".join(RECOMPUTE_KINDS) + "}",  # checked by api.inputs.choices
        help="activation recomputation policy (default none); selective-op: torchtitan's "
        "per-op policy (keep matmul and attention outputs, recompute the rest)",
    )
    p.add_argument(
        "--flash-attention",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FlashAttention: no s x s attention matrix stored (default on; "
        "--no-flash-attention stores it, as eager attention does)",
    )
    add_causal_args(p)


def add_causal_args(p: argparse.ArgumentParser) -> None:
    """The attention mask the step time is timed with, and the FLOP convention of the counts
    and MFU: two choices, made apart."""
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time attention under a causal mask, as decoders train: FlashAttention skips the "
        "masked tiles (default on; --no-causal times a full, bidirectional mask)",
    )
    p.add_argument(
        "--count-causal",
        action="store_true",
        help="count only the unmasked (causal) query-key pairs in model FLOPs and MFU "
        "(default: every pair, as the seeds and PaLM count)",
    )
