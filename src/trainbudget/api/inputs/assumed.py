"""The values assumed for the options a question may leave unstated (micro-batch,
recomputation, framework, FlashAttention). Their parsers default to None so that an unstated
option can be told from a stated one; the answers then say which were assumed, and
answers/sensitivity.py what each alternative would change."""

from __future__ import annotations

import argparse

from trainbudget.core.spec.defaults import DEFAULT_FLASH_ATTENTION
from trainbudget.core.spec.frameworks import GENERIC_NAME

ASSUMED = {"micro_batch": "1", "recompute": "none", "framework": GENERIC_NAME}
"""Options whose parser default is None, so that an unstated one can be told from a stated one,
and the value assumed for it."""


def take_assumptions(args: argparse.Namespace) -> tuple[str, ...]:
    """Fill each unstated option of ASSUMED with its assumed value; the names that were unstated
    (`flash_attention` too when the switch was not given)."""
    unstated = tuple(k for k in ASSUMED if getattr(args, k, None) is None)
    for k in unstated:
        setattr(args, k, ASSUMED[k])
    if args.flash_attention is None:
        args.flash_attention = DEFAULT_FLASH_ATTENTION
        unstated += ("flash_attention",)
    return unstated
