"""report.roofline_data: the matmuls sit where the step-time model's roofline puts them."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.gemm_time import gemm_shape_efficiency
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY as EFF
from trainbudget.core.single.intensity import matmul_intensity, ridge_intensity
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.precision import get_precision
from trainbudget.report.roofline_data import MeasuredRoofline, roofline

H100 = get_hardware("h100-sxm")
BF16 = get_precision("bf16-mixed")


def test_large_matmuls_are_compute_bound_at_the_matmul_efficiency() -> None:
    spec = resolve_model("llama-3-70b")
    plan = Plan(dp=256, tp=2, cp=2, sp=True, zero=3, micro_batch=1, grad_accum=2)
    rf = roofline(spec, plan, H100, seq_len=8192, precision=BF16, efficiency=EFF)
    peak = H100.peak_flops_per_second("bf16")
    assert rf.ridge_flops_per_byte == ridge_intensity(peak, H100.hbm_bytes_per_second)
    names = [o.name for o in rf.ops]
    assert names == ["QKV projection", "attention output", "MLP up + gate", "MLP down", "LM head"]
    qkv = rf.ops[0]
    # 4096 tokens (8192 / cp 2) through d_model 8192 -> (64 + 2 x 8 heads) x 128 / tp 2 = 5120
    assert (qkv.rows, qkv.k, qkv.n) == (4096, 8192, 5120)
    assert qkv.intensity_flops_per_byte == matmul_intensity(4096, 8192, 5120, 2)
    rate = peak * H100.matmul_fraction * EFF.in_training  # the row's MAMF, in training
    for o in rf.ops:
        assert o.compute_bound
        # less the tile and wave quantization of its (rows, n) output over 132 SMs
        shaped = rate * gemm_shape_efficiency(o.rows, o.n, 132)
        assert o.achieved_flops_per_second == pytest.approx(shaped)
    # QKV: 16 x 40 tiles of 256 x 128 = 640 = 4.85 waves of 132 -> 5 waves, 640 / 660 used
    assert rf.ops[0].achieved_flops_per_second == pytest.approx(rate * 640 / 660)


def test_few_tokens_leave_the_matmuls_far_below_the_compute_roof() -> None:
    """64 tokens: each GEMM's intensity is under the achievable ridge, and its few output tiles
    occupy a handful of the 132 SMs, so it runs at a small share of the peak."""
    spec = resolve_model("gpt2")
    plan = Plan(tp=4, micro_batch=1)
    rf = roofline(spec, plan, H100, seq_len=64, precision=BF16, efficiency=EFF)
    peak = H100.peak_flops_per_second("bf16")
    for o in rf.ops:
        assert o.intensity_flops_per_byte < rf.achievable_ridge_flops_per_byte
        on_bandwidth = o.intensity_flops_per_byte * H100.hbm_bytes_per_second * EFF.hbm
        assert o.achieved_flops_per_second <= on_bandwidth * (1 + 1e-12)
        assert o.achieved_flops_per_second < 0.2 * peak


def test_moe_adds_the_router() -> None:
    spec = resolve_model("mixtral-8x7b")
    rf = roofline(spec, Plan(), H100, seq_len=4096, precision=BF16, efficiency=EFF)
    assert rf.ops[-1].name == "MoE router" and rf.ops[-1].n == 8
    assert rf.ops[2].rows == 2 * 4096  # top-2: each token through two experts


def test_measured_roofline() -> None:
    measured = MeasuredRoofline(
        source="cal.json",
        device_name="NVIDIA H100",
        best_flops_per_second={"bf16": 6e14},
        bandwidth_bytes_per_second=3e12,
    )
    spec = resolve_model("gpt2")
    rf = roofline(
        spec, Plan(), H100, seq_len=1024, precision=BF16, efficiency=EFF, measured=measured
    )
    assert rf.measured_flops_per_second == 6e14
    assert rf.measured_ridge_flops_per_byte == ridge_intensity(6e14, 3e12)
    fp32 = get_precision("fp32")
    rf = roofline(
        spec, Plan(), H100, seq_len=1024, precision=fp32, efficiency=EFF, measured=measured
    )
    assert rf.measured_flops_per_second is None and rf.measured_ridge_flops_per_byte is None
