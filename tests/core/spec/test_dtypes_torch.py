"""Check the bit-derived format limits and rounding against PyTorch's own dtypes."""

from __future__ import annotations

import math
import random
import struct

import pytest

from trainbudget.core.spec.dtypes import get_format

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# Our name -> torch dtype attribute; fp8 dtypes only exist in newer torch builds.
_TORCH_NAMES = {
    "fp64": "float64",
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8-e4m3": "float8_e4m3fn",
    "fp8-e5m2": "float8_e5m2",
}
PAIRS = [(ours, getattr(torch, t)) for ours, t in _TORCH_NAMES.items() if hasattr(torch, t)]
IDS = [ours for ours, _ in PAIRS]


@pytest.mark.parametrize(("name", "dtype"), PAIRS, ids=IDS)
def test_limits_match_finfo(name: str, dtype: object) -> None:
    f, fi = get_format(name), torch.finfo(dtype)
    assert f.max_value == fi.max
    assert -f.max_value == fi.min
    assert f.smallest_normal == fi.tiny
    assert f.smallest_normal == getattr(fi, "smallest_normal", fi.tiny)
    assert f.eps == fi.eps
    assert f.bits == fi.bits
    assert f.storage_bytes == torch.tensor([], dtype=dtype).element_size()


@pytest.mark.parametrize(("name", "dtype"), PAIRS, ids=IDS)
def test_smallest_subnormal_is_representable(name: str, dtype: object) -> None:
    f = get_format(name)
    got = torch.tensor([f.smallest_subnormal], dtype=torch.float64).to(dtype).double().item()
    assert got == f.smallest_subnormal
    # Just under half of it rounds to zero in torch too.
    half = torch.tensor([f.smallest_subnormal * 0.49], dtype=torch.float64).to(dtype)
    assert half.double().item() == 0.0


def test_S_dtypes_underflow_matches_torch() -> None:
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        assert get_format(name).round_trips(1e-8) == torch.tensor([1e-8], dtype=dtype).item()
    assert torch.tensor([1e-8], dtype=torch.float16).item() == 0.0


def _to_fp32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _samples(name: str, n: int = 400) -> list[float]:
    """Log-uniform magnitudes from below the smallest subnormal up to max, both signs, plus ties.

    Values are made exactly representable in fp32 first: torch converts Python floats to the
    narrow dtypes through fp32, and a double rounded twice can differ from one rounding (the
    double-rounding case), which would test torch's path rather than our rounding.
    """
    f = get_format(name)
    rng = random.Random(0)
    lo, hi = math.log2(f.smallest_subnormal) - 2, math.log2(f.max_value)
    xs: list[float] = []
    for _ in range(n):
        mag = min(2.0 ** rng.uniform(lo, hi), f.max_value)
        xs.append(rng.choice((-1.0, 1.0)) * mag)
        # A tie: halfway between a representable value and the next one up.
        v = f.round_trips(mag)
        exp = max(math.frexp(v)[1] - 1, 1 - f.bias) if v else 1 - f.bias
        mid = v + math.ldexp(0.5, exp - f.mantissa_bits)
        if mid < f.max_value:
            xs.append(mid)
    if name != "fp32":
        xs = [_to_fp32(x) for x in xs]
    return xs


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


@pytest.mark.parametrize(
    ("name", "dtype"), [p for p in PAIRS if p[0] != "fp64"], ids=[i for i in IDS if i != "fp64"]
)
def test_round_trips_agrees_with_torch(name: str, dtype: object) -> None:
    f = get_format(name)
    xs = _samples(name)
    got = torch.tensor(xs, dtype=torch.float64).to(dtype).double().tolist()
    direct = torch.tensor(xs, dtype=dtype).double().tolist()
    bad = [
        (x, f.round_trips(x), t, d)
        for x, t, d in zip(xs, got, direct, strict=True)
        if not (_same(f.round_trips(x), t) and _same(t, d))
    ]
    assert not bad, bad[:5]


@pytest.mark.parametrize(("name", "dtype"), PAIRS, ids=IDS)
def test_overflow_matches_torch(name: str, dtype: object) -> None:
    """IEEE formats overflow to inf in torch as in IEEE 754; E4M3 has no inf.

    torch 2.13 saturates E4M3 to +-448 (as `round_trips` does); other torch versions have
    produced NaN there (OCP's non-saturating mode), so for E4M3 either is accepted.
    """
    f = get_format(name)
    step = math.ldexp(1.0, math.frexp(f.max_value)[1] - 1 - f.mantissa_bits)
    for x in (f.max_value + step * 0.49, f.max_value + step * 0.5, f.max_value * 4, math.inf):
        for sign in (1.0, -1.0):
            v = sign * x
            ours = f.round_trips(v)
            theirs = torch.tensor([v], dtype=torch.float64).to(dtype).double().item()
            if name == "fp8-e4m3" and math.isnan(theirs):
                continue
            assert _same(ours, theirs), (v, ours, theirs)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fnuz"), reason="torch without FNUZ fp8")
def test_mi300x_fnuz_fp8_is_not_ocp_e4m3() -> None:
    """The mi300x row's note: MI300X (gfx942) computes in the FNUZ FP8 variants (HIP
    fp8_numbers page), whose E4M3 tops out at 240, not OCP E4M3's 448 that `fp8-e4m3` models;
    one byte per element either way."""
    fnuz = torch.finfo(torch.float8_e4m3fnuz)
    assert fnuz.max == 240.0
    assert get_format("fp8-e4m3").max_value == 448.0
    assert torch.tensor([], dtype=torch.float8_e4m3fnuz).element_size() == 1
