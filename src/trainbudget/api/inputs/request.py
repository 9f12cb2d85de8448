"""An estimate question's options read into the core's EstimateRequest, and the options a
planned answer reads before the assumed values fill in."""

from __future__ import annotations

import argparse

from trainbudget.api.inputs.assumed import take_assumptions
from trainbudget.api.inputs.model_input import resolve
from trainbudget.api.inputs.values import (
    fraction,
    money,
    nonnegative_float,
    positive_int,
    token_count,
)
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.fits import FitsRule, rule_for
from trainbudget.core.single.estimate import (
    DEFAULT_MFU,
    EstimateRequest,
)
from trainbudget.core.single.training_time import tokens_from_epochs
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_precision


def _tokens(args: argparse.Namespace) -> float | None:
    epoch_args = (args.epochs, args.samples, args.mean_length)
    if args.tokens is not None:
        if any(a is not None for a in epoch_args):
            raise SpecError(
                "--tokens",
                args.tokens,
                "give either --tokens or --epochs/--samples/--mean-length, not both",
            )
        return token_count("tokens", args.tokens)
    if all(a is None for a in epoch_args):
        return None
    if any(a is None for a in epoch_args):
        raise SpecError(
            "--epochs", args.epochs, "--epochs, --samples and --mean-length must be given together"
        )
    return tokens_from_epochs(
        epochs=nonnegative_float("epochs", args.epochs),
        n_samples=nonnegative_float("samples", args.samples),
        mean_tokens_per_sample=nonnegative_float("mean_length", args.mean_length),
    )


def request_from_args(args: argparse.Namespace, seq_len: int | None = None) -> EstimateRequest:
    take_assumptions(args)
    if seq_len is None and args.seq_len:
        seq_len = positive_int("seq_len", args.seq_len)
    tokens = _tokens(args)
    price = None
    if args.price_per_gpu_hour is not None:
        price = money("price_per_gpu_hour", args.price_per_gpu_hour)
        if tokens is None:
            raise SpecError(
                "price_per_gpu_hour",
                args.price_per_gpu_hour,
                "prices the run's GPU-hours, which need --tokens (or --epochs, --samples and "
                "--mean-length)",
            )
    return EstimateRequest(
        model=resolve(args.model, args.overrides),
        hardware=get_hardware(args.gpu),
        tokens=tokens,
        n_gpus=positive_int("gpus", args.gpus),
        mfu=fraction("mfu", args.mfu) if args.mfu is not None else DEFAULT_MFU,
        precision=get_precision(args.precision).name,
        optimizer=args.optimizer,
        seq_len=seq_len,
        micro_batch=positive_int("micro_batch", args.micro_batch),
        grad_accum=positive_int("grad_accum", args.grad_accum),
        recompute=args.recompute,
        flash_attention=args.flash_attention,
        causal=args.count_causal,
        flops_formula=args.flops_formula,
        price_per_gpu_hour=price,
    )


def headroom_from_args(args: argparse.Namespace) -> float | None:
    """--memory-headroom as a fraction; None when not given (the device fits rule)."""
    if args.memory_headroom is None:
        return None
    return fraction("memory_headroom", args.memory_headroom)


def rule_from_args(args: argparse.Namespace, framework_row: str) -> FitsRule:
    """The fits rule of the answer: --memory-headroom's flat rule, else the device rule with
    `framework_row`'s margin (core.parallel.fits.rule_for)."""
    return rule_for(headroom_from_args(args), framework_row)


def explicit_options(args: argparse.Namespace) -> dict:
    """The options the user gave, read before take_assumptions fills the unstated ones."""
    return {k: getattr(args, k) for k in ("recompute", "micro_batch")}
