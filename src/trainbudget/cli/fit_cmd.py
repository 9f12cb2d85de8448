"""`trainbudget fit`: the largest model whose training state fits a set of GPUs."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import add_optimizer_arg, dumps_json, positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.single.memory import fit_max_params
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import dense_bytes_per_param, get_optimizer, get_precision
from trainbudget.core.units import format_bytes, format_count


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--gpus", required=True, help="number of GPUs pooled (fully sharded)")
    p.add_argument("--gpu", required=True, help="accelerator (see `trainbudget hardware`)")
    add_optimizer_arg(p)
    p.add_argument(
        "--precision", default="bf16-mixed", help="precision policy (default bf16-mixed)"
    )
    p.add_argument(
        "--reserve",
        default="0",
        help="fraction of memory kept free for activations and buffers (default 0)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    hw = get_hardware(args.gpu)
    n_gpus = positive_int("gpus", args.gpus)
    try:
        reserve = float(args.reserve)
    except ValueError:
        raise SpecError("reserve", args.reserve, "must be a number in [0, 1)") from None
    max_params = fit_max_params(
        n_gpus=n_gpus,
        memory_bytes_per_gpu=hw.memory_bytes,
        precision=args.precision,
        optimizer=args.optimizer,
        reserve_fraction=reserve,
    )
    per_param = dense_bytes_per_param(get_precision(args.precision), get_optimizer(args.optimizer))
    if args.json:
        print(
            dumps_json(
                {
                    "max_params": max_params,
                    "gpus": n_gpus,
                    "gpu": hw.name,
                    "memory_bytes_per_gpu": hw.memory_bytes,
                    "bytes_per_param": per_param,
                    "precision": args.precision,
                    "optimizer": args.optimizer,
                    "reserve": reserve,
                    "assumptions": [
                        "weights, gradients and optimizer state fully sharded over the "
                        "GPUs (ZeRO-3/FSDP); activations and buffers not included "
                        "beyond --reserve"
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{n_gpus} x {hw.name} ({format_bytes(hw.memory_bytes)} each) with {args.optimizer}, "
        f"{args.precision}: {per_param:g} bytes/parameter"
    )
    print(
        f"max params = {n_gpus} x {format_bytes(hw.memory_bytes)} x (1 - {reserve:g}) / "
        f"{per_param:g} B = {max_params:.4g} ({format_count(max_params)})"
    )
    print("(activations excluded; state fully sharded across the GPUs)")
    return 0
