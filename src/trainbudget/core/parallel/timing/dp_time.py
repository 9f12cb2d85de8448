"""Data-parallel communication of one step (ZeRO 0-3, HSDP) and how much of it the compute
hides, as Megatron-Core, DeepSpeed, FSDP and nanotron schedule it; `comm_time` calls it with the
step's other collectives. Each collective is written once, for one plan or the planner's
arrays (`xp`)."""

from __future__ import annotations

from typing import Any

from trainbudget.core.ops import Ops
from trainbudget.core.parallel.layout import FULL, PlanNumbers
from trainbudget.core.parallel.memory.gpu_terms import engine_columns
from trainbudget.core.parallel.memory.parallel_memory import fp8_recipe_weights_per_layer
from trainbudget.core.single.params import parameter_tensors
from trainbudget.core.spec.frameworks import Framework

ZERO3_GATHERS_PER_MICRO_BATCH = 2
"""FSDP gathers each layer's weights for the forward and again for the backward."""
OVERLAP_COMPUTE_SLOWDOWN = 0.189
"""How much slower compute runs while a collective runs beside it (NCCL's kernels take SMs and
HBM bandwidth from the GEMMs): 18.9 % on average, up to 40 %, over GPT and Llama training
kernels on A100, H100, MI250 and MI210 (Lee et al. 2025, 'Characterizing Compute-Communication
Overlap in GPU-Accelerated Distributed Deep Learning', arXiv 2507.03114, abstract). A measured
figure, the same for every run; `overlap_cost` applies it to the collectives that hide behind
compute (data-parallel reductions and gathers, context parallelism's ring)."""


def overlap_cost(hidden_seconds: Any) -> Any:
    """Seconds a collective hidden behind compute still costs: the compute beside it runs
    OVERLAP_COMPUTE_SLOWDOWN slower, so in h seconds it does h / (1 + s) seconds of its work."""
    return hidden_seconds * OVERLAP_COMPUTE_SLOWDOWN / (1 + OVERLAP_COMPUTE_SLOWDOWN)


def data_parallel_seconds(
    spec, L, span, precision, framework, micro_batch, compute_seconds, stage, run, xp
):
    """ZeRO / HSDP over the dp * cp group; exposed seconds.

    Dense weights use the whole dp * cp group; routed experts the expert-data-parallel group of
    dp * cp / ep ranks. ZeRO 0 all-reduces the gradients. ZeRO >= 1 reduce-scatters them in the
    shard group (all of dp * cp, or HSDP's shard_dp * cp), all-reduces the shards across the
    replicas, and all-gathers the updated weights in the shard group: once per step for
    stages 1-2 (ZeRO paper Sec. 7: the same bytes as one all-reduce), for the forward and the
    backward of every micro-batch for stage 3, one collective per layer (FSDP's unit: each
    call pays the ring's latency)."""
    gb = framework.grad_reduce_bytes or precision.grad_bytes
    z, m = L.zero, L.grad_accum
    dp_group = L.dp * L.cp
    sharded = z > 0
    # ZeRO-1/2 gradients all-reduced whole after the backward (`Framework.
    # sharded_grads_all_reduced_after_backward`), not reduce-scattered during it
    late_grads = sharded & (z < 3) & framework.sharded_grads_all_reduced_after_backward
    scattered = sharded & xp.not_(late_grads)
    # an engine that keeps the stage's parameters unsharded under torch's pipelining (FSDP2:
    # pipelining/stage.py turns resharding and gradient sync off for every micro-batch)
    # gathers them once and reduce-scatters the gradients once per step
    piped = (L.pp > 1) & engine_columns(framework, z, dp_group == 1, xp).pipeline_keeps_unsharded
    # sharded gradients reduced after every micro-batch's backward (FSDP), else once per step
    every = (z >= 2) & framework.reduce_every_micro_batch & xp.not_(piped)
    reductions = xp.where(every, m, 1)
    # the updated weights once per step (ZeRO-1/2), every micro-batch's forward and backward (3)
    # and its recomputed forward where the framework fetches them again for it
    per_mb = zero3_gathers_per_micro_batch(L, framework)
    gathers = xp.where(z == 3, xp.where(piped, 1, per_mb * m), sharded * 1)
    layers = L.stage_layers(spec.n_layers, "last")  # the stage whose gradients these are
    # collectives per pass under ZeRO-3: one per layer, or one per parameter tensor
    per_layer = parameter_tensors(spec) / spec.n_layers if framework.zero3_serial_per_tensor else 1
    units = xp.where(z == 3, layers * per_layer, 1)
    element_bytes = gather_bytes_per_element(spec, L, precision, framework, stage, layers, xp)
    counts = (xp.not_(scattered) * 1, scattered * reductions * units, gathers * units)
    t_grad, t_gather = _collectives(
        spec, L, span, stage, gb, element_bytes, units, counts, run, xp
    )  # fmt: skip
    params = stage.dense + stage.experts
    # what waits for the backward's end or runs inside the optimizer step: exposed whole
    late_gather = sharded & (z < 3) & framework.param_gather_after_step
    late = xp.where(late_grads, t_grad, 0.0) + xp.where(late_gather, t_gather, 0.0)
    early_grad = xp.where(late_grads, 0.0, t_grad)
    early_gather = xp.where(late_gather, 0.0, t_gather)
    step = late + _step_exposed(
        early_grad, early_gather, reductions, framework.bucket_bytes / (params * gb),
        sharded & xp.not_(late_gather), every, micro_batch, compute_seconds, xp,
    )  # fmt: skip
    layer = _layer_exposed(t_grad, t_gather, per_mb, reductions, m, layers, micro_batch, xp)
    total = t_grad + t_gather
    # never less than what the whole step's compute cannot cover; all of it where the
    # framework synchronizes the device before each gather
    overlapped = xp.maximum(layer, total - compute_seconds)
    zero3 = total if framework.zero3_serial_per_tensor else overlapped
    # kept unsharded under a pipeline, ZeRO-3 gathers and reduces once a step, as ZeRO-1/2 do
    exposed = xp.where((z == 3) & xp.not_(piped), zero3, step)
    hidden = xp.maximum(0.0, total - exposed)
    return xp.where(dp_group > 1, exposed + overlap_cost(hidden), 0.0)


