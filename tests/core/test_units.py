"""Human quantities both ways: the unit table of units.py (decimal vs binary, counts vs bytes)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.units import (
    GiB,
    format_bytes,
    format_count,
    format_flops,
    format_flops_rate,
    format_seconds,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_flops_rate,
    parse_int_count,
    parse_money,
)

# --- parsing: each expected value is the SI / IEC definition of the suffix -------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15T", 15e12),  # T = 1e12 (SI tera): Llama-3's 15T training tokens
        ("70B", 70e9),  # B = 1e9 (finance "billion"): a 70B-parameter model
        ("1.5e12", 1.5e12),  # plain scientific notation
        ("124M", 124e6),  # M = 1e6
        ("4k", 4e3),  # k = 1e3
        ("1_000", 1e3),  # underscores are digit separators, as in Python literals
        ("1,000", 1e3),  # so are commas
        (" 70B ", 70e9),  # surrounding blanks are ignored
        (".5T", 0.5e12),  # a leading dot is a number
        (7, 7.0),  # numbers pass through unchanged
    ],
)
def test_parse_count(text: str | int, expected: float) -> None:
    """Counts read SI / finance suffixes and plain numbers."""
    assert parse_count(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80e9),  # GB = 1e9 bytes (decimal, as GPU vendors quote memory)
        ("80GiB", 80 * 2**30),  # GiB = 2**30 bytes (IEC binary)
        ("512MiB", 512 * 2**20),  # MiB = 2**20
        ("2TB", 2e12),  # TB = 1e12
        ("80gb", 80e9),  # unit letters are case-insensitive
        ("1.5e9", 1.5e9),  # a bare number is bytes
        (1024, 1024.0),
    ],
)
def test_parse_bytes(text: str | int, expected: float) -> None:
    """Bytes keep decimal (GB) and binary (GiB) units apart."""
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("989.5TFLOPS", 989.5e12),  # H100 SXM dense bf16 peak, T = 1e12
        ("312 TFLOP/s", 312e12),  # A100 bf16 peak; "FLOP/s" spelling and a blank are accepted
        ("1e15", 1e15),  # a bare number is FLOP/s
    ],
)
def test_parse_flops_rate(text: str, expected: float) -> None:
    """Rates read an SI prefix before FLOPS or FLOP/s."""
    assert parse_flops_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.35TB/s", 3.35e12),  # H100 SXM HBM3 bandwidth, TB = 1e12
        ("900GiB/s", 900 * 2**30),  # binary units work in rates too
        ("819e9", 819e9),  # a bare number is bytes/s (TPU v5e HBM)
        ("400Gb/s", 50e9),  # a lower-case b is a bit: one NDR InfiniBand port (IEC 80000-13)
        ("400Gbps", 50e9),
        ("100 Gbit/s", 12.5e9),
        ("1.6Tb/s", 200e9),
        ("100 GBps", 100e9),  # an upper-case B is a byte, with /s or ps
    ],
)
def test_parse_bandwidth(text: str, expected: float) -> None:
    """Bandwidths are bytes per second with decimal or binary units; bits where the unit is a
    lower-case b, as network links are rated."""
    assert parse_bandwidth(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2.5", 2.5), ("$2.5", 2.5), ("$ 1,600", 1600.0), (3, 3.0)],  # a price per GPU-hour
)
def test_parse_money(text: str | int, expected: float) -> None:
    """Money is a plain amount, with or without a dollar sign."""
    assert parse_money(text) == expected


@pytest.mark.parametrize(
    ("text", "bare_unit_seconds", "expected"),
    [
        ("0.755", 1, 0.755),  # a bare number is the option's unit: seconds here
        ("755ms", 1, 0.755),  # ms = 1e-3 s
        ("15min", 1, 900.0),  # min = 60 s
        ("2 h", 1, 7200.0),  # h = 3,600 s
        ("139", 86400, 139 * 86400.0),  # a days option: a bare 139 is 139 days
        ("1.5days", 1, 1.5 * 86400),  # day = 86,400 s
        ("12H", 86400, 12 * 3600.0),  # unit letters are case-insensitive
    ],
)
def test_parse_duration(text: str, bare_unit_seconds: int, expected: float) -> None:
    """Durations come back in seconds, whatever unit they were written in."""
    assert parse_duration(text, bare_unit_seconds=bare_unit_seconds) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parse", "kind"),
    [
        (parse_count, "a count such as 15T"),
        (parse_money, "an amount of money such as 2.5"),
        (parse_duration, "a duration such as 90s"),
        (parse_bytes, "bytes such as 80GB"),
    ],
)
def test_each_kind_of_quantity_names_itself_in_its_error(parse, kind: str) -> None:
    """A price or a duration is never told it should have been a count like 15T."""
    with pytest.raises(SpecError, match=f"expected {kind}"):
        parse("lots", "my_field")


def test_parse_int_count_whole() -> None:
    """A whole-number count comes back as an int."""
    value = parse_int_count("124M")  # 124 * 1e6
    assert value == 124_000_000
    assert isinstance(value, int)


# --- rejection: every error is a SpecError naming the field the caller gave -----------------

PARSERS = [
    parse_count,
    parse_bytes,
    parse_flops_rate,
    parse_bandwidth,
    parse_int_count,
    parse_money,
    parse_duration,
]


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("text", ["-1", "abc", "12XB", "inf", "nan", "", float("inf"), -3])
def test_rejects_bad_input_naming_field(parse, text: object) -> None:
    """Negatives, words, unknown units and non-finite values are refused with the field named."""
    with pytest.raises(SpecError) as err:
        parse(text, "my_field")
    assert err.value.field == "my_field"


@pytest.mark.parametrize("text", ["-80GB", "-5GiB"])
def test_parse_bytes_negative_with_unit(text: str) -> None:
    """A negative quantity with a unit is refused as negative, not as a bad unit."""
    with pytest.raises(SpecError, match="negative") as err:
        parse_bytes(text, "memory")
    assert err.value.field == "memory"


def test_parse_int_count_rejects_fraction() -> None:
    """'1.5' is not a whole number of things."""
    with pytest.raises(SpecError, match="whole number") as err:
        parse_int_count("1.5", "n_gpus")
    assert err.value.field == "n_gpus"


def test_parse_count_rejects_bool() -> None:
    """True is not the count 1: a bool is refused rather than silently converted."""
    with pytest.raises(SpecError):
        parse_count(True, "tokens")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.07B", 1_070_000_000), ("2.01k", 2010)],  # 1.07 * 1e9 and 2.01 * 1e3, exactly whole
)
def test_parse_int_count_decimal_mantissa(text: str, expected: int) -> None:
    """A decimal mantissa that names a whole count must parse to that count."""
    assert parse_int_count(text) == expected


# --- formatting: 4 significant digits, the largest unit the value reaches --------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.5e13, "15T"),
        (124_337_664, "124.3M"),  # GPT-2 small (no bias) parameter count, 4 significant digits
        (4000, "4k"),
        (999, "999"),
        (0, "0"),
    ],
)
def test_format_count(value: float, expected: str) -> None:
    """Counts print with SI / finance suffixes."""
    assert format_count(value) == expected


def test_format_bytes() -> None:
    """Decimal by default, binary on request."""
    assert format_bytes(8e10) == "80 GB"  # 80e9 / 1e9
    assert format_bytes(2**31, binary=True) == "2 GiB"  # 2**31 / 2**30
    assert format_bytes(512) == "512 B"
    assert format_bytes(80 * GiB, binary=True) == "80 GiB"


def test_format_flops_and_rates() -> None:
    """Work in FLOP, speed in FLOP/s."""
    assert format_flops(3.14e23) == "314 ZFLOP"  # GPT-3's 3.14e23 training FLOPs (Brown 2020)
    assert format_flops(291_648_307_200) == "291.6 GFLOP"  # GPT-2 forward at T=1024 (seed 003)
    assert format_flops_rate(989.5e12) == "989.5 TFLOP/s"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1.2435e7, "143.9 days"),  # 1.2435e7 / 86400 = 143.92
        (7200, "2 h"),
        (90, "1.5 min"),
        (5, "5 s"),
        (0.755, "755 ms"),
    ],
)
def test_format_seconds(seconds: float, expected: str) -> None:
    """Durations pick days, hours, minutes, seconds or milliseconds."""
    assert format_seconds(seconds) == expected


@pytest.mark.parametrize("value", [15e12, 70e9, 124e6, 4e3])
def test_count_round_trip(value: float) -> None:
    """format_count output parses back to the same value (for 4-digit values)."""
    assert parse_count(format_count(value)) == value


def test_an_unscaled_number_is_the_decimal_rounded_once():
    """A number with no suffix is read by float() (no Decimal import); with a suffix, as the
    exact decimal product. Both round the exact value once: the same float either way."""
    import random
    from decimal import Decimal

    rng = random.Random(0)
    for _ in range(2000):
        digits = f"{rng.randrange(10 ** rng.randrange(1, 18))}.{rng.randrange(10**6):06d}"
        text = f"{digits}e{rng.randrange(-20, 25)}"
        assert parse_count(text) == float(Decimal(text)), text
        assert parse_count(text + "k") == float(Decimal(text) * 1000), text
    assert parse_duration("755ms") == float(Decimal("755") * Decimal("0.001"))


def test_parsing_a_bare_count_needs_no_decimal_module():
    """Neither importing the units module nor parsing a bare count ('15e12', as `estimate
    --tokens` is often given) imports decimal; a count with a suffix does."""
    import subprocess
    import sys

    code = (
        "import sys; from trainbudget.core.units import parse_count; "
        "assert 'decimal' not in sys.modules; parse_count('15e12'); "
        "assert 'decimal' not in sys.modules; parse_count('15T'); "
        "assert 'decimal' in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
