"""Every assumption behind a plan report, worded with the values actually used. Pure.

The overlap rules are read from `core.step_time`'s module docstring, where the step-time model
states them, so the page cannot drift from the model; the failure assumptions are
`core.parallel.reliability.ASSUMPTIONS`, the ones `trainbudget reliability --json` lists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainbudget.core.parallel.fits import rule_for
from trainbudget.core.parallel.reliability import ASSUMPTIONS as RELIABILITY_ASSUMPTIONS
from trainbudget.core.parallel.search.planner import RankedPlan
from trainbudget.core.parallel.timing import step_time as step_time_module
from trainbudget.core.units import format_bytes, format_flops_rate

MICROSECONDS_PER_SECOND = 1e6

if TYPE_CHECKING:
    from trainbudget.report.plan_question import PlanQuestion


def overlap_rules() -> list[str]:
    """The bullets under 'Overlap model' in core.step_time's docstring, one string each."""
    bullets: list[str] = []
    inside = False
    for line in (step_time_module.__doc__ or "").splitlines():
        if line.startswith("Overlap model"):
            inside = True
        elif inside and line.startswith("- "):
            bullets.append(line[2:].strip())
        elif inside and line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
        elif inside and bullets:
            break
    return bullets


def plan_assumptions(q: PlanQuestion, best: RankedPlan) -> tuple[str, ...]:
    c, hw, p, pol = q.cluster, q.cluster.hardware, q.precision, q.policy
    eff = q.efficiency.resolved(hw, q.framework.attention_kernel)
    dtype = p.compute_dtype
    state = q.optimizer.state_bytes_per_param(p)
    out = [
        "FLOPs are matmul FLOPs (multiply-add = 2) with "
        + ("causal" if q.count_causal else "non-causal")
        + " attention and backward = 2 x forward; MFU counts model FLOPs (3 x forward), HFU "
        "adds the recomputed forward",
        "attention timed under a "
        + ("causal mask: FlashAttention skips the masked tiles" if q.causal else "full mask"),
        f"peak: {hw.description} dense {dtype} {format_flops_rate(hw.peak_flops_per_second(dtype))}"
        f" (datasheet, no sparsity); HBM {format_bytes(hw.hbm_bytes_per_second)}/s; "
        f"{format_bytes(hw.memory_bytes)} per GPU",
        f"kernel efficiencies from {q.efficiency_source}: matmul {eff.matmul:.3g} of peak "
        f"x {eff.in_training:.3g} in training, less each GEMM's tile and wave quantization "
        f"over {hw.sm_count or 'unstated'} SMs; attention ({q.framework.attention_kernel}) "
        f"{eff.attention:.3g}; HBM {eff.hbm:.3g} of bandwidth",
        f"{c.gpus_per_node} GPUs per node over {hw.intra_node_link} "
        f"({format_bytes(hw.intra_node_bytes_per_second)}/s per GPU, one direction), nodes over "
        f"{hw.inter_node_link} ({format_bytes(hw.inter_node_bytes_per_second)}/s per GPU); "
        f"collectives reach {c.link_efficiency:.3g} of it, with "
        f"{c.intra_node_latency_seconds * MICROSECONDS_PER_SECOND:g} us / "
        f"{c.inter_node_latency_seconds * MICROSECONDS_PER_SECOND:g} us latency per step inside / "
        "across nodes "
        "(alpha-beta ring or tree, whichever is faster)",
        f"{p.name}: weights {p.weight_bytes} B, gradients {p.grad_bytes} B, fp32 master "
        f"{p.master_bytes} B per parameter; {q.optimizer.name} state {state:g} B per parameter; "
        f"activations {p.activation_bytes} B per element, "
        f"{'dropout masks kept' if q.model.dropout else 'no dropout'}",
        q.framework.assumption(),
        "memory per GPU is the peak of its parts on the most loaded pipeline stage; a plan fits "
        f"when its {rule_for(pol.memory_headroom, q.framework.name).describe()} "
        f"({format_bytes(c.hardware.usable_memory_bytes)} the device gives the process)",
        f"layouts searched: TP up to {pol.max_tp or c.gpus_per_node}, ZeRO stages "
        f"{', '.join(map(str, pol.zero_stages))}, recomputation {', '.join(pol.recompute)}, "
        f"context parallelism {'on' if pol.allow_cp else 'off'}, optimizer offload "
        f"{'allowed' if pol.allow_offload else 'off'}, micro-batch up to {pol.max_micro_batch}, "
        f"FlashAttention {'on' if pol.flash_attention else 'off'}; ranked by time per token, "
        "equal times by memory",
        *(f"overlap: {rule}" for rule in overlap_rules()),
        f"chosen plan: {best.time.overlap_note}",
        *best.time.notes,
        f"training time = {q.tokens:.4g} tokens / the chosen plan's predicted tokens per second,"
        " failure-free; the failures section adds restarts and checkpoint writes",
        "GPU-hours = training hours x GPUs"
        + (
            f"; cost at {q.price_per_gpu_hour:g} per GPU-hour"
            if q.price_per_gpu_hour is not None
            else "; no price given (--price-per-gpu-hour), so cost is shown in GPU-hours"
        ),
        f"scaling curve: the same model, tokens and global batch ({q.global_batch} sequences of "
        f"{q.seq_len} tokens) and the same search at every GPU count; more GPUs than the batch "
        "can spread over need TP, PP or CP, whose communication and bubble do not shrink",
        "roofline: one forward GEMM of one micro-batch on one GPU of the chosen plan; the "
        "attention core and element-wise ops are not placed",
        *RELIABILITY_ASSUMPTIONS,
        *q.notes,
    ]
    return tuple(out)
