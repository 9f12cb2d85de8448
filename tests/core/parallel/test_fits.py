"""core.parallel.fits: the allocated peak as each kind of memory figure, and the one fits rule.

The constants are checked against the arithmetic of their sources: NCCL's buffer defaults
(src/init.cc and src/include/device.h: DEFAULT_BUFFSIZE 1 << 22, NCCL_LL_LINES_PER_THREAD 8,
NCCL_LL_MAX_NTHREADS 512, NCCL_STEPS 8, a 16-byte LL line, NCCL_LL128_ELEMS_PER_THREAD 120,
NCCL_LL128_MAX_NTHREADS 640), the 10 MiB allocations NVIDIA/nccl issue #1685 logs for one
channel's connection, and the CUDA context pytorch/pytorch PR #86509 measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel import fits as f
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.units import GB, MiB

H100 = get_hardware("h100-sxm")


def test_nccls_buffers_are_its_three_protocols_defaults() -> None:
    simple, ll, ll128 = 4 * MiB, 524_288, 4_915_200
    assert f.NCCL_CONNECTION_BYTES == simple + ll + ll128 == 9_633_792
    # issue #1685 logs each connection's buffers as one 10 MiB (10485760-byte) allocation:
    # the three rounded up to cuMem's 2 MiB granularity
    assert -(-f.NCCL_CONNECTION_BYTES // (2 * MiB)) * 2 * MiB == 10_485_760
    assert f.NCCL_COMMUNICATOR_BYTES == 32 * 9_633_792  # about 0.31 GB a communicator


def test_each_measure_holds_the_one_before_it() -> None:
    """allocated <= reserved <= device, each step by its own mechanism."""
    peak = 60 * GB
    allocated = f.in_measure(peak, "allocated", 3)
    reserved = f.in_measure(peak, "reserved", 3)
    device = f.in_measure(peak, "device", 3)
    assert allocated == peak
    assert reserved == pytest.approx(peak / 0.85)  # GMLake's 15 % of reserved is free
    assert device - reserved == pytest.approx(287_047_680 + 3 * f.NCCL_COMMUNICATOR_BYTES)
    assert f.in_measure(peak, "device", 0) - reserved == f.CUDA_CONTEXT_BYTES


def test_an_unknown_measure_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError, match=r"memory_measure.*'peak'.*allocated, reserved, device"):
        f.in_measure(1.0, "peak")


def test_communicators_count_the_axes_above_one() -> None:
    assert f.n_communicators(8, 1, 1, 1) == 1
    assert f.n_communicators(1, 1, 1, 1) == 0
    assert f.n_communicators(2, 4, 8, 2) == 4
    # numpy adds booleans as a logical or: the count must come out 3, not True
    got = f.n_communicators(np.array([2, 1]), np.array([2, 1]), np.array([2, 1]), np.array([1, 1]))
    assert got.tolist() == [3, 0]


def test_the_flat_rule_is_the_headroom_of_the_capacity() -> None:
    rule = f.FitsRule(headroom=0.9)
    assert f.fits(72 * GB, 80 * GB, rule, 3)
    assert not f.fits(72.1 * GB, 80 * GB, rule, 3)
    assert f.FLAT_RULE.headroom == 0.9  # the former default, validate's comparison


def test_the_default_is_the_device_rule_with_the_frameworks_margin() -> None:
    """No --memory-headroom: the device rule, its margin the framework row's stored median;
    a framework without enough memory rows of its own takes every row's."""
    assert f.FitsRule().headroom is None  # core.spec.defaults.DEFAULT_MEMORY_HEADROOM
    table = json.loads(Path(f.MARGINS_FILE).read_text(encoding="utf-8"))
    for name, row in table["frameworks"].items():
        assert f.rule_for(None, name) == f.FitsRule(headroom=None, error_margin=row["margin"])
    assert f.rule_for(None, "no-such-framework").error_margin == table["all"]["margin"]
    assert f.rule_for(0.8, "megatron") == f.FitsRule(headroom=0.8)  # --memory-headroom wins


