"""`trainbudget bench`: this device's matmul FLOP/s and copy bandwidth (its roofline), as
fractions of the catalog peaks where the device has a catalog row (seed 001, S-mfu).

torch is imported inside run() only: `trainbudget --help` and the other commands stay fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from trainbudget.cli.args import dumps_json, duration_seconds, positive_int, writable_file
from trainbudget.core.errors import SpecError
from trainbudget.core.units import format_bytes, format_flops_rate, parse_bytes

if TYPE_CHECKING:  # annotations only: importing these at run time is deferred to run()
    from trainbudget.profile.bench import BenchReport, MatmulResult


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument(
        "--dtype",
        default="fp32,bf16",
        help="comma-separated: fp32 (TF32 off), tf32 (CUDA only), bf16, fp16 (default fp32,bf16)",
    )
    p.add_argument(
        "--sizes",
        help="comma-separated matrix sizes n of n x n @ n x n "
        "(default 256,512,1024,2048 on a CPU, 1024,2048,4096,8192 on a GPU)",
    )
    p.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default)")
    p.add_argument("--repeats", default="5", help="timed runs per size, median kept (default 5)")
    p.add_argument(
        "--bandwidth-bytes",
        help="bytes copied by the bandwidth test (default 256MiB on a CPU, 1GiB on a GPU)",
    )
    p.add_argument(
        "--max-sample-seconds",
        default="1",
        help="skip sizes whose one matmul is predicted to take longer (default 1; "
        "a CPU without bf16 units takes minutes at n = 2048)",
    )
    p.add_argument(
        "--save-calibration",
        metavar="PATH",
        help="write the achieved fractions of the catalog peaks as JSON to PATH",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def parse_dtypes(text: str) -> list[str]:
    from trainbudget.profile.bench import BENCH_DTYPES

    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    if not names:
        raise SpecError("dtype", text, "must list at least one of " + ", ".join(BENCH_DTYPES))
    for name in names:
        if name not in BENCH_DTYPES:
            raise SpecError("dtype", name, "must be one of " + ", ".join(BENCH_DTYPES))
    return list(dict.fromkeys(names))  # drop repeats, keep order


def parse_sizes(text: str) -> list[int]:
    from trainbudget.profile.bench import MAX_SIZE

    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise SpecError("sizes", text, "must list at least one positive integer")
    sizes = [positive_int("sizes", s) for s in parts]
    for n in sizes:
        if n > MAX_SIZE:
            raise SpecError("sizes", n, f"must be <= {MAX_SIZE}")
    return list(dict.fromkeys(sizes))


def _progress(r: MatmulResult) -> None:
    sys.stderr.write(
        f"bench: {r.dtype} n={r.n}: {format_flops_rate(r.achieved_flops_per_second)}\n"
    )
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    # validate everything before importing torch or timing anything
    dtypes = parse_dtypes(args.dtype)
    sizes = parse_sizes(args.sizes) if args.sizes is not None else None
    repeats = positive_int("repeats", args.repeats)
    max_seconds = duration_seconds("max-sample-seconds", args.max_sample_seconds)
    if max_seconds <= 0:
        raise SpecError("max-sample-seconds", args.max_sample_seconds, "must be positive")
    if args.save_calibration:  # before the benchmark runs, not after
        writable_file("save-calibration", args.save_calibration)
    n_bytes = None
    if args.bandwidth_bytes is not None:
        n_bytes = int(parse_bytes(args.bandwidth_bytes, "bandwidth-bytes"))
        if n_bytes <= 0:
            raise SpecError("bandwidth-bytes", args.bandwidth_bytes, "must be positive")
        _fits_host_memory(args.bandwidth_bytes, n_bytes)

    from trainbudget.profile import bench
    from trainbudget.profile.device import resolve_device

    device = resolve_device(args.device)
    kind = device.split(":")[0]
    for dtype in dtypes:
        bench.check_dtype(dtype, kind)
    report = bench.run_bench(
        sizes or bench.DEFAULT_SIZES[kind],
        dtypes,
        device,
        bandwidth_bytes=n_bytes or bench.DEFAULT_BANDWIDTH_BYTES[kind],
        repeats=repeats,
        max_sample_seconds=max_seconds,
        on_result=_progress,
    )
    notes = list(report.notes)
    if args.save_calibration:
        try:
            bench.save_calibration(args.save_calibration, report)
        except OSError as err:  # the folder went away during the run
            raise SpecError(
                "save-calibration", args.save_calibration, f"cannot be written ({err.strerror})"
            ) from None
        notes.append(f"calibration written to {args.save_calibration}")
    if args.json:
        print(dumps_json(_as_json(report, notes)))
    else:
        _print_text(report, notes)
    return 0


def _as_json(report: BenchReport, notes: list[str]) -> dict:
    roof = report.roofline
    results: dict[str, list] = {}
    for r in report.matmul:
        row = r.as_dict()
        del row["dtype"]
        results.setdefault(r.dtype, []).append(row)
    peak_bw = report.peak_bandwidth_bytes_per_second
    return {
        "device": report.device.as_dict(),
        "results": results,
        "skipped_sizes": {d: list(ns) for d, ns in report.skipped.items()},
        "bandwidth_bytes_per_second": report.bandwidth_bytes_per_second,
        "peak_bandwidth_bytes_per_second": peak_bw,
        "bandwidth_fraction": None
        if peak_bw is None
        else report.bandwidth_bytes_per_second / peak_bw,
        "roofline": {
            "best_flops_per_second": dict(roof.best_flops_per_second),
            "ridge_flops_per_byte": dict(roof.ridge_flops_per_byte),
            "peak_ridge_flops_per_byte": dict(roof.peak_ridge_flops_per_byte),
        },
        "notes": notes,
    }


def _print_text(report: BenchReport, notes: list[str]) -> None:
    dev = report.device
    print(f"device: {dev.name} ({dev.kind}), catalog row: {dev.catalog_key or 'none'}")
    print(f"{'dtype':<6} {'n':>6} {'seconds':>10} {'achieved':>16} {'peak':>16} {'mfu':>7}")
    for r in report.matmul:
        peak = format_flops_rate(r.peak_flops_per_second) if r.peak_flops_per_second else "-"
        mfu = f"{r.mfu:.1%}" if r.mfu is not None else "-"
        print(
            f"{r.dtype:<6} {r.n:>6} {r.seconds:>10.3g} "
            f"{format_flops_rate(r.achieved_flops_per_second):>16} {peak:>16} {mfu:>7}"
        )
    bw = f"bandwidth: {format_bytes(report.bandwidth_bytes_per_second)}/s"
    if report.peak_bandwidth_bytes_per_second:
        frac = report.bandwidth_bytes_per_second / report.peak_bandwidth_bytes_per_second
        bw += f" ({frac:.1%} of {format_bytes(report.peak_bandwidth_bytes_per_second)}/s)"
    print(bw)
    roof = report.roofline
    for dtype, ridge in roof.ridge_flops_per_byte.items():
        line = f"ridge point {dtype}: {ridge:.4g} FLOP/byte measured"
        if dtype in roof.peak_ridge_flops_per_byte:
            line += f", {roof.peak_ridge_flops_per_byte[dtype]:.4g} datasheet"
        print(line)
    for note in notes:
        print(f"note: {note}")


def _fits_host_memory(given: str, n_bytes: int) -> None:
    """The copy benchmark holds two buffers of `n_bytes`: refused before any work where they
    exceed this machine's physical memory (a GPU's is checked when they are allocated)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf here: the allocation decides
        return
    if 2 * n_bytes > physical:
        rule = (
            f"the copy benchmark holds two buffers of it, more than this machine's "
            f"{format_bytes(physical)} of memory"
        )
        raise SpecError("bandwidth-bytes", given, rule)
