"""The chosen GPU's roofline with the model's main matmuls placed on it. Pure.

Each op is one GEMM of one micro-batch on one GPU of the chosen plan, in the shape
`layer_time.layer_compute` times it: (rows, k) @ (k, n) with rows = micro-batch x
seq_len / cp tokens and the weight split by TP. Its arithmetic intensity is
`intensity.matmul_intensity`; its achieved FLOP/s is its FLOPs over the time
`gemm_time.matmul_seconds` predicts (compute-bound at the matmul efficiency x peak less the
shape's tile and wave quantization, or memory-bound at the achievable HBM bandwidth), so the
points are where the step-time model puts them. The attention core (FlashAttention, timed at its
own efficiency) and the element-wise ops (norms, residuals, activations: bytes without counted
FLOPs) have no point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainbudget.core.parallel.plan import Plan

# the step-time model's roofline of one GEMM; private there, used here so that the points sit
# exactly where the step time puts them rather than on a second copy of the formula
from trainbudget.core.parallel.timing.efficiency import Efficiency
from trainbudget.core.parallel.timing.gemm_time import (
    gemm_shape_efficiency,
    matmul_rate_fraction,
    matmul_seconds,
)
from trainbudget.core.single.flops import matmul_flops
from trainbudget.core.single.intensity import matmul_intensity, ridge_intensity
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Precision


@dataclass(frozen=True, kw_only=True)
class MeasuredRoofline:
    """What `trainbudget bench --save-calibration` measured on the device."""

    source: str
    """The calibration file."""
    device_name: str
    best_flops_per_second: dict[str, float]
    """Best achieved matmul FLOP/s per dtype."""
    bandwidth_bytes_per_second: float
    """Achieved copy bandwidth."""


@dataclass(frozen=True, kw_only=True)
class RooflineOp:
    name: str
    rows: float
    k: float
    n: float
    flops: float
    """Of one forward GEMM for one micro-batch on one GPU (2 x rows x k x n)."""
    intensity_flops_per_byte: float
    achieved_flops_per_second: float
    compute_bound: bool


@dataclass(frozen=True, kw_only=True)
class Roofline:
    gpu: str
    dtype: str
    peak_flops_per_second: float
    hbm_bytes_per_second: float
    ridge_flops_per_byte: float
    """Datasheet ridge: peak / HBM bandwidth."""
    matmul_efficiency: float
    hbm_efficiency: float
    achievable_ridge_flops_per_byte: float
    """Ridge of the achievable roof: (efficiency x peak) / (efficiency x bandwidth)."""
    ops: tuple[RooflineOp, ...]
    measured: MeasuredRoofline | None
    measured_flops_per_second: float | None
    """The measured matmul FLOP/s in `dtype`; None without a calibration or that dtype."""
    measured_ridge_flops_per_byte: float | None


def _shapes(spec: ModelSpec, plan: Plan, seq_len: int) -> list[tuple[str, float, float, float]]:
    """(name, rows, k, n) of the GEMMs `step_time` times for one layer and the head."""
    tp = plan.tp
    rows = plan.micro_batch * seq_len / plan.cp  # tokens through each weight on this GPU
    d, d_q = spec.d_model, spec.n_heads * spec.d_head
    d_hidden = spec.d_ff_expert if spec.is_moe else spec.d_ff
    k_experts = (spec.experts_per_token + spec.n_shared_experts) if spec.is_moe else 1
    up = d_hidden / tp * (2 if spec.mlp == "swiglu" else 1)
    shapes = [
        ("QKV projection", rows, d, (d_q + 2 * spec.d_kv) / tp),
        ("attention output", rows, d_q / tp, d),
        ("MLP up" + (" + gate" if spec.mlp == "swiglu" else ""), rows * k_experts, d, up),
        ("MLP down", rows * k_experts, d_hidden / tp, d),
        ("LM head", rows, d, spec.vocab_size / tp),
    ]
    if spec.is_moe:
        shapes.append(("MoE router", rows, d, spec.n_experts))
    return shapes


def roofline(
    spec: ModelSpec,
    plan: Plan,
    hw: Hardware,
    *,
    seq_len: int,
    precision: Precision,
    efficiency: Efficiency,
    measured: MeasuredRoofline | None = None,
) -> Roofline:
    dtype = precision.compute_dtype
    peak, hbm = hw.peak_flops_per_second(dtype), hw.hbm_bytes_per_second
    e = precision.activation_bytes
    efficiency = efficiency.resolved(hw)
    matmul_fraction = matmul_rate_fraction(efficiency)
    ops = []
    for name, rows, k, n in _shapes(spec, plan, seq_len):
        flops = matmul_flops(rows, k, n)
        seconds = matmul_seconds(flops, rows, n, k, e, peak, hbm, efficiency, sms=hw.sm_count)
        achieved = flops / seconds
        roof = peak * matmul_fraction * gemm_shape_efficiency(rows, n, hw.sm_count)
        ops.append(
            RooflineOp(
                name=name,
                rows=rows,
                k=k,
                n=n,
                flops=flops,
                intensity_flops_per_byte=matmul_intensity(rows, k, n, e),
                achieved_flops_per_second=achieved,
                compute_bound=achieved >= roof * (1 - 1e-12),
            )
        )
    measured_flops = measured_ridge = None
    if measured is not None:
        measured_flops = _get(measured.best_flops_per_second, dtype)
        if measured_flops is not None:
            measured_ridge = ridge_intensity(measured_flops, measured.bandwidth_bytes_per_second)
    return Roofline(
        gpu=hw.name,
        dtype=dtype,
        peak_flops_per_second=peak,
        hbm_bytes_per_second=hbm,
        ridge_flops_per_byte=ridge_intensity(peak, hbm),
        matmul_efficiency=matmul_fraction,
        hbm_efficiency=efficiency.hbm,
        achievable_ridge_flops_per_byte=ridge_intensity(
            peak * matmul_fraction, hbm * efficiency.hbm
        ),
        ops=tuple(ops),
        measured=measured,
        measured_flops_per_second=measured_flops,
        measured_ridge_flops_per_byte=measured_ridge,
    )


def _get(table: Mapping[str, float], key: str) -> float | None:
    value = table.get(key)
    return float(value) if value is not None else None
