"""Compute time of one micro-batch on one GPU: its layers (`layer_time`), forward and backward,
what recomputation repeats, and the head and loss; the last pipeline stage and the largest.
`micro_batch_terms` runs it on a cluster's GPU under a framework and precision, with the
kernels they imply (`kernel_model_for`). Every function takes numbers for one plan or arrays
for the planner's grid (`xp`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import (
    NONE,
    SELECTIVE,
    SELECTIVE_OP,
    STAGE_LAYER_FIELDS,
    PlanNumbers,
)
from trainbudget.core.parallel.timing.attention_time import AttentionKernel
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.parallel.timing.layer_time import (
    ROOFLINE_ONLY,
    KernelModel,
    LayerCompute,
    Roofline,
    layer_compute,
)
from trainbudget.core.parallel.timing.layer_traffic import BACKWARD_PER_FORWARD
from trainbudget.core.parallel.timing.loss_time import (
    gathered_logits_copy_seconds,
    loss_extra_bytes_per_logit,
    loss_logits,
    loss_seconds,
)
from trainbudget.core.spec.fp8_recipes import check_fp8_recipe_runs_on, get_fp8_recipe
from trainbudget.core.spec.frameworks import GENERIC, INDUCTOR_LAYER_KERNELS, Framework
from trainbudget.core.spec.hardware import HARDWARE, Hardware
from trainbudget.core.spec.kernel_costs import (
    CUDA_GRAPHS_BLOG,
    EPILOGUE_OVERLAPPED,
    FP8_OVER_BF16_FALLBACK,
    eager_dispatch_seconds_per_op,
    fp8_matmul_fraction,
)
from trainbudget.core.spec.loss_kernels import get_loss_kernel
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Precision


@dataclass(frozen=True, kw_only=True)
class MicroBatchCompute:
    """One micro-batch on the last pipeline stage, and on the largest (numbers, or arrays)."""

    forward_seconds: Any
    """The last stage's layers, forward."""
    backward_seconds: Any
    """The last stage's layers, backward, with what recomputation repeats."""
    head_seconds: Any
    """The head's matmuls, forward and backward, and the loss's memory traffic of both passes
    (the last stage's extra work)."""
    attention_seconds: Any
    """One layer's attention core, forward (what CP's ring exchange hides behind)."""
    linear_seconds: Any
    """One layer's linear-layer GEMMs, forward (what TP's collectives can pipeline with)."""
    stage_seconds: Any
    """The slowest stage: the last one's layers and head (`head_seconds`), or the largest
    stage's layers when an uneven split makes another stage slower (with an even split the
    last stage is the slowest)."""
    pipeline_seconds: Any
    """One micro-batch through every stage, forward and backward: all the model's layers (at
    the last stage's mean layer time, its mix of MoE or sliding-window layers) and the head
    (= stage_seconds without pipeline parallelism)."""


