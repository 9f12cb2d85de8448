"""Number formats: seed examples (seed 000/002, S-dtypes; seed 001, S-tensor-mem / S-gpt3-ffn)."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.dtypes import (
    FORMATS,
    bytes_per_element,
    get_format,
    tensor_bytes,
)
from trainbudget.core.units import GiB, MiB

# --- seed 000/002, S-dtypes: layouts, limits and the underflow example ---------------------


@pytest.mark.parametrize(
    ("name", "sign", "exp", "mant", "nbytes"),
    [
        ("fp32", 1, 8, 23, 4),
        ("fp16", 1, 5, 10, 2),
        ("bf16", 1, 8, 7, 2),
        ("tf32", 1, 8, 10, 4),
        ("fp64", 1, 11, 52, 8),
        ("fp8-e4m3", 1, 4, 3, 1),
        ("fp8-e5m2", 1, 5, 2, 1),
        ("fp4-e2m1", 1, 2, 1, 0.5),
    ],
)
def test_S_dtypes_layout(name: str, sign: int, exp: int, mant: int, nbytes: float) -> None:
    f = get_format(name)
    assert (f.sign_bits, f.exponent_bits, f.mantissa_bits) == (sign, exp, mant)
    assert f.storage_bytes == nbytes
    assert bytes_per_element(name) == nbytes


def test_S_dtypes_e4m3_max_448() -> None:
    assert get_format("fp8-e4m3").max_value == 448.0


def test_S_dtypes_e5m2_max_57344() -> None:
    assert get_format("fp8-e5m2").max_value == 57344.0


def test_S_dtypes_fp16_max_65504() -> None:
    assert get_format("fp16").max_value == 65504.0


def test_S_dtypes_bf16_eps() -> None:
    assert get_format("bf16").eps == 2.0**-7


def test_S_dtypes_fp16_smallest_subnormal() -> None:
    assert get_format("fp16").smallest_subnormal == 2.0**-24


def test_S_dtypes_underflow() -> None:
    """1e-8 is below fp16's smallest subnormal (~5.96e-8) but far inside bf16's fp32-like range."""
    assert get_format("fp16").round_trips(1e-8) == 0.0
    bf16 = get_format("bf16").round_trips(1e-8)
    assert bf16 != 0.0
    assert abs(bf16 - 1e-8) / 1e-8 <= get_format("bf16").eps / 2


def test_S_dtypes_fp4_max_6() -> None:
    f = get_format("fp4-e2m1")
    assert (f.max_value, f.smallest_normal, f.smallest_subnormal) == (6.0, 1.0, 0.5)


def test_tf32_is_fp32_range_with_fp16_precision() -> None:
    tf32, fp32, fp16 = get_format("tf32"), get_format("fp32"), get_format("fp16")
    assert tf32.bits == 19 and tf32.storage_bytes == 4
    assert tf32.smallest_normal == fp32.smallest_normal
    assert tf32.eps == fp16.eps


def test_known_limits_match_float_info() -> None:
    import sys

    fp64 = get_format("fp64")
    assert fp64.max_value == sys.float_info.max
    assert fp64.smallest_normal == sys.float_info.min
    assert fp64.eps == sys.float_info.epsilon
    assert fp64.smallest_subnormal == 5e-324


def test_bits_and_bias() -> None:
    assert {n: f.bits for n, f in FORMATS.items()} == {
        "fp64": 64,
        "fp32": 32,
        "tf32": 19,
        "fp16": 16,
        "bf16": 16,
        "fp8-e4m3": 8,
        "fp8-e5m2": 8,
        "fp4-e2m1": 4,
    }
    assert get_format("fp16").bias == 15
    assert get_format("fp8-e4m3").bias == 7


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("float32", "fp32"),
        ("float16", "fp16"),
        ("bfloat16", "bf16"),
        ("e4m3", "fp8-e4m3"),
        ("e5m2", "fp8-e5m2"),
        ("float64", "fp64"),
        ("fp8", "fp8-e4m3"),
        ("fp8_e4m3", "fp8-e4m3"),
        ("fp8_e5m2", "fp8-e5m2"),
        ("torch.float8_e4m3fn", "fp8-e4m3"),
        ("torch.bfloat16", "bf16"),
        ("BF16", "bf16"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert get_format(alias) is FORMATS[name]


# --- round_trips: rounding, subnormals, overflow -------------------------------------------


def test_round_trips_ties_to_even() -> None:
    fp16 = get_format("fp16")
    # Between 2048 and 4096 fp16 steps by 2: 2049 is a tie -> 2048 (even), 2051 -> 2052.
    assert fp16.round_trips(2049.0) == 2048.0
    assert fp16.round_trips(2051.0) == 2052.0
    assert fp16.round_trips(1.0 + fp16.eps / 2) == 1.0
    assert fp16.round_trips(1.0 + fp16.eps * 1.5) == 1.0 + 2 * fp16.eps


def test_round_trips_subnormals() -> None:
    fp16 = get_format("fp16")
    tiny = fp16.smallest_subnormal
    assert fp16.round_trips(tiny) == tiny
    assert fp16.round_trips(tiny * 0.5) == 0.0  # tie -> 0 (even)
    assert fp16.round_trips(tiny * 0.51) == tiny
    assert fp16.round_trips(tiny * 2.5) == tiny * 2  # tie -> even
    assert math.copysign(1.0, fp16.round_trips(-1e-8)) == -1.0  # keeps the sign of zero


def test_round_trips_overflow_per_format() -> None:
    assert get_format("fp16").round_trips(65504.0) == 65504.0
    assert get_format("fp16").round_trips(65519.0) == 65504.0
    assert get_format("fp16").round_trips(65520.0) == math.inf  # tie rounds up past max
    assert get_format("fp16").round_trips(-1e6) == -math.inf
    e4m3 = get_format("fp8-e4m3")
    assert e4m3.round_trips(464.0) == 448.0  # tie -> even mantissa 110
    assert e4m3.round_trips(465.0) == 448.0  # would round to 480 = the NaN code: saturates
    assert e4m3.round_trips(-math.inf) == -448.0
    assert math.isnan(e4m3.round_trips(math.nan))
    assert get_format("fp8-e5m2").round_trips(61440.0) == math.inf  # E5M2 keeps IEEE inf
    fp4 = get_format("fp4-e2m1")
    assert fp4.round_trips(100.0) == 6.0
    assert fp4.round_trips(-math.inf) == -6.0
    assert get_format("fp32").round_trips(1e308) == math.inf


def test_round_trips_exact_values_are_fixed_points() -> None:
    for f in FORMATS.values():
        for v in (f.max_value, f.smallest_normal, f.smallest_subnormal, 1.0, 1.0 + f.eps):
            assert f.round_trips(v) == v, (f.name, v)
            assert f.round_trips(-v) == -v, (f.name, v)


def test_fp4_has_eight_magnitudes() -> None:
    fp4 = get_format("fp4-e2m1")
    values = {fp4.round_trips(k / 8) for k in range(0, 57)}
    assert sorted(values) == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# --- seed 001, S-tensor-mem / S-gpt3-ffn ---------------------------------------------------


def test_S_tensor_mem() -> None:
    assert tensor_bytes((4, 8), "fp32") == 128


def test_S_gpt3_ffn() -> None:
    """GPT-3 175B FFN up-projection, d_model 12288: 4d x d fp32 weights."""
    n = tensor_bytes((12288 * 4, 12288), "fp32")
    assert n == 2_415_919_104
    assert n == 2304 * MiB
    assert n / GiB == 2.25


def test_tensor_bytes_edge_cases() -> None:
    assert tensor_bytes((), "fp16") == 2  # a scalar is one element
    assert tensor_bytes((0, 5), "fp32") == 0
    assert tensor_bytes((3,), "fp4-e2m1") == 2  # packed, rounded up to whole bytes
    assert tensor_bytes([2, 3], "bf16") == 12


# --- bad inputs name the field -------------------------------------------------------------


def test_unknown_dtype_names_field() -> None:
    with pytest.raises(SpecError) as err:
        get_format("fp12")
    assert err.value.field == "dtype"
    assert "fp16" in str(err.value)  # lists the known ones
    with pytest.raises(SpecError):
        bytes_per_element("int7")
    with pytest.raises(SpecError) as err:
        tensor_bytes((2, 2), "nope")
    assert err.value.field == "dtype"


@pytest.mark.parametrize("shape", [(4, -1), (2.0, 3), (True, 2), "4x8", 7, (None,)])
def test_bad_shape_names_field(shape: object) -> None:
    with pytest.raises(SpecError) as err:
        tensor_bytes(shape, "fp32")  # type: ignore[arg-type]
    assert err.value.field == "shape"


@pytest.mark.parametrize("value", ["1.0", None, True])
def test_round_trips_rejects_non_numbers(value: object) -> None:
    with pytest.raises(SpecError) as err:
        get_format("fp16").round_trips(value)  # type: ignore[arg-type]
    assert err.value.field == "value"


def test_round_trips_huge_int_and_nan() -> None:
    with pytest.raises(SpecError):
        get_format("fp16").round_trips(10**400)
    with pytest.raises(SpecError):
        get_format("fp4-e2m1").round_trips(math.nan)
    assert math.isnan(get_format("bf16").round_trips(math.nan))
