"""Argument parsing helpers: one-line errors, unit-aware numbers, shared option groups."""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from trainbudget.core.errors import SpecError
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC_NAME, Framework, get_framework
from trainbudget.core.spec.precision import OPTIMIZERS, PRECISIONS, TRAINABLE_OPTIMIZERS
from trainbudget.core.units import parse_count, parse_int_count


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        # prog is "trainbudget" at the top level and "trainbudget estimate" for a subcommand
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def positive_int(field: str, text: str) -> int:
    value = parse_int_count(text, field)
    if value <= 0:
        raise SpecError(field, text, "must be a positive integer")
    return value


def nonnegative_float(field: str, text: str) -> float:
    return parse_count(text, field)


def fraction(field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(field, text, "must be a number in (0, 1]") from None
    if not 0 < value <= 1:
        raise SpecError(field, text, "must be a number in (0, 1]")
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


def add_optimizer_arg(p, *, trainable_only: bool = False) -> None:
    """--optimizer on a parser or argument group, its choices and help from the core's table:
    every row for the estimators, the trainable rows where a real optimizer is built."""
    names = TRAINABLE_OPTIMIZERS if trainable_only else tuple(OPTIMIZERS)
    p.add_argument(
        "--optimizer",
        default="adamw",
        choices=names,
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
        + " | ".join(n + " (default)" if n == GENERIC_NAME else n for n in FRAMEWORKS),
    )


def framework_from_args(args: argparse.Namespace) -> Framework:
    """The named row; an unknown name is a one-line error listing the known ones."""
    return get_framework(args.framework)


def add_training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        default="bf16-mixed",
        help=" | ".join(
            n + " (fp32 master, default)" if n == "bf16-mixed" else n for n in PRECISIONS
        ),
    )
    add_optimizer_arg(p)
    p.add_argument(
        "--seq-len",
        help="tokens per sequence (default: the model's pre-training length: a config's "
        "rope_scaling.original_max_position_embeddings, else its context length)",
    )
    p.add_argument("--micro-batch", default="1", help="sequences per micro-batch (default 1)")
    p.add_argument(
        "--recompute",
        default="none",
        choices=RECOMPUTE_KINDS,
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
    p.add_argument(
        "--causal",
        action="store_true",
        help="count only the causal half of attention FLOPs (default: non-causal, "
        "as the seeds and PaLM count)",
    )


def dumps_json(obj: object, indent: int = 2) -> str:
    """JSON that other tools can read: NaN or Infinity anywhere is a bug, not output."""
    return json.dumps(obj, indent=indent, allow_nan=False)