def micro_batch_compute(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    causal: bool = True,
    xp: Ops = SCALAR,
    sms: int = 0,
    kernels: KernelModel = ROOFLINE_ONLY,
    recompute_from_first: bool = True,
    selective_reruns_attention: bool = False,
) -> MicroBatchCompute:
    """`eff` resolved against the GPU (`Efficiency.resolved`), whose SM count is `sms`;
    `peak` the rate of the matmuls outside a low-precision recipe; `kernels` what the GPU's
    kernels do beyond the roofline (`KernelModel`); `recompute_from_first` how every-K-th
    recomputation counts its layers (`PlanNumbers.recomputed_layers`);
    `selective_reruns_attention` whether selective recomputation runs a fused attention's
    forward again (`Framework.selective_reruns_fused_attention`)."""
    layer = layer_compute(
        spec,
        L,
        seq_len=seq_len,
        e=e,
        peak=peak,
        hbm=hbm,
        eff=eff,
        causal=causal,
        xp=xp,
        sms=sms,
        kernels=kernels,
    )
    fwd, attn = layer.forward_seconds, layer.attention_seconds
    layer_backward = layer.backward_seconds
    layers = L.stage_layers(spec.n_layers, "last")
    largest = L.stage_layers(spec.n_layers, "max")
    rerun = selective_reruns_attention
    recompute = _recompute_per_layer(L, layers, layer, xp, recompute_from_first, rerun)
    recompute_largest = _recompute_per_layer(L, largest, layer, xp, recompute_from_first, rerun)
    tokens = L.micro_batch * seq_len / L.cp
    whole = kernels.loss_whole_vocabulary
    logits = loss_logits(tokens, spec.vocab_size, L.tp, whole)  # elements on this GPU
    r = Roofline(e=e, peak=peak, hbm=hbm, eff=eff, xp=xp, sms=sms, k=kernels)
    head_gemm = r.gemm(tokens, spec.vocab_size / L.tp, spec.d_model)  # vocab-parallel logits
    # the logits read, their gradient written, the loss kernel's fp32 traffic: both passes
    loss = loss_seconds(logits, e, kernels.loss_extra_bytes, hbm * eff.hbm)
    if whole:  # the gather's copies (the gather itself: comm_time's TP collectives)
        loss = loss + gathered_logits_copy_seconds(
            tokens, spec.vocab_size, L.tp, e, hbm * eff.hbm, xp
        )
    head = (1 + BACKWARD_PER_FORWARD) * head_gemm + loss
    forward = layers * fwd
    backward = layers * (layer_backward + recompute)
    last = forward + backward + head
    largest = largest * fwd + largest * (layer_backward + recompute_largest)
    stage = xp.maximum(largest, last)
    # every stage's layers at the last stage's per-layer time, and the head once
    every = spec.n_layers * (forward + backward) / layers + head
    return MicroBatchCompute(
        forward_seconds=forward,
        backward_seconds=backward,
        head_seconds=head,
        attention_seconds=attn,
        linear_seconds=layer.linear_seconds,
        stage_seconds=stage,
        pipeline_seconds=xp.where(L.pp == 1, stage, every),
    )


def _recompute_per_layer(
    L: PlanNumbers,
    layers: Any,
    layer: LayerCompute,
    xp: Ops,
    from_first: bool = True,
    rerun_fused: bool = False,
) -> Any:
    """Backward seconds per layer that recomputation adds on a stage of `layers`: the attention
    core's forward (selective; under FlashAttention nothing, as it keeps no scores and its
    backward recomputes them itself, in `attention_backward_seconds` -- unless the framework
    checkpoints the fused kernel anyway and runs its forward again, `rerun_fused`), the
    memory-bound ops
    and the unsaved matmuls (selective-op) or the whole layer's forward (full; of every K-th
    layer, ceil(layers / K) of them, spread over the stage's layers)."""
    fwd, attn = layer.forward_seconds, layer.attention_seconds
    full = L.recomputed_layers(layers, from_first) * fwd / layers
    by_op = layer.memory_bound_seconds + layer.op_recomputed_matmul_seconds
    recompute = xp.where(L.recompute == SELECTIVE_OP, by_op, full)
    skipped = L.flash & (not rerun_fused)
    recompute = xp.where(L.recompute == SELECTIVE, xp.where(skipped, 0.0, attn), recompute)
    return xp.where(L.recompute == NONE, 0.0, recompute)


def micro_batch_terms(
    spec: ModelSpec,
    L: PlanNumbers,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    framework: Framework = GENERIC,
    xp: Ops = SCALAR,
) -> MicroBatchCompute:
    """One micro-batch's compute on the plan's last and largest stages (`micro_batch_compute`
    on this cluster's GPU, under this framework and precision). It reads the model-parallel
    layout, the micro-batch and the recompute policy (`COMPUTE_FIELDS`), nothing of data
    parallelism."""
    hw = cluster.hardware
    eff = efficiency.resolved(hw, framework.attention_kernel)
    return micro_batch_compute(
        spec,
        L,
        seq_len=seq_len,
        e=precision.activation_bytes,
        peak=hw.peak_flops_per_second(precision.other_matmul_dtype),
        hbm=hw.hbm_bytes_per_second,
        eff=eff,
        causal=causal,
        xp=xp,
        sms=hw.sm_count,
        kernels=kernel_model_for(efficiency, eff, hw, framework, precision),
        recompute_from_first=framework.recompute_every_from_first,
        selective_reruns_attention=framework.selective_reruns_fused_attention,
    )


