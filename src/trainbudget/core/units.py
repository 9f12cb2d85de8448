"""Human quantities, both ways. Every decimal and binary unit of the project is defined here once.

Counts:  "15T" = 15e12, "70B" = 70e9, "1.5e12", "124M", "4k".
Bytes:   "80GB" = 80e9 (decimal), "80GiB" = 80 * 2**30 (binary), "512MB", "2TB".
Rates:   "989.5TFLOPS" = 989.5e12 FLOP/s; "3.35TB/s" = 3.35e12 bytes/s.
Money:   "2.5" or "$2.5" (the currency is whatever the prices are in).
Time:    "90s", "755ms", "15min", "2h", "139days"; a bare number is the option's own unit.
"""

from __future__ import annotations

import math
import re

from trainbudget.core.errors import SpecError

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
PB = 10**15
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400

# Count suffixes: SI prefixes and the finance-style ones people use for model sizes ("70B").
_COUNT_SUFFIX = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "B": 10**9,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Z": 10**21,
}
_BYTE_UNIT = {
    "B": 1,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": TB,
    "PB": PB,
    "KIB": KiB,
    "MIB": MiB,
    "GIB": GiB,
    "TIB": TiB,
}
_BIT_RATE_PREFIX = {  # bytes per second in one <prefix>bit/s, exactly (1 bit = 1/8 byte)
    "": "0.125",
    "K": "125",
    "M": "125000",
    "G": "125000000",
    "T": "125000000000",
    "P": "125000000000000",
}
_RATE_PREFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}

SECONDS_PER_MINUTE = 60
# Duration units -> seconds (a decimal string is read as a Decimal, so that '755ms' is exact);
# keys upper-cased
_DURATION_UNIT = {
    "MS": "0.001",
    "S": 1,
    "SEC": 1,
    "SECOND": 1,
    "SECONDS": 1,
    "MIN": SECONDS_PER_MINUTE,
    "MINUTE": SECONDS_PER_MINUTE,
    "MINUTES": SECONDS_PER_MINUTE,
    "H": SECONDS_PER_HOUR,
    "HOUR": SECONDS_PER_HOUR,
    "HOURS": SECONDS_PER_HOUR,
    "D": SECONDS_PER_DAY,
    "DAY": SECONDS_PER_DAY,
    "DAYS": SECONDS_PER_DAY,
}
_BARE_UNIT_NAME = {1: "seconds", SECONDS_PER_HOUR: "hours", SECONDS_PER_DAY: "days"}

# The patterns as text: `re` compiles each on its first use and keeps it (its own cache), so
# that a command that parses one quantity does not compile all seven at import
_NUMBER = r"([0-9][0-9_,]*\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)"
_COUNT_RE = rf"^{_NUMBER}\s*([kKMBGTPEZ]?)$"
_BYTES_RE = rf"(?i)^{_NUMBER}\s*([KMGTP]?I?B)$"
_FLOPS_RE = rf"(?i)^{_NUMBER}\s*([KMGTPE]?)\s*FLOP(?:S|/S)?$"
_BW_RE = rf"(?i)^{_NUMBER}\s*([KMGTP]?I?B)\s*(?:/\s*S|PS)$"
_BIT_RATE_RE = rf"^{_NUMBER}\s*([KMGTPkmgtp]?)(?:b|bit|Bit)\s*(?:/\s*[sS]|ps)$"
_MONEY_RE = rf"^\$?\s*{_NUMBER}()$"
_DURATION_RE = rf"(?i)^{_NUMBER}\s*([A-Z]*)$"


_THOUSANDS = r"^[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?([eE][+-]?[0-9]+)?$"


