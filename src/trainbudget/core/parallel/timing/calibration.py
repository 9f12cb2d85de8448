"""A calibration file: what one device achieved, as fractions of its catalog peaks, and the
step-time model's efficiencies read from it (`trainbudget plan --calibration FILE`).

`trainbudget bench --save-calibration` writes the file (profile/bench.py, where the kernels
run); reading it is plain JSON and lives here, below every reader: the estimator, the API and
the report need no torch and no profiler to use a measured device."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.timing.efficiency import Efficiency
from trainbudget.core.spec.hardware import HARDWARE

CALIBRATION_FORMAT = "trainbudget-calibration"
"""The file's `format` field: a JSON file that is not a calibration says so at once."""
CALIBRATION_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """What one device achieved, as fractions of its catalog peaks."""

    device_name: str
    catalog_key: str | None
    matmul_fraction: Mapping[str, float]
    """dtype -> best achieved matmul FLOP/s / the catalog's dense peak (dtypes with a peak)."""
    hbm_fraction: float | None
    """Achieved copy bandwidth / the catalog's HBM bandwidth; None without a catalog row."""
    best_flops_per_second: Mapping[str, float]
    bandwidth_bytes_per_second: float


def _positive(field_name: str, value: object) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise SpecError(field_name, value, "must be a positive finite number")
    return float(value)


def _rates(doc: dict, key: str) -> dict[str, float]:
    table = doc.get(key)
    if not isinstance(table, dict):
        raise SpecError(f"calibration.{key}", table, "must be an object of dtype -> number")
    return {str(d): _positive(f"calibration.{key}[{d}]", v) for d, v in table.items()}


def _read_json(path: Path) -> object:
    """The file's JSON; a missing file, a folder, binary bytes or broken JSON are each their
    own one-line error."""
    made_by = "from `trainbudget bench --save-calibration`"
    if not path.exists():
        raise SpecError("calibration", str(path), "no such file")
    if path.is_dir():
        raise SpecError("calibration", str(path), f"is a folder; expected a JSON file {made_by}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise SpecError("calibration", str(path), f"cannot be read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError(
            "calibration", str(path), f"is a binary file, not the JSON file {made_by}"
        ) from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise SpecError("calibration", str(path), f"is not JSON ({err})") from None


def load_calibration(path: str | Path) -> Calibration:
    """Read a file written by `save_calibration`; every field is checked."""
    doc = _read_json(Path(path))
    if not isinstance(doc, dict) or doc.get("format") != CALIBRATION_FORMAT:
        raise SpecError("calibration", str(path), f'not a "{CALIBRATION_FORMAT}" file')
    if doc.get("version") != CALIBRATION_VERSION:
        raise SpecError("calibration.version", doc.get("version"), f"must be {CALIBRATION_VERSION}")
    key = doc.get("catalog_key")
    if key is not None and key not in HARDWARE:
        raise SpecError("calibration.catalog_key", key, "not a key of the hardware catalog")
    name = doc.get("device_name")
    if not isinstance(name, str) or not name:
        raise SpecError("calibration.device_name", name, "must be a non-empty string")
    hbm = doc.get("hbm_fraction_of_peak")
    return Calibration(
        device_name=name,
        catalog_key=key,
        matmul_fraction=MappingProxyType(_rates(doc, "matmul_fraction_of_peak")),
        hbm_fraction=None if hbm is None else _positive("calibration.hbm_fraction_of_peak", hbm),
        best_flops_per_second=MappingProxyType(_rates(doc, "best_flops_per_second")),
        bandwidth_bytes_per_second=_positive(
            "calibration.bandwidth_bytes_per_second", doc.get("bandwidth_bytes_per_second")
        ),
    )


def efficiency_from_calibration(cal: Calibration, *, dtype: str = "bf16") -> Efficiency:
    """The step-time model's efficiencies as this device measured them: matmul = the best
    `dtype` matmul's fraction of peak, hbm = the copy's fraction of HBM bandwidth. attention
    keeps its default (a plain matmul benchmark says nothing about FlashAttention)."""
    if cal.catalog_key is None:
        raise SpecError("calibration.catalog_key", None, f"no catalog peak for {cal.device_name}")
    matmul = cal.matmul_fraction.get(dtype)
    if matmul is None:
        raise SpecError(
            "calibration.matmul_fraction_of_peak",
            dict(cal.matmul_fraction),
            f"has no {dtype} entry: run `trainbudget bench --dtype {dtype}`",
        )
    if cal.hbm_fraction is None:
        raise SpecError("calibration.hbm_fraction_of_peak", None, "is needed")
    for name, value in (
        ("matmul_fraction_of_peak", matmul),
        ("hbm_fraction_of_peak", cal.hbm_fraction),
    ):
        if value > 1:
            raise SpecError(
                f"calibration.{name}",
                value,
                f"exceeds 1: measured above the {cal.catalog_key} datasheet peak, so the "
                "catalog row does not describe this device",
            )
    return Efficiency(matmul=matmul, hbm=cal.hbm_fraction)
