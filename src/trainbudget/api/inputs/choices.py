"""The options that take one of a few names (--recompute, --schedule, --offload-*, ...),
checked once for the CLI and the API alike.

The CLI's parser lists these names in --help but does not restrict them itself: argparse's
own "invalid choice" line differs from the core's SpecError line, and `trainbudget.estimate(
recompute="ful")` must fail with the line `--recompute ful` prints. Both paths call
`check_choices` first, before any figure is computed."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import OFFLOAD_TARGETS, SCHEDULES
from trainbudget.core.single.estimate import FLOPS_FORMULAS
from trainbudget.core.single.flops import RECOMPUTE_KINDS

CHOICES = MappingProxyType(
    {
        "recompute": RECOMPUTE_KINDS,
        "schedule": SCHEDULES,
        "offload_optimizer": OFFLOAD_TARGETS,
        "offload_params": OFFLOAD_TARGETS,
        "flops_formula": FLOPS_FORMULAS,
    }
)
"""Option (its dest name) -> the names it accepts, each tuple the core's own table."""


def one_of(field: str, value: str, names: tuple[str, ...]) -> str:
    """`value` when it is one of `names`, else the one-line error listing them (the core's
    wording for --recompute, which it checked before this module existed)."""
    if value not in names:
        raise SpecError(field, value, "must be one of " + ", ".join(names))
    return value


def check_choices(args: argparse.Namespace) -> None:
    """Every named-choice option of `args` that was given (None is "not given")."""
    for field, names in CHOICES.items():
        value = getattr(args, field, None)
        if value is not None:
            one_of(field, value, names)


def choices_help(field: str) -> str:
    """The accepted names as --help lists them: 'a | b | c'."""
    return " | ".join(CHOICES[field])