def _number(text: str, field: str, scale: int | str) -> float:
    """A decimal number (commas only as thousands separators: '1,000,000', not '1,5') times
    `scale` (an int, or a decimal string: '0.001'), exactly, then rounded once to a float."""
    if "," in text and not re.match(_THOUSANDS, text):
        raise SpecError(field, text, "commas are only allowed as thousands separators (1,000)")
    digits = text.replace("_", "").replace(",", "")
    if scale == 1:  # no product to round: float() rounds the text once, as Decimal's would
        return float(digits)
    from decimal import Decimal  # here: only a scaled quantity needs it

    # Decimal, so that '1.07B' is exactly 1070000000 once multiplied by an integer suffix
    return float(Decimal(digits) * Decimal(scale))


def _finite_nonnegative(field: str, text: str, value: float) -> float:
    if not math.isfinite(value):
        raise SpecError(field, text, "must be a finite number")
    if value < 0:
        raise SpecError(field, text, "must not be negative")
    return value


def _parse(
    text: str | float | int,
    field: str,
    pattern: str,
    unit_table: dict[str, int | str],
    expected: str,
    *,
    bare_count: bool = True,
) -> float:
    """One parser for every kind of quantity: a number, then a unit `pattern` (a regular
    expression) captures as its second group and `unit_table` scales (keys upper-cased unless
    the table is case-sensitive; a scale given as a decimal string is exact).
    With bare_count, a plain count ('1.5e9', '70B') is accepted in the base unit."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _finite_nonnegative(field, str(text), float(text))
    s = str(text).strip()
    if s.startswith("-") and re.match(pattern, s[1:].strip()):  # '-5', not a stray '--'
        raise SpecError(field, s, "must not be negative")
    m = re.match(pattern, s)
    unit = None if m is None else m.group(2)
    unit = unit if unit is None or unit in unit_table else unit.upper()
    if unit in unit_table:
        return _finite_nonnegative(field, s, _number(m.group(1), field, unit_table[unit]))
    if bare_count:
        try:
            return parse_count(s, field)
        except SpecError:
            pass
    raise SpecError(field, s, f"expected {expected}")


def parse_count(text: str | float | int, field: str = "count") -> float:
    """'15T' -> 1.5e13; '70B' -> 7e10; '1.5e12' -> 1.5e12. Rejects negatives and units of bytes."""
    return _parse(
        text,
        field,
        _COUNT_RE,
        _COUNT_SUFFIX,
        "a count such as 15T, 70B, 124M, 4k or 1.5e12",
        bare_count=False,
    )


def parse_int_count(text: str | int, field: str = "count") -> int:
    """A count that must be a whole number ('124M' -> 124000000; '1.5' is an error)."""
    value = parse_count(text, field)
    if value != int(value):
        raise SpecError(field, text, "must be a whole number")
    return int(value)


def parse_bytes(text: str | float | int, field: str = "bytes") -> float:
    """'80GB' -> 8e10 (decimal); '80GiB' -> 85899345920 (binary); a bare number is bytes."""
    return _parse(text, field, _BYTES_RE, _BYTE_UNIT, "bytes such as 80GB, 80GiB, 512MiB or 1.5e9")


def parse_flops_rate(text: str | float | int, field: str = "flops_per_second") -> float:
    """'989.5TFLOPS' -> 9.895e14 FLOP/s. A bare number is FLOP/s."""
    return _parse(text, field, _FLOPS_RE, _RATE_PREFIX, "a rate such as 989.5TFLOPS or 3.12e14")


def parse_bandwidth(text: str | float | int, field: str = "bytes_per_second") -> float:
    """'3.35TB/s' -> 3.35e12 bytes/s; '900GiB/s' uses binary units; a lower-case b is a bit,
    as network links are rated: '400Gb/s' and '400Gbps' -> 5e10 bytes/s. A bare number is
    bytes/s."""
    if isinstance(text, str):
        m = re.match(_BIT_RATE_RE, text.strip())
        if m is not None:
            scale = _BIT_RATE_PREFIX[m.group(2).upper()]
            return _finite_nonnegative(field, text.strip(), _number(m.group(1), field, scale))
    expected = "a bandwidth such as 3.35TB/s, 900GB/s or 400Gb/s (bits)"
    return _parse(text, field, _BW_RE, _BYTE_UNIT, expected)


def parse_money(text: str | float | int, field: str = "price") -> float:
    """'2.5' or '$2.5' -> 2.5: an amount in whatever currency the prices are in."""
    return _parse(
        text, field, _MONEY_RE, {"": 1}, "an amount of money such as 2.5 or $2.5", bare_count=False
    )


def parse_duration(
    text: str | float | int, field: str = "seconds", *, bare_unit_seconds: int = 1
) -> float:
    """'90s', '755ms', '15min', '2h', '139days' -> seconds. A bare number is in the option's own
    unit, `bare_unit_seconds` long ('139' for a days option is 139 days)."""
    unit_name = _BARE_UNIT_NAME[bare_unit_seconds]
    return _parse(
        text,
        field,
        _DURATION_RE,
        {**_DURATION_UNIT, "": bare_unit_seconds},
        f"a duration such as 90s, 15min, 2h or 3days (a bare number is {unit_name})",
        bare_count=False,
    )


def _scaled(value: float, steps: list[tuple[float, str]], digits: int) -> str:
    for i, (factor, suffix) in enumerate(steps):
        if abs(value) >= factor:
            text = f"{value / factor:.{digits}g}"
            # 999,950 rounds to "1000" at 4 digits: say "1M", not "1000k"
            if i > 0 and abs(float(text)) * factor >= steps[i - 1][0]:
                return f"{value / steps[i - 1][0]:.{digits}g}{steps[i - 1][1]}"
            return f"{text}{suffix}"
    return f"{value:.{digits}g}{steps[-1][1] if steps[-1][0] == 1 else ''}"


def format_count(n: float, digits: int = 4) -> str:
    """1.5e13 -> '15T'; 124337664 -> '124.3M'."""
    return _scaled(n, [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"), (1, "")], digits)


def format_bytes(n: float, binary: bool = False, digits: int = 4) -> str:
    """8e10 -> '80 GB'; with binary=True, 2**31 -> '2 GiB'."""
    if binary:
        steps = [(TiB, " TiB"), (GiB, " GiB"), (MiB, " MiB"), (KiB, " KiB"), (1, " B")]
    else:
        steps = [(PB, " PB"), (TB, " TB"), (GB, " GB"), (MB, " MB"), (KB, " kB"), (1, " B")]
    return _scaled(n, steps, digits)


def format_flops(n: float, digits: int = 4) -> str:
    """3.14e23 -> '314 ZFLOP' (a quantity of work, not a rate)."""
    steps = [
        (1e24, " YFLOP"),
        (1e21, " ZFLOP"),
        (1e18, " EFLOP"),
        (1e15, " PFLOP"),
        (1e12, " TFLOP"),
        (1e9, " GFLOP"),
        (1e6, " MFLOP"),
        (1e3, " kFLOP"),
        (1, " FLOP"),
    ]
    return _scaled(n, steps, digits)


def format_flops_rate(n: float, digits: int = 4) -> str:
    """9.895e14 -> '989.5 TFLOP/s'."""
    steps = [
        (1e18, " EFLOP/s"),
        (1e15, " PFLOP/s"),
        (1e12, " TFLOP/s"),
        (1e9, " GFLOP/s"),
        (1e6, " MFLOP/s"),
        (1, " FLOP/s"),
    ]
    return _scaled(n, steps, digits)


def format_seconds(s: float) -> str:
    """1.2435e7 -> '143.9 days'; 0.755 -> '755 ms'."""
    if s >= SECONDS_PER_DAY:
        return f"{s / SECONDS_PER_DAY:.4g} days"
    if s >= SECONDS_PER_HOUR:
        return f"{s / SECONDS_PER_HOUR:.4g} h"
    if s >= 60:
        return f"{s / 60:.4g} min"
    if s >= 1:
        return f"{s:.4g} s"
    return f"{s * 1e3:.4g} ms"
