"""Number formats used in training, described by their bits so every figure can be derived.

Memory estimates need the bytes one element takes; precision arguments ("1e-8 underflows in
fp16 but not in bf16") need the range and rounding. Both come from (sign, exponent, mantissa)
bits plus how the top exponent is used, so the limits below are computed, never typed in, and a
torch-marked test checks them against `torch.finfo`.

Sources:
  IEEE 754-2019 (binary64/32/16 layout, round-to-nearest-even, inf/NaN in the top exponent).
  OCP 8-bit Floating Point spec (OFP8) rev 1.0: E4M3 has no inf, only S.1111.111 is NaN (max 448);
    E5M2 follows IEEE conventions (max 57344).
  OCP Microscaling (MX) spec v1.0: FP4 E2M1 element has no inf or NaN (max 6).
  NVIDIA TF32 blog: 1 sign, 8 exponent, 10 mantissa bits, held in a 32-bit register.
  Google Cloud bfloat16 blog: fp32's 8 exponent bits with 7 mantissa bits.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from trainbudget.core.errors import SpecError, unknown_key

IEEE_754_URL = "https://standards.ieee.org/ieee/754/6210/"
OCP_FP8_URL = (
    "https://www.opencompute.org/documents/"
    "ocp-8-bit-floating-point-specification-ofp8-revision-1-0-2023-12-01-pdf-1"
)
OCP_MX_URL = "https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf"
TF32_URL = "https://blogs.nvidia.com/blog/tensorfloat-32-precision-format/"
BF16_URL = "https://cloud.google.com/blog/products/ai-machine-learning/bfloat16-the-secret-to-high-performance-on-cloud-tpus"

# How the all-ones exponent is used, which is what changes max_value and overflow:
#   "ieee": reserved for inf and NaN; overflow rounds to inf.
#   "fn":   OCP E4M3: usable except S.1111.111 (NaN). With no inf, overflow (and inf) saturates
#           to +-max_value: the OCP saturating conversion, what FP8 training recipes use and what
#           torch 2.13's float8_e4m3fn cast does (OCP's other mode would give NaN).
#   "none": OCP MX E2M1: every code is a number; overflow (and inf) saturates to +-max_value.
_SPECIALS = ("ieee", "fn", "none")


@dataclass(frozen=True, kw_only=True)
class NumberFormat:
    """A binary floating-point format. `mantissa_bits` counts the stored fraction bits only."""

    name: str
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    storage_bytes: float
    ieee_special: str
    source_url: str

    def __post_init__(self) -> None:
        # Checked here so a bad table entry fails at import, not deep inside an estimate.
        for field in ("sign_bits", "exponent_bits", "mantissa_bits"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(field, value, "must be a non-negative int")
        if self.sign_bits != 1:
            raise SpecError("sign_bits", self.sign_bits, "must be 1 (signed formats only)")
        if self.exponent_bits < 2:
            raise SpecError("exponent_bits", self.exponent_bits, "must be at least 2")
        if self.ieee_special not in _SPECIALS:
            raise SpecError(
                "ieee_special", self.ieee_special, "must be one of " + ", ".join(_SPECIALS)
            )
        if self.ieee_special == "fn" and self.mantissa_bits < 1:
            raise SpecError("mantissa_bits", self.mantissa_bits, "'fn' formats need a NaN code")
        if not self.storage_bytes > 0 or self.storage_bytes * 8 < self.bits:
            raise SpecError("storage_bytes", self.storage_bytes, f"must hold {self.bits} bits")

    @property
    def bits(self) -> int:
        """Bits of information (tf32: 19), not the storage size (tf32 sits in 32)."""
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def _emax(self) -> int:
        """Unbiased exponent of the largest finite number (IEEE reserves the top code)."""
        top = 2**self.exponent_bits - 1
        return (top - 1 if self.ieee_special == "ieee" else top) - self.bias

    @property
    def _emin(self) -> int:
        return 1 - self.bias

    @property
    def max_value(self) -> float:
        m = self.mantissa_bits
        if self.ieee_special == "fn":  # top code's all-ones mantissa is NaN: lose one more ulp
            return math.ldexp(2 - 2 * 2.0**-m, self._emax)
        return math.ldexp(2 - 2.0**-m, self._emax)

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self._emin)

    @property
    def smallest_subnormal(self) -> float:
        return math.ldexp(1.0, self._emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Gap between 1.0 and the next number: the relative precision of the format."""
        return math.ldexp(1.0, -self.mantissa_bits)

    def round_trips(self, x: float) -> float:
        """`x` converted to this format (round to nearest, ties to even) and back to a float.

        Shows what storing a value does to it: 1e-8 becomes 0.0 in fp16 but survives in bf16.
        Overflow (after rounding): inf for "ieee"; +-max_value for "fn" and "none", which have
        no inf. NaN stays NaN, except in "none" formats, which cannot hold it.
        """
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise SpecError("value", x, "must be a real number")
        try:
            x = float(x)
        except OverflowError:
            raise SpecError("value", x, "does not fit a Python float") from None
        if math.isnan(x):
            if self.ieee_special == "none":
                raise SpecError("value", x, f"{self.name} has no NaN")
            return x
        if math.isinf(x):
            if self.ieee_special == "ieee":
                return x
            return math.copysign(self.max_value, x)
        if x == 0.0:
            return x
        m = self.mantissa_bits
        a = abs(x)
        exp = max(math.frexp(a)[1] - 1, self._emin)  # below emin the quantum stops shrinking
        # a * 2**(m - exp) is exact in binary64 and < 2**(m+1); round() on floats is
        # ties-to-even, so the whole conversion rounds exactly once.
        result = math.inf
        if exp <= self._emax:  # else skip ldexp, which could overflow binary64 itself
            result = math.ldexp(round(math.ldexp(a, m - exp)), exp - m)
        if result > self.max_value:
            result = math.inf if self.ieee_special == "ieee" else self.max_value
        return math.copysign(result, x)


