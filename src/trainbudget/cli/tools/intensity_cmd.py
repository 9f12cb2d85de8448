"""`trainbudget intensity`: FLOPs per byte of an op against a chip's ridge point (seed 004)."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import add_peak_flops_arg, dumps_json, peak_flops_from_args, positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.single.intensity import dot_intensity, matmul_intensity, ridge_intensity
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.spec.dtypes import bytes_per_element, get_format
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.units import format_flops_rate


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument(
        "--op",
        required=True,
        choices=("dot", "matmul"),
        help="dot: x . y of length --n; matmul: (--b, --d) @ (--d, --f)",
    )
    p.add_argument("--n", help="dot length")
    p.add_argument("--b", help="matmul rows (tokens in the batch)")
    p.add_argument("--d", help="matmul inner dimension")
    p.add_argument("--f", help="matmul output columns")
    p.add_argument("--dtype", default="bf16", help="element type (default bf16)")
    p.add_argument("--gpu", default=DEFAULT_GPU, help="chip whose ridge point to compare with")
    add_peak_flops_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")


OP_SIZES = {"dot": ("n",), "matmul": ("b", "d", "f")}
"""The sizes each op takes."""


def _need(args: argparse.Namespace, *names: str) -> list[int]:
    for other in sorted({n for sizes in OP_SIZES.values() for n in sizes} - set(names)):
        if getattr(args, other) is not None:
            takes = ", ".join(f"--{n}" for n in names)
            raise SpecError(
                f"--{other}", getattr(args, other), f"is not a size of --op {args.op} ({takes})"
            )
    for name in names:
        if getattr(args, name) is None:
            raise SpecError(f"--{name}", None, f"is required for --op {args.op}")
    return [positive_int(name, getattr(args, name)) for name in names]


def run(args: argparse.Namespace) -> int:
    hw = get_hardware(args.gpu)
    size = bytes_per_element(args.dtype)
    if args.op == "dot":
        (n,) = _need(args, *OP_SIZES["dot"])
        value = dot_intensity(n, size)
    else:
        b, d, f = _need(args, *OP_SIZES["matmul"])
        value = matmul_intensity(b, d, f, size)
    # the chip's peak table is keyed by compute type; both fp8 encodings share the fp8 peak
    fmt = get_format(args.dtype).name
    compute_dtype = "fp8" if fmt.startswith("fp8") else fmt
    peak = peak_flops_from_args(args, hw, compute_dtype)
    ridge = ridge_intensity(peak, hw.hbm_bytes_per_second)
    bound = "compute-bound" if value >= ridge else "memory-bound"
    if args.json:
        print(
            dumps_json(
                {
                    "op": args.op,
                    "intensity_flops_per_byte": value,
                    "ridge_flops_per_byte": ridge,
                    "bound": bound,
                    "gpu": hw.name,
                    "dtype": args.dtype,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{args.op}: {value:.4g} FLOP/byte; {hw.name} {compute_dtype} ridge {ridge:.4g} "
        f"FLOP/byte -> {bound}"
        + (f" (peak {format_flops_rate(peak)}, --peak-flops)" if args.peak_flops else "")
    )
    return 0
