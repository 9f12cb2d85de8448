"""`trainbudget mfu`: utilisation from a measured step time (seed 003, T-mfu)."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import (
    add_model_args,
    add_peak_flops_arg,
    dumps_json,
    duration_seconds,
    peak_flops_from_args,
    positive_int,
)
from trainbudget.core.single.estimate import BARE_MODEL_SEQ_LEN
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.training_time import mfu_from_measurement
from trainbudget.core.spec.defaults import DEFAULT_GPU, default_seq_len
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import format_flops_rate


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--step-seconds", required=True, help="measured seconds per optimizer step")
    p.add_argument(
        "--sequences",
        required=True,
        help="sequences per step (micro-batch x accumulation x data-parallel)",
    )
    p.add_argument(
        "--seq-len",
        help="tokens per sequence (default: the model's pre-training length; dense:N 2048)",
    )
    p.add_argument("--gpus", default="1", help="GPUs the step ran on (default 1)")
    p.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        help=f"accelerator whose peak to divide by (default {DEFAULT_GPU}, as every command)",
    )
    p.add_argument("--dtype", default="bf16", help="whose peak to divide by (default bf16)")
    add_peak_flops_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    model = resolve_model(args.model, args.overrides)
    hw = get_hardware(args.gpu)
    if args.seq_len:
        seq_len = positive_int("seq_len", args.seq_len)
    elif isinstance(model, ModelSpec):
        seq_len = default_seq_len(model).value
    else:
        seq_len = BARE_MODEL_SEQ_LEN
    flops = training_flops(model, seq_len)
    per_step = flops.model_flops_per_token * seq_len * positive_int("sequences", args.sequences)
    step_seconds = duration_seconds("step_seconds", args.step_seconds)
    n_gpus = positive_int("gpus", args.gpus)
    peak = peak_flops_from_args(args, hw, args.dtype)
    mfu = mfu_from_measurement(
        flops_per_step=per_step,
        step_seconds=step_seconds,
        n_gpus=n_gpus,
        peak_flops_per_second=peak,
    )
    if args.json:
        print(
            dumps_json(
                {
                    "mfu": mfu,
                    "flops_per_step": per_step,
                    "achieved_flops_per_second": per_step / step_seconds,
                    "peak_flops_per_second": peak * n_gpus,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{per_step:.4g} FLOPs/step / {step_seconds} s = {per_step / step_seconds:.4g} FLOP/s "
        f"= {mfu * 100:.2f} % of {n_gpus} x {hw.name} {args.dtype} peak"
        + (f" ({format_flops_rate(peak)}, --peak-flops)" if args.peak_flops else "")
    )
    return 0