def _collectives(spec, L, span, stage, gb, element_bytes, units, counts, run, xp: Ops):
    """(gradient, gather) seconds of the data-parallel collectives: dense weights over the
    whole dp * cp group, routed experts over the expert-data-parallel group of dp * cp / ep
    ranks; `counts` the calls of the whole-gradient all-reduce, of each unit's reduce-scatter
    (and replica all-reduce) and of each unit's gather; `element_bytes` the gathers' bytes per
    element, (dense, experts)."""
    whole, scatters, gathers = counts
    dp_group, shard = L.dp * L.cp, L.shard_dp * L.cp
    replicas = L.dp // L.shard_dp
    # (parameters, dp group, its per-node span, shard group, its span, shard of the params)
    groups = [(stage.dense, dp_group, span["dp_cp"], shard, span["shard_cp"], shard)]
    if spec.is_moe:
        e_shard = xp.maximum(1, shard // L.ep)
        e_pn, e_shard_pn = (
            xp.maximum(1, span["dp_cp"] // L.ep),
            xp.maximum(1, span["shard_cp"] // L.ep),
        )
        groups.append((stage.experts, dp_group // L.ep, e_pn, e_shard, e_shard_pn, e_shard))
    t_grad = t_gather = 0.0
    for (n, size, pn, s, s_pn, part), e in zip(groups, element_bytes, strict=False):
        grads = n * gb
        t_grad = t_grad + run("dp_grad_reduce", "all_reduce", grads, size, pn, whole)
        per_unit = grads / units
        t_grad = t_grad + run("dp_grad_reduce", "reduce_scatter", per_unit, s, s_pn, scatters)
        t_grad = t_grad + run(
            "dp_replica_all_reduce", "all_reduce", per_unit / part, replicas, span["replica"],
            scatters,
        )  # fmt: skip
        t_gather = t_gather + run(
            "dp_param_gather", "all_gather", per_unit * (e / gb), s, s_pn, gathers
        )
    return t_grad, t_gather


FP8_GATHER_BYTES = 1
"""Bytes per element of an FP8 weight gathered in FP8 (`Framework.fp8_param_gather`)."""


def gather_bytes_per_element(spec, L, precision, framework, stage, layers, xp: Ops):
    """(dense, expert) bytes per element of the weight gathers: the framework's
    (`Framework.param_gather_bytes`) or the precision's weight bytes; under `--precision fp8`
    with `Framework.fp8_param_gather`, the stage's FP8-recipe linear weights at one byte (the
    routed experts all of them; the dense parameters their linear share, the embeddings, head
    and norms staying 16-bit)."""
    base = framework.param_gather_bytes or precision.weight_bytes
    if precision.compute_dtype != "fp8" or not framework.fp8_param_gather:
        return base, base
    linear = layers * fp8_recipe_weights_per_layer(spec, L)
    experts = stage.experts
    share = xp.minimum(1.0, xp.maximum(0.0, linear - experts) / xp.maximum(stage.dense, 1.0))
    return base - share * (base - FP8_GATHER_BYTES), FP8_GATHER_BYTES


def zero3_gathers_per_micro_batch(L: PlanNumbers, framework: Framework) -> Any:
    """Gathers of each layer per micro-batch under ZeRO-3: forward and backward, and the
    recomputed forward where the framework fetches the weights again for it."""
    if not framework.regathers_for_recompute:
        return ZERO3_GATHERS_PER_MICRO_BATCH
    return ZERO3_GATHERS_PER_MICRO_BATCH + (L.recompute == FULL)


def gather_copy_out_seconds(L, precision, framework, stage, memory_rate, xp) -> Any:
    """FSDP2 copies every gathered layer out of the all-gather buffer on the compute stream:
    the unsharded weights read once and written once per gather, in series with the compute
    (`Framework.gather_copy_out`)."""
    if not framework.gather_copy_out:
        return 0.0
    gathers = zero3_gathers_per_micro_batch(L, framework) * L.grad_accum
    moved = gathers * (stage.dense + stage.experts) * 2 * precision.weight_bytes
    return xp.where((L.zero == 3) & (L.dp * L.cp > 1), moved / memory_rate, 0.0)


def _step_exposed(t_grad, t_gather, reductions, bucket_share, sharded, every, mb, compute, xp):
    """ZeRO 0-2: gradients reduce in buckets during the last micro-batch's backward (during
    every backward where each micro-batch reduces); the last bucket (the first layers'
    gradients) after the backward ends; ZeRO-1/2's gather of the updated weights overlaps the
    next step's first forward."""
    floor = t_grad / reductions * xp.minimum(1.0, bucket_share)
    fwd, bwd = mb.forward_seconds, mb.backward_seconds
    window = xp.where(every, compute, xp.where(sharded, bwd + fwd, bwd))
    return xp.maximum(floor, t_grad + t_gather - window)


def _layer_exposed(t_grad, t_gather, per_mb, reductions, m, layers, mb, xp):
    """ZeRO-3 / FSDP, layer by layer (Zhao et al. 2023, arXiv 2304.11277, Sec. 3.3.2-3.3.3):
    each layer's gather is prefetched behind the compute of the layer before it, forward and
    backward, and its reduce-scatter runs behind the backward of the layer after it; a layer
    whose communication outlasts its compute exposes the difference (max(compute, comm) per
    layer, not per step). Each forward starts with a gather nothing precedes (FSDP reshards
    after the backward, so no prefetch crosses a micro-batch boundary); the backward's first
    gather hides behind the head's backward. Each reducing backward waits for its last
    reduce-scatter (FSDP's post-backward callback). `per_mb` gathers of a layer per
    micro-batch: one forward, the rest (backward, a recomputation's) in the backward."""
    g = t_gather / (per_mb * m * layers)  # one layer's gather
    r = t_grad / (reductions * layers)  # one layer's reduction, in a reducing micro-batch
    f, b = mb.forward_seconds / layers, mb.backward_seconds / layers
    gb, rest = (per_mb - 1) * g, layers - 1  # gb: a layer's gathers in the backward
    forward = g + rest * xp.maximum(0.0, g - f)
    # behind each layer's backward: the next layer's gathers and the previous one's reduction;
    # the first layer's reduction after the last compute
    reducing = rest * xp.maximum(0.0, gb + r - b) + r
    plain = rest * xp.maximum(0.0, gb - b)
    return m * (forward + plain) + reductions * (reducing - plain)
