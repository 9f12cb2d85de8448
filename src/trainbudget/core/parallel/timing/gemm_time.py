"""Time of one GEMM shape (or a batch of them): the achievable matmul rate less the shape's tile
and wave quantization over the GPU's SMs (split-K for few, deep tiles), or its operands' bytes
at the HBM rate, whichever is slower, and the serial epilogue of Hopper and Ampere tiles.
Numbers for one plan or arrays for the planner's grid (`xp`)."""

from __future__ import annotations

from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.timing.efficiency import Efficiency

GEMM_TILE_ROWS, GEMM_TILE_COLS = 256, 128
"""Output tile of one thread block of a large GEMM: NVIDIA's 'Matrix Multiplication
Background User's Guide' (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-
multiplication, 'Tile quantization' and 'Wave quantization') works its A100 example with
256 x 128 tiles, the largest cuBLAS uses; Hopper's CUTLASS kernels use 128 x 256 (the same
area, so the same model)."""


SPLIT_K_MIN_DEPTH = 512
"""Shortest slice of the contraction a split-K GEMM gives one thread block (8 iterations of a
64-deep K tile). A GEMM with fewer output tiles than SMs and a long K -- a weight gradient,
(in, out) contracted over every token -- is split over K (CUTLASS 'Efficient GEMM in CUDA',
'Parallelized Reductions': split-K partitions the reduction across thread blocks when M and N
are small and K large; cuBLAS's heuristics choose it for such shapes), so its slices fill the
SMs a wave of output tiles alone would leave idle."""


def gemm_shape_efficiency(
    m: Any, n: Any, sms: int, batch: Any = 1, xp: Ops = SCALAR, k: Any = 0
) -> Any:
    """Share of the GPU's tile slots a `batch` of (m, n) outputs fills: the tiles they need,
    batch x ceil(m / 256) x ceil(n / 128), run in waves of one tile per SM; the useful
    batch x m x n elements over the waves x SMs x tile area the GPU spends (tile quantization:
    partial tiles at the edges; wave quantization: a last wave that leaves SMs idle). Fewer
    tiles than SMs over a contraction `k` (0: not given) are split over K into up to
    sms // tiles slices of at least SPLIT_K_MIN_DEPTH. 1 when `sms` is 0 (not stated)."""
    if not sms:
        return 1.0
    tiles = batch * xp.ceil(m / GEMM_TILE_ROWS) * xp.ceil(n / GEMM_TILE_COLS)
    # sms // tiles and k // 512 as -ceil(-q), the floor of q = sms / tiles (a quotient of
    # integers, never rounded across an integer) and q = k / 512 (exact): numpy's floor
    # division of floats is some 50 times slower than its ceil
    splits = xp.maximum(1, xp.minimum(-xp.ceil(-(sms / tiles)), -xp.ceil(-(k / SPLIT_K_MIN_DEPTH))))
    waves = xp.ceil(tiles * splits / sms) / splits
    return batch * m * n / (waves * sms * GEMM_TILE_ROWS * GEMM_TILE_COLS)


def matmul_seconds(
    flops: Any,
    m: Any,
    n: Any,
    k: Any,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    xp: Ops = SCALAR,
    sms: int = 0,
    batch: Any = 1,
    fraction: float | None = None,
    serial_epilogue: bool = False,
) -> Any:
    """Roofline of one GEMM shape (m, k) @ (k, n), or a batch of them (attention's per-head
    GEMMs; `flops` covers the batch): compute at the achievable peak (`eff` resolved, or the
    large-GEMM `fraction` of this dtype's peak where given) less the shape's tile and wave
    quantization on `sms` SMs, or the bytes of both operands and the result at the achievable
    HBM bandwidth, whichever is slower. `serial_epilogue`: the output written after the
    K loop, not beside it (`EPILOGUE`), adds its bytes at the HBM rate."""
    bytes_moved = e * (m * k + k * n + m * n)
    share = matmul_rate_fraction(eff) if fraction is None else fraction * eff.in_training
    rate = peak * share * gemm_shape_efficiency(m, n, sms, batch, xp, k)
    compute = flops / rate
    if serial_epilogue:
        compute = compute + flops / (2 * m * n * k) * e * m * n / hbm
    return xp.maximum(compute, flops / (2 * m * n * k) * bytes_moved / (hbm * eff.hbm))


EPILOGUE = (
    "a Hopper or Ampere GEMM tile writes its output only after its K loop: a GEMM of "
    "contraction k then keeps k / (k + K_half) of the large-GEMM rate, K_half = e_out x "
    "fraction x peak / (2 x HBM bytes/s) (237 for bf16, 419 for FP8 on H100 SXM) -- the "
    "same as adding the output's bytes at the HBM rate; no fitted parameter, it reproduces "
    "DeepGEMM's FP8 K sweep on H800 within -4.1 to +4.8 % (core.spec.kernel_costs, "
    "DEEPGEMM_K_SWEEP); Blackwell overlaps it (kernel_costs.EPILOGUE_OVERLAPPED)"
)


def matmul_rate_fraction(eff: Efficiency) -> float:
    """The fraction of the dense peak a well-shaped GEMM runs at inside a training step."""
    if eff.matmul is None:
        raise ValueError("Efficiency.matmul is None: resolve it against the hardware first")
    return eff.matmul * eff.in_training