def test_the_limit_is_the_rules_inequality_solved_for_the_peak() -> None:
    """A plan at the boundary: (peak + outside) x margin == capacity fits, a byte more does
    not; on the device total of an H100 (CUDA's 79.11 GiB, not the datasheet's 80e9)."""
    capacity = H100.usable_memory_bytes
    rule = f.FitsRule(headroom=None, error_margin=1.06)
    edge = f.allocated_limit_bytes(capacity, rule, 2)
    assert (edge + f.outside_allocator_bytes(2)) * 1.06 == pytest.approx(capacity, rel=1e-12)
    assert f.fits(edge * (1 - 1e-9), capacity, rule, 2)
    assert not f.fits(edge * (1 + 1e-9), capacity, rule, 2)
    flat = f.FitsRule(headroom=0.9)
    assert f.allocated_limit_bytes(capacity, flat, 2) == 0.9 * capacity  # no outside term


def test_the_verdict_says_what_it_compared() -> None:
    device = f.verdict_text(True, 84.94 * GB, f.FitsRule(headroom=None, error_margin=1.06), 1)
    assert device.startswith("fits: limit ")
    assert "CUDA context and NCCL buffers" in device and "x 1.06" in device
    assert "84.94 GB the device gives the process" in device
    flat = f.verdict_text(False, 84.94 * GB, f.FitsRule(headroom=0.9), 1)
    assert flat == (
        "does NOT fit: limit 76.45 GB = 90 % of the 84.94 GB the device gives the process, "
        "--memory-headroom"
    )


def test_the_device_rule_adds_what_lives_outside_the_allocator_and_the_margin() -> None:
    outside = f.outside_allocator_bytes(2)
    rule = f.FitsRule(headroom=None)
    edge = 80 * GB - outside
    assert f.fits(edge, 80 * GB, rule, 2) and not f.fits(edge * 1.0001, 80 * GB, rule, 2)
    wide = f.FitsRule(headroom=None, error_margin=1.1)
    usable = 80 * GB / 1.1 - outside  # (peak + outside) x 1.1 <= capacity
    assert f.fits(usable * 0.9999, 80 * GB, wide, 2)
    assert not f.fits(usable * 1.0001, 80 * GB, wide, 2)
    # the allocator's reserve is not in it: its cache is freed before an allocation fails
    assert f.oom_peak_bytes(60 * GB, 2) < f.in_measure(60 * GB, "device", 2)


def test_fits_takes_a_grid_of_plans_as_one_plan() -> None:
    peaks = np.array([70e9, 79e9, 80e9])
    comms = np.array([1, 0, 3])
    rules = [f.FLAT_RULE, f.FitsRule(headroom=None, error_margin=1.02), f.rule_for(None, "x")]
    for rule in rules:
        grid = f.fits(peaks, 80e9, rule, comms)
        one = [f.fits(float(p), 80e9, rule, int(c)) for p, c in zip(peaks, comms, strict=True)]
        assert grid.tolist() == one


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"headroom": 0.0}, "memory_headroom"), ({"headroom": 1.5}, "memory_headroom"),
     ({"headroom": None, "error_margin": 0}, "error_margin")],
)  # fmt: skip
def test_a_bad_rule_is_refused_naming_the_field(kw: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        f.FitsRule(**kw)


def test_the_module_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, trainbudget.core.parallel.fits; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_margin_never_credits_the_models_over_prediction():
    """fits.credited_margin: a median under 1 (the model over-predicts a framework's rows) is
    not taken, so no plan whose own predicted device peak exceeds the device total fits."""
    assert f.credited_margin(0.951) == 1.0
    assert f.credited_margin(1.059) == 1.059
    for row in ("megatron", "deepspeed", "kempnerforge", "no-such-row"):
        assert f.framework_margin(row) >= 1.0
    rule = f.FitsRule(headroom=None, error_margin=f.credited_margin(0.9))
    device = 84.9e9
    assert not f.fits(device, device, rule)  # a peak at the device total never fits
