"""Arithmetic intensity and the roofline ridge (seed 004)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.intensity import dot_intensity, matmul_intensity, ridge_intensity


@pytest.mark.parametrize("n", [1, 2, 100, 4096])
def test_dot_bf16(n: int) -> None:
    """Seed 004 B-ai-dot: 2N-1 FLOPs over 2N reads + 1 write of 2 bytes = (2N-1)/(4N+2)."""
    assert dot_intensity(n) == pytest.approx((2 * n - 1) / (4 * n + 2))


def test_dot_tends_to_half() -> None:
    """(2N-1)/(4N+2) -> 1/2 FLOP per byte as N grows: a dot product is memory-bound."""
    assert dot_intensity(10**9) == pytest.approx(0.5, rel=1e-8)
    assert dot_intensity(1) == pytest.approx(1 / 6)  # 1 FLOP / 6 bytes


@pytest.mark.parametrize("b", [1, 16, 64])
def test_matmul_about_b_when_small(b: int) -> None:
    """Seed 004 B-ai-matmul: 2BDF / (2DF + 2BD + 2BF) = B / (1 + B/F + B/D) ~ B for B << D, F;
    with D = F = 16384 and B <= 64 the shortfall is at most 2*64/16384 < 1 %."""
    d = f = 16384
    assert matmul_intensity(b, d, f) == pytest.approx(b / (1 + b / f + b / d))
    assert matmul_intensity(b, d, f) == pytest.approx(b, rel=0.01)


def test_matmul_fp32_halves() -> None:
    """Four-byte elements move twice the bytes for the same FLOPs."""
    assert matmul_intensity(8, 64, 32, 4) == pytest.approx(matmul_intensity(8, 64, 32) / 2)


def test_ridge_tpu_v5e() -> None:
    """Seed 004 B-v5e: 197e12 FLOP/s / 819e9 B/s = 240.5 FLOP/byte (batch above ~240)."""
    assert ridge_intensity(197e12, 819e9) == pytest.approx(240.5, abs=0.05)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: dot_intensity(0), "n"),
        (lambda: matmul_intensity(0, 4, 4), "b"),
        (lambda: matmul_intensity(4, -1, 4), "d"),
        (lambda: matmul_intensity(4, 4, 0), "f"),
        (lambda: ridge_intensity(1e12, 0), "memory_bytes_per_second"),
    ],
)
def test_errors(call, field: str) -> None:
    """Sizes and bandwidth must be positive."""
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field
