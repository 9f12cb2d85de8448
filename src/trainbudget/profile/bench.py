"""Measure this device's roofline: matmul FLOP/s per dtype and copy bandwidth, against the
catalog's datasheet peaks where the device has a catalog row (seed 001, S-mfu:
MFU = achieved FLOP/s / promised FLOP/s).

Timing follows llm.c's habits: warm-up runs dropped (cuBLAS picks its kernel and the caching
allocator fills on the first calls), the device synchronised before each clock read (CUDA
kernels run asynchronously, so an unsynchronised clock times only the launch), and the median
of the samples reported (one slow sample from a context switch does not move it).

The result can be saved as a calibration file: achieved fractions of the catalog peaks, from
which `efficiency_from_calibration` builds the step-time model's `Efficiency`. Reading the file
lives in the core (core/parallel/timing/calibration.py), so that no reader needs the profiler;
torch is imported only inside the functions here that run kernels.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.timing.calibration import (
    CALIBRATION_FORMAT,
    CALIBRATION_VERSION,
    Calibration,
)
from trainbudget.core.single.flops import matmul_flops
from trainbudget.core.single.intensity import ridge_intensity
from trainbudget.core.spec.hardware import HARDWARE
from trainbudget.core.units import GiB, MiB
from trainbudget.profile.device import DeviceInfo, identify_device

BENCH_DTYPES = ("fp32", "tf32", "bf16", "fp16")
"""fp32 runs with TF32 off and is compared with the catalog's non-tensor fp32 peak; tf32 is
fp32 storage with TF32 tensor-core matmuls (CUDA only)."""
DEFAULT_SIZES = MappingProxyType({"cpu": (256, 512, 1024, 2048), "cuda": (1024, 2048, 4096, 8192)})
"""Matrix sizes n of the n x n @ n x n benchmark. On a GPU, n <= 512 measures launch latency
more than the tensor cores, so its defaults start larger."""
DEFAULT_BANDWIDTH_BYTES = MappingProxyType({"cpu": 256 * MiB, "cuda": GiB})
"""Bytes copied by the bandwidth benchmark: far beyond any L2/L3 cache."""
MAX_SIZE = 32768
"""Largest n accepted: three n x n fp32 tensors are then 12 GiB."""
MAX_SAMPLE_SECONDS = 1.0
"""Sizes whose one matmul is predicted to take longer are skipped: a CPU without bf16 units
runs bf16 at ~1 GFLOP/s, where n = 2048 would take a minute per sample."""
PROBE_SIZE = 128
"""The size timed once to predict the first requested size of a dtype."""


@dataclass(frozen=True, kw_only=True)
class MatmulResult:
    n: int
    dtype: str
    seconds: float
    """Median time of one (n, n) @ (n, n) matmul."""
    flops: int
    """2 n^3 (seed 001: one multiply and one add per (i, j, k))."""
    achieved_flops_per_second: float
    peak_flops_per_second: float | None
    """The catalog's dense peak for this dtype; None without a catalog row (CPUs, unknown GPUs)."""
    mfu: float | None
    """achieved / peak; None where no peak is known."""

    def as_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "dtype": self.dtype,
            "seconds": self.seconds,
            "flops": self.flops,
            "achieved_flops_per_second": self.achieved_flops_per_second,
            "peak_flops_per_second": self.peak_flops_per_second,
            "mfu": self.mfu,
        }


@dataclass(frozen=True, kw_only=True)
class Roofline:
    best_flops_per_second: Mapping[str, float]
    """Highest achieved matmul FLOP/s per dtype, over all sizes."""
    bandwidth_bytes_per_second: float
    """Achieved copy bandwidth (reads + writes)."""
    ridge_flops_per_byte: Mapping[str, float]
    """Measured ridge point per dtype: best FLOP/s / bandwidth. Ops of lower arithmetic
    intensity are memory-bound on this device."""
    peak_ridge_flops_per_byte: Mapping[str, float]
    """The datasheet ridge (peak FLOP/s / HBM bandwidth) per dtype; empty without a catalog row."""


@dataclass(frozen=True, kw_only=True)
class BenchReport:
    device: DeviceInfo
    matmul: tuple[MatmulResult, ...]
    bandwidth_bytes_per_second: float
    peak_bandwidth_bytes_per_second: float | None
    """The catalog's HBM bandwidth; None without a catalog row."""
    skipped: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """dtype -> sizes not timed because one matmul would exceed the time limit."""
    notes: tuple[str, ...] = field(default=())

    @property
    def roofline(self) -> Roofline:
        return roofline(self.matmul, self.bandwidth_bytes_per_second, self.device.catalog_key)


# ---------------------------------------------------------------- timing


def check_dtype(dtype: str, device_kind: str) -> None:
    if dtype not in BENCH_DTYPES:
        raise SpecError("dtype", dtype, "must be one of " + ", ".join(BENCH_DTYPES))
    if dtype == "tf32" and device_kind != "cuda":
        raise SpecError("dtype", dtype, "TF32 is a CUDA tensor-core mode; use fp32 on a CPU")