COMPUTE_FIELDS = (
    "tp",
    "pp",
    "cp",
    "sp",
    "micro_batch",
    "recompute",
    "recompute_every",
    "flash",
    *STAGE_LAYER_FIELDS,
)
"""The plan fields `micro_batch_terms` reads (the planner's grid computes it once per distinct
combination of them: `search.product_grid.per_distinct_rows`, which hides the others)."""


KERNEL_GAP_SECONDS = CUDA_GRAPHS_BLOG.stream_seconds - CUDA_GRAPHS_BLOG.kernel_seconds
"""GPU time a kernel adds queued behind another in a stream, for every GPU (one measurement:
`kernel_costs.kernel_floor_seconds`)."""


def kernel_model_for(
    given: Efficiency, eff: Efficiency, hw: Hardware, framework: Framework, precision: Precision
) -> KernelModel:
    """What this GPU's kernels do beyond the roofline under this framework and precision
    (`layer_time.KernelModel`)."""
    return KernelModel(
        linear_peak=hw.peak_flops_per_second(precision.compute_dtype),
        linear_fraction=_linear_fraction(given, eff, hw, precision),
        cast=_fp8_casts(framework, precision, hw),
        serial_epilogue=hw.name not in EPILOGUE_OVERLAPPED,
        kernel_gap=KERNEL_GAP_SECONDS,
        dispatch=eager_dispatch_seconds_per_op(),
        kernels_per_layer=(
            INDUCTOR_LAYER_KERNELS if framework.compiled else framework.kernels_per_layer_forward
        ),
        attention=_attention_kernel(given, eff, hw, framework, precision),
        loss_extra_bytes=loss_extra_bytes_per_logit(
            framework.loss_kernel, framework.compiled, precision.activation_bytes
        ),
        loss_whole_vocabulary=get_loss_kernel(framework.loss_kernel).whole_vocabulary,
    )


def _linear_fraction(
    given: Efficiency, eff: Efficiency, hw: Hardware, precision: Precision
) -> float | None:
    """The large-GEMM fraction of the linear layers' peak: under FP8 the GPU's measured FP8
    one (`kernel_costs.fp8_matmul_fraction`: MAMF's FP8 rows, lower than bf16's on Hopper);
    None (`eff.matmul`) otherwise or where a calibration gave the matmul fraction."""
    if precision.compute_dtype != "fp8" or given.matmul is not None:
        return None
    if hw.name not in HARDWARE:
        return eff.matmul * FP8_OVER_BF16_FALLBACK
    return fp8_matmul_fraction(hw.name, eff.matmul)


def _fp8_casts(
    framework: Framework, precision: Precision, hw: Hardware
) -> tuple[float, float, float]:
    """Bytes per element the framework's FP8 recipe moves casting a linear layer's input,
    weight and output gradient (`fp8_recipes.FP8_RECIPES`); none outside FP8. A catalog GPU
    that cannot run the recipe's GEMMs is an error."""
    if precision.compute_dtype != "fp8":
        return (0.0, 0.0, 0.0)
    if hw.name in HARDWARE:
        check_fp8_recipe_runs_on(framework.fp8_recipe, hw.name)
    r = get_fp8_recipe(framework.fp8_recipe)
    return (
        r.input_bytes_per_element,
        r.weight_bytes_per_element,
        r.grad_output_bytes_per_element,
    )


def _attention_kernel(
    given: Efficiency, eff: Efficiency, hw: Hardware, framework: Framework, precision: Precision
) -> AttentionKernel | None:
    """The framework's fused attention kernel timed from the measured tables
    (`attention_time`), unless an attention fraction was given (a calibration's measured one,
    which then times it)."""
    if given.attention is not None:
        return None
    peak = hw.peak_flops_per_second(precision.other_matmul_dtype)
    return AttentionKernel(framework.attention_kernel, hw.name, peak, eff.in_training)
