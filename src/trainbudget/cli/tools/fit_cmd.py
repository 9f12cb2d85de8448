"""`trainbudget fit`: the largest model that trains on a set of GPUs: its fully sharded state
plus one micro-batch's activations per GPU (and the seed's state-only rule beside it)."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import add_optimizer_arg, dumps_json, fraction, positive_int
from trainbudget.core.parallel.fits import allocated_limit_bytes, rule_for
from trainbudget.core.single.fit import FIT_SHAPE_RULE, fit_with_activations
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
from trainbudget.core.spec.frameworks import GENERIC
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import dense_bytes_per_param, get_optimizer, get_precision
from trainbudget.core.units import format_bytes, format_count

FIT_SEQ_LEN = 4096
"""Default tokens per sequence: Llama 2's pre-training length (arXiv:2307.09288, Table 1)."""


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--gpus", required=True, help="number of GPUs pooled (fully sharded)")
    p.add_argument("--gpu", required=True, help="accelerator (see `trainbudget hardware`)")
    add_optimizer_arg(p)
    p.add_argument(
        "--precision", default="bf16-mixed", help="precision policy (default bf16-mixed)"
    )
    p.add_argument(
        "--memory-headroom",
        default=DEFAULT_MEMORY_HEADROOM,
        help="a flat fits rule: state and activations at most this fraction of the memory "
        "each device gives the process (default: the device rule of estimate and plan)",
    )
    p.add_argument(
        "--seq-len",
        default=str(FIT_SEQ_LEN),
        help=f"tokens per sequence of the activations counted (default {FIT_SEQ_LEN})",
    )
    p.add_argument("--micro-batch", default="1", help="sequences per micro-batch (default 1)")
    p.add_argument(
        "--recompute",
        default="full",
        choices=RECOMPUTE_KINDS,
        help="activation recomputation (default full: the least activation memory)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    hw = get_hardware(args.gpu)
    n_gpus = positive_int("gpus", args.gpus)
    headroom = (
        None if args.memory_headroom is None else fraction("memory_headroom", args.memory_headroom)
    )
    # the rule estimate and plan apply, for a ZeRO-3 plan (one NCCL communicator past 1 GPU)
    rule = rule_for(headroom, GENERIC.name)
    limit = allocated_limit_bytes(hw.usable_memory_bytes, rule, 1 if n_gpus > 1 else 0)
    # the precision's compute dtype must have a peak on this GPU, as estimate requires
    hw.peak_flops_per_second(get_precision(args.precision).compute_dtype)
    seq_len = positive_int("seq_len", args.seq_len)
    micro_batch = positive_int("micro_batch", args.micro_batch)
    fit = fit_with_activations(
        n_gpus=n_gpus,
        memory_bytes_per_gpu=limit,
        precision=args.precision,
        optimizer=args.optimizer,
        reserve_fraction=0.0,
        seq_len=seq_len,
        micro_batch=micro_batch,
        recompute=args.recompute,
    )
    per_param = dense_bytes_per_param(get_precision(args.precision), get_optimizer(args.optimizer))
    acts = f"one micro-batch of {micro_batch} x {seq_len:,} tokens, recompute {args.recompute}"
    if args.json:
        print(dumps_json(_json(args, fit, hw, n_gpus, per_param, rule, acts)))
        return 0
    print(
        f"{n_gpus} x {hw.name} ({format_bytes(hw.memory_bytes)} each) with {args.optimizer}, "
        f"{args.precision}: {per_param:g} bytes/parameter"
    )
    print(
        f"state only   {n_gpus} x {format_bytes(limit)} / "
        f"{per_param:g} B = {fit.state_only_params:.4g} ({format_count(fit.state_only_params)}) "
        "(seed 000's rule: no activations)"
    )
    if fit.model is None:
        print(f"max params   none: not even one layer's state and activations fit ({acts})")
        return 0
    print(
        f"max params   {fit.params:.4g} ({format_count(fit.params)}): {fit.model.n_layers} layers "
        f"x d_model {fit.model.d_model}; per GPU state {format_bytes(fit.state_bytes_per_gpu)} + "
        f"activations {format_bytes(fit.activation_bytes_per_gpu)} <= "
        f"{format_bytes(fit.limit_bytes_per_gpu)} (the fits rule: {rule.describe()}; the device "
        f"gives {format_bytes(hw.usable_memory_bytes)})"
    )
    print(f"assuming     ZeRO-3 over all GPUs, no tensor parallelism; {acts}; {FIT_SHAPE_RULE}")
    return 0


def _json(args, fit, hw, n_gpus, per_param, rule, acts) -> dict:
    return {
        "max_params": fit.params,
        "max_params_state_only": fit.state_only_params,
        "n_layers": fit.model.n_layers if fit.model else 0,
        "d_model": fit.model.d_model if fit.model else 0,
        "state_bytes_per_gpu": fit.state_bytes_per_gpu,
        "activation_bytes_per_gpu": fit.activation_bytes_per_gpu,
        "limit_bytes_per_gpu": fit.limit_bytes_per_gpu,
        "gpus": n_gpus,
        "gpu": hw.name,
        "memory_bytes_per_gpu": hw.memory_bytes,
        "bytes_per_param": per_param,
        "precision": args.precision,
        "optimizer": args.optimizer,
        "memory_headroom": rule.headroom,
        "device_memory_bytes": hw.usable_memory_bytes,
        "fits_rule": rule.describe(),
        "seq_len": int(args.seq_len),
        "micro_batch": int(args.micro_batch),
        "recompute": args.recompute,
        "assumptions": [
            "weights, gradients and optimizer state fully sharded over the GPUs (ZeRO-3/FSDP), "
            "no tensor or pipeline parallelism",
            f"activations of {acts}, FlashAttention, on every GPU",
            f"fits: state and activations, the {rule.describe()} (--memory-headroom F: flat)",
            FIT_SHAPE_RULE,
            "max_params_state_only is seed 000's rule: pooled memory / bytes per parameter, "
            "activations excluded",
        ],
    }