@contextlib.contextmanager
def _fp32_matmul_precision(dtype: str) -> Iterator[None]:
    """TF32 on for "tf32" and off for everything else, restored afterwards."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _median_seconds(run: Callable[[], object], device: object, warmup: int, repeats: int) -> float:
    """Median wall time of `run` over `repeats` samples, after `warmup` unrecorded calls."""
    import torch

    dev = torch.device(device)
    if warmup < 0 or repeats < 1:
        raise SpecError("repeats", (warmup, repeats), "need warmup >= 0 and repeats >= 1")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeats):
        sync()  # nothing queued before the clock starts
        start = time.perf_counter()
        run()
        sync()  # the kernel has finished, not merely been launched
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def time_matmul(n: int, dtype: str, device: object, *, warmup: int = 2, repeats: int = 5) -> float:
    """Median seconds of one (n, n) @ (n, n) matmul in `dtype` on `device`."""
    import torch

    check_dtype(dtype, torch.device(device).type)
    if not 0 < n <= MAX_SIZE:
        raise SpecError("sizes", n, f"must be in 1..{MAX_SIZE}")
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=gen).to(torch_dtype)  # (n, n)
    b = torch.randn(n, n, device=device, generator=gen).to(torch_dtype)  # (n, n)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)  # reused: no allocation timed
    with _fp32_matmul_precision(dtype):
        return _median_seconds(lambda: torch.matmul(a, b, out=out), device, warmup, repeats)


def bandwidth_bench(n_bytes: int, device: object, *, warmup: int = 2, repeats: int = 5) -> float:
    """Achieved bytes/s of copying `n_bytes` between two buffers: each byte is read once and
    written once, so 2 x n_bytes move per copy (a STREAM "copy")."""
    import torch

    if n_bytes <= 0:
        raise SpecError("bandwidth_bytes", n_bytes, "must be a positive integer")
    try:
        src = torch.ones(n_bytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
    except (RuntimeError, MemoryError):  # torch.OutOfMemoryError is a RuntimeError
        rule = f"two buffers of that size cannot be allocated on {device}: give a smaller one"
        raise SpecError("bandwidth_bytes", n_bytes, rule) from None
    seconds = _median_seconds(lambda: dst.copy_(src), device, warmup, repeats)
    return 2 * n_bytes / seconds


def _peak(catalog_key: str | None, dtype: str) -> float | None:
    if catalog_key is None:
        return None
    return HARDWARE[catalog_key].dense_flops_per_second.get(dtype)


def _predicted_seconds(n: int, dtype: str, device: object, done: Sequence[MatmulResult]) -> float:
    """One matmul's time at size n, scaled by n^3 from the largest size already timed (or from
    one quick probe). Caches make the real time grow faster, so this is a lower bound."""
    same = [r for r in done if r.dtype == dtype]
    if same:
        base_n, base_seconds = same[-1].n, same[-1].seconds
    else:
        base_n = min(n, PROBE_SIZE)
        base_seconds = time_matmul(base_n, dtype, device, warmup=1, repeats=1)
    return base_seconds * (n / base_n) ** 3


def matmul_bench(
    sizes: Sequence[int],
    dtypes: Sequence[str],
    device: object,
    *,
    warmup: int = 2,
    repeats: int = 5,
    max_sample_seconds: float | None = MAX_SAMPLE_SECONDS,
    on_result: Callable[[MatmulResult], None] | None = None,
) -> list[MatmulResult]:
    """Time every (dtype, n) pair, sizes ascending; `on_result` sees each result as it is
    measured. A size whose one matmul is predicted to take over `max_sample_seconds` is
    skipped with every larger size of that dtype (None: time everything)."""
    info = identify_device(device)
    for dtype in dtypes:  # reject a bad dtype before any timing starts
        check_dtype(dtype, info.kind)
    results: list[MatmulResult] = []
    for dtype in dtypes:
        peak = _peak(info.catalog_key, dtype)
        for n in sorted(set(sizes)):
            if max_sample_seconds is not None and (
                _predicted_seconds(n, dtype, device, results) > max_sample_seconds
            ):
                break
            seconds = time_matmul(n, dtype, device, warmup=warmup, repeats=repeats)
            flops = matmul_flops(n, n, n)
            achieved = flops / seconds
            result = MatmulResult(
                n=n,
                dtype=dtype,
                seconds=seconds,
                flops=flops,
                achieved_flops_per_second=achieved,
                peak_flops_per_second=peak,
                mfu=None if peak is None else achieved / peak,
            )
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def roofline(
    results: Sequence[MatmulResult],
    bandwidth_bytes_per_second: float,
    catalog_key: str | None = None,
) -> Roofline:
    """The measured roofline (best FLOP/s per dtype over `bandwidth_bytes_per_second`) and,
    with a catalog row, the datasheet one to compare it with."""
    best: dict[str, float] = {}
    for r in results:
        best[r.dtype] = max(best.get(r.dtype, 0.0), r.achieved_flops_per_second)
    peak_ridge = {}
    if catalog_key is not None:
        hw = HARDWARE[catalog_key]
        for dtype in best:
            peak = hw.dense_flops_per_second.get(dtype)
            if peak is not None:
                peak_ridge[dtype] = ridge_intensity(peak, hw.hbm_bytes_per_second)
    return Roofline(
        best_flops_per_second=MappingProxyType(best),
        bandwidth_bytes_per_second=bandwidth_bytes_per_second,
        ridge_flops_per_byte=MappingProxyType(
            {d: ridge_intensity(f, bandwidth_bytes_per_second) for d, f in best.items()}
        ),
        peak_ridge_flops_per_byte=MappingProxyType(peak_ridge),
    )


def bench_notes(info: DeviceInfo, dtypes: Sequence[str], warmup: int, repeats: int) -> list[str]:
    """What a reader of the numbers needs to know: where peaks came from and how we timed."""
    notes = [
        f"each sample is one n x n @ n x n matmul between device synchronisations; median of "
        f"{repeats} after {warmup} warm-up runs; FLOPs = 2 n^3",
        "bandwidth: one large copy, counted as 2 x its bytes (each byte read and written)",
    ]
    if info.kind == "cpu":
        notes.append("no catalog peak for CPUs: achieved FLOP/s only, mfu null")
    elif info.catalog_key is None:
        notes.append(f"no catalog peak for {info.name}: achieved FLOP/s only, mfu null")
    else:
        hw = HARDWARE[info.catalog_key]
        notes.append(f"peaks: catalog row {hw.name} ({hw.description}), dense")
        notes.extend(
            f"{hw.name} has no dense {d} peak: mfu null"
            for d in dtypes
            if d not in hw.dense_flops_per_second
        )
    if info.kind == "cuda" and "fp32" in dtypes:
        notes.append("fp32 runs with TF32 off; compare it with the non-tensor fp32 peak")
    return notes


def run_bench(
    sizes: Sequence[int],
    dtypes: Sequence[str],
    device: object,
    *,
    bandwidth_bytes: int,
    warmup: int = 2,
    repeats: int = 5,
    max_sample_seconds: float | None = MAX_SAMPLE_SECONDS,
    on_result: Callable[[MatmulResult], None] | None = None,
) -> BenchReport:
    """The matmul and bandwidth benchmarks together, with the notes that explain them."""
    info = identify_device(device)
    results = matmul_bench(
        sizes,
        dtypes,
        device,
        warmup=warmup,
        repeats=repeats,
        max_sample_seconds=max_sample_seconds,
        on_result=on_result,
    )
    bandwidth = bandwidth_bench(bandwidth_bytes, device, warmup=warmup, repeats=repeats)
    hw = HARDWARE[info.catalog_key] if info.catalog_key else None
    notes = bench_notes(info, dtypes, warmup, repeats)
    skipped = {}
    for dtype in dtypes:
        timed = {r.n for r in results if r.dtype == dtype}
        missing = tuple(n for n in sorted(set(sizes)) if n not in timed)
        if missing:
            skipped[dtype] = missing
            notes.append(
                f"{dtype} n={', '.join(map(str, missing))} skipped: one matmul would take over "
                f"{max_sample_seconds:g} s (predicted by n^3 from a smaller size)"
            )
    return BenchReport(
        device=info,
        matmul=tuple(results),
        bandwidth_bytes_per_second=bandwidth,
        peak_bandwidth_bytes_per_second=hw.hbm_bytes_per_second if hw else None,
        skipped=MappingProxyType(skipped),
        notes=tuple(notes),
    )


# ---------------------------------------------------------------- calibration


def calibration_from(report: BenchReport) -> Calibration:
    roof = report.roofline
    fractions = {}
    for dtype, best in roof.best_flops_per_second.items():
        peak = _peak(report.device.catalog_key, dtype)
        if peak is not None:
            fractions[dtype] = best / peak
    peak_bw = report.peak_bandwidth_bytes_per_second
    return Calibration(
        device_name=report.device.name,
        catalog_key=report.device.catalog_key,
        matmul_fraction=MappingProxyType(fractions),
        hbm_fraction=None if peak_bw is None else report.bandwidth_bytes_per_second / peak_bw,
        best_flops_per_second=roof.best_flops_per_second,
        bandwidth_bytes_per_second=report.bandwidth_bytes_per_second,
    )


def save_calibration(path: str | Path, report: BenchReport) -> Calibration:
    """Write `report`'s calibration as JSON to `path`; returns what was written."""
    cal = calibration_from(report)
    doc = {
        "format": CALIBRATION_FORMAT,
        "version": CALIBRATION_VERSION,
        "device_name": cal.device_name,
        "catalog_key": cal.catalog_key,
        "matmul_fraction_of_peak": dict(cal.matmul_fraction),
        "hbm_fraction_of_peak": cal.hbm_fraction,
        "best_flops_per_second": dict(cal.best_flops_per_second),
        "bandwidth_bytes_per_second": cal.bandwidth_bytes_per_second,
    }
    Path(path).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return cal
