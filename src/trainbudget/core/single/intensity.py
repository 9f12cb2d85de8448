"""Arithmetic intensity (FLOPs per byte moved) and the roofline ridge (seed 004)."""

from __future__ import annotations

from trainbudget.core.errors import SpecError


def dot_intensity(n: int, bytes_per_element: int = 2) -> float:
    """x . y of length n: 2n - 1 FLOPs over 2 reads of n elements and one written scalar.
    bf16: (2N-1)/(4N+2) -> 0.5 FLOP/byte (seed 004, B-ai-dot)."""
    if n <= 0:
        raise SpecError("n", n, "must be a positive integer")
    return (2 * n - 1) / (bytes_per_element * (2 * n + 1))


def matmul_intensity(b: int, d: int, f: int, bytes_per_element: int = 2) -> float:
    """(b, d) @ (d, f): 2bdf FLOPs over reading b*d + d*f and writing b*f elements.
    bf16: 2BDF / (2DF + 2BD + 2BF), which is ~B when B << D, F (seed 004, B-ai-matmul)."""
    for name, v in (("b", b), ("d", d), ("f", f)):
        if v <= 0:
            raise SpecError(name, v, "must be a positive integer")
    return 2 * b * d * f / (bytes_per_element * (d * f + b * d + b * f))


def ridge_intensity(peak_flops_per_second: float, memory_bytes_per_second: float) -> float:
    """FLOPs per byte above which an op is compute-bound: peak / bandwidth.
    TPU v5e bf16: 197e12 / 819e9 = 240.5 (seed 004, B-v5e: "above ~240 tokens per batch")."""
    if memory_bytes_per_second <= 0:
        raise SpecError("memory_bytes_per_second", memory_bytes_per_second, "must be positive")
    return peak_flops_per_second / memory_bytes_per_second