def _fmt(name: str, e: int, m: int, nbytes: float, special: str, url: str) -> NumberFormat:
    return NumberFormat(
        name=name,
        sign_bits=1,
        exponent_bits=e,
        mantissa_bits=m,
        storage_bytes=nbytes,
        ieee_special=special,
        source_url=url,
    )


FORMATS: Mapping[str, NumberFormat] = types.MappingProxyType(
    {
        f.name: f
        for f in (
            _fmt("fp64", 11, 52, 8, "ieee", IEEE_754_URL),
            _fmt("fp32", 8, 23, 4, "ieee", IEEE_754_URL),
            _fmt("tf32", 8, 10, 4, "ieee", TF32_URL),  # a compute mode: stored as fp32
            _fmt("fp16", 5, 10, 2, "ieee", IEEE_754_URL),
            _fmt("bf16", 8, 7, 2, "ieee", BF16_URL),
            _fmt("fp8-e4m3", 4, 3, 1, "fn", OCP_FP8_URL),
            _fmt("fp8-e5m2", 5, 2, 1, "ieee", OCP_FP8_URL),
            _fmt("fp4-e2m1", 2, 1, 0.5, "none", OCP_MX_URL),  # two elements per byte
        )
    }
)

# Names people (and torch) use for the same formats. "fp8" alone means E4M3, the usual choice
# for weights and activations.
ALIASES: Mapping[str, str] = types.MappingProxyType(
    {
        "float64": "fp64",
        "double": "fp64",
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "e4m3": "fp8-e4m3",
        "fp8": "fp8-e4m3",
        "fp8_e4m3": "fp8-e4m3",
        "float8_e4m3fn": "fp8-e4m3",
        "e5m2": "fp8-e5m2",
        "fp8_e5m2": "fp8-e5m2",
        "float8_e5m2": "fp8-e5m2",
        "e2m1": "fp4-e2m1",
        "fp4": "fp4-e2m1",
    }
)


def get_format(name: str) -> NumberFormat:
    """Look up a format by canonical name or alias (case-insensitive, "torch." prefix allowed)."""
    if not isinstance(name, str):
        raise SpecError("dtype", name, "must be a string")
    key = name.strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise unknown_key("dtype", name, list(FORMATS))
    return FORMATS[key]


def bytes_per_element(name: str) -> float:
    return get_format(name).storage_bytes


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes to hold a dense tensor. Sub-byte formats are packed, rounded up to whole bytes."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise SpecError("shape", shape, "must be a tuple of non-negative ints")
    numel = 1
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise SpecError("shape", tuple(shape), "entries must be non-negative ints")
        numel *= dim
    return math.ceil(numel * Fraction(bytes_per_element(dtype)))
