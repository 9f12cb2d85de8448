"""Option values read from text: one reading for the CLI's options and the API's keywords.

`trainbudget.estimate(gpus="4k")` and `trainbudget estimate --gpus 4k` both come here, so the
same text is the same number and bad text is the same one-line SpecError. The CLI's parsers
(cli/args.py) import these; nothing here knows argparse beyond reading a parsed record."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.engines import get_loss_kernel
from trainbudget.core.spec.fp8_recipes import get_fp8_recipe
from trainbudget.core.spec.frameworks import Framework, get_framework
from trainbudget.core.spec.hardware import ATTENTION_KERNELS
from trainbudget.core.units import (
    SECONDS_PER_DAY,
    parse_count,
    parse_duration,
    parse_int_count,
    parse_money,
)


def positive_int(field: str, text: str) -> int:
    """A count of things (GPUs, steps, sequences): '8', '4k', '1e3'. Zero, negatives,
    fractions and words all break the same rule."""
    try:
        value = parse_int_count(text, field)
    except SpecError:
        value = 0
    if value <= 0:
        raise SpecError(field, text, "must be a positive integer")
    return value


def nonnegative_float(field: str, text: str) -> float:
    """A count that may be fractional or zero: tokens, samples, epochs ('15T', '1.5e12')."""
    return parse_count(text, field)


def token_count(field: str, text: str) -> float:
    """Training tokens ('15T', '300e9'): at least one, since 0 or half a token trains nothing."""
    value = parse_count(text, field)
    if value < 1:
        raise SpecError(field, text, "must be at least 1 token, e.g. 15T or 300e9")
    return value


def comma_list(field: str, text: str) -> list[str]:
    """'a,b' -> ['a', 'b']. No entries, an empty entry ('a,,b') or one given twice is an
    error: each would quietly change what is compared."""
    items = [item.strip() for item in text.split(",")]
    if "" in items:
        raise SpecError(field, text, "must be a comma-separated list with no empty entry")
    refuse_repeats(field, text, items)
    return items


def refuse_repeats(field: str, text: str, items: list) -> None:
    """An error naming the entries of `items` given more than once."""
    repeated = sorted({str(item) for item in items if items.count(item) > 1})
    if repeated:
        raise SpecError(field, text, f"names {', '.join(repeated)} more than once")


def money(field: str, text: str) -> float:
    """A price: '2.5' or '$2.5'."""
    return parse_money(text, field)


def duration_seconds(field: str, text: str) -> float:
    """A duration in seconds: '90', '90s', '755ms', '15min', '2h'."""
    return parse_duration(text, field)


def duration_days(field: str, text: str) -> float:
    """A duration in days: '30', '30days', '12h'."""
    return parse_duration(text, field, bare_unit_seconds=SECONDS_PER_DAY) / SECONDS_PER_DAY


def fraction(field: str, text: str) -> float:
    """An efficiency or headroom: a share of a whole, so 0 and above 1 are both meaningless."""
    try:
        value = float(text)
    except ValueError:
        raise SpecError(field, text, "must be a number in (0, 1]") from None
    if not 0 < value <= 1:
        raise SpecError(field, text, "must be a number in (0, 1]")
    return value


def parse_probability(field: str, text: str) -> float:
    """'0.0027' or '0.27%' -> 0.0027; must lie in (0, 1)."""
    rule = "must be a probability in (0, 1), e.g. 0.0027 or 0.27%"
    s = text.strip()
    scale = 100 if s.endswith("%") else 1
    try:
        value = float(s.removesuffix("%")) / scale
    except ValueError:
        raise SpecError(field, text, rule) from None
    if not 0 < value < 1:  # also rejects nan
        raise SpecError(field, text, rule)
    return value


def framework_from_args(args: argparse.Namespace) -> Framework:
    """The named row (with --tp-comm-overlap, --compiled, --fp8-param-gather, --loss-kernel,
    --attention-kernel and --fp8-recipe where given); an unknown name is a one-line error
    listing the known ones."""
    row = get_framework(args.framework)
    if getattr(args, "tp_comm_overlap", False):
        row = replace(row, tp_comm_overlap=True)
    if getattr(args, "compiled", False):
        row = replace(row, compiled=True)
    if getattr(args, "fp8_param_gather", False):
        row = replace(row, fp8_param_gather=True)
    loss_kernel = getattr(args, "loss_kernel", None)
    if loss_kernel:
        row = replace(row, loss_kernel=get_loss_kernel(loss_kernel).name)
    attention_kernel = getattr(args, "attention_kernel", None)
    if attention_kernel:
        if attention_kernel not in ATTENTION_KERNELS:
            raise unknown_key("attention_kernel", attention_kernel, ATTENTION_KERNELS)
        row = replace(row, attention_kernel=attention_kernel)
    fp8_recipe = getattr(args, "fp8_recipe", None)
    if fp8_recipe:
        row = replace(row, fp8_recipe=get_fp8_recipe(fp8_recipe).name)
        precision = getattr(args, "precision", None)
        if precision != "fp8":
            rule = f"applies only with --precision fp8 (precision is {precision})"
            raise SpecError("fp8_recipe", fp8_recipe, rule)
    return row


def dumps_json(obj: object, indent: int = 2) -> str:
    """JSON that other tools can read: NaN or Infinity anywhere is a bug, not output."""
    return json.dumps(obj, indent=indent, allow_nan=False)
