"""Memory per GPU under a parallel plan: model state sharded by TP, PP, EP and ZeRO, activations
split by TP/SP/CP and multiplied by the micro-batches a pipeline stage keeps in flight.

Model state follows ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 5.1 and Fig. 1):
stage 1 shards the optimizer state (K*Psi/N), stage 2 also the gradients, stage 3 also the
parameters -- over the data-parallel group (dp * cp ranks, or the HSDP shard group), never over
the world. Layer weights split by TP inside a stage; experts split by EP (and TP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import unknown_key
from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import (
    FULL,
    GPIPE,
    INTERLEAVED,
    ON_GPU,
    SELECTIVE,
    SELECTIVE_OP,
    PlanNumbers,
    as_numbers,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.activations import (
    FP32_BYTES,
    layer_activations,
    op_checkpoint_layer,
    op_checkpoint_working_bytes,
)
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision
from trainbudget.core.units import MB

# PyTorch DDP default gradient bucket (bucket_cap_mb=25, torch DistributedDataParallel)
DDP_BUCKET_BYTES = 25 * MB
DDP_BUCKETS_IN_FLIGHT = 2
"""One bucket reduces while the next fills."""


@dataclass(frozen=True, kw_only=True)
class ModelState:
    """Bytes of weights, gradients, fp32 master and optimizer state on one GPU."""

    params_bytes: Any
    grads_bytes: Any
    master_bytes: Any
    optimizer_state_bytes: Any

    @property
    def optimizer_bytes(self) -> Any:
        return self.master_bytes + self.optimizer_state_bytes

    @property
    def total_bytes(self) -> Any:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def zero_model_state(
    n_params: Any,
    *,
    shard: Any,
    zero: Any,
    precision: Precision,
    optimizer: Optimizer,
    grad_bytes: float | None = None,
    xp: Ops = SCALAR,
) -> ModelState:
    """ZeRO's per-GPU model state for n_params replicated over `shard` data-parallel ranks
    (B-zero, seed 004 / ZeRO Fig. 1: Psi = 7.5e9, N = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB).
    `grad_bytes`: bytes per gradient element when the framework keeps them in another dtype
    than the precision's (Megatron's fp32 main gradients)."""
    state_per_param = optimizer.state_bytes_per_param(precision)
    grad = precision.grad_bytes if grad_bytes is None else grad_bytes
    return ModelState(
        params_bytes=n_params * precision.weight_bytes / xp.where(zero >= 3, shard, 1),
        grads_bytes=n_params * grad / xp.where(zero >= 2, shard, 1),
        master_bytes=n_params * precision.master_bytes / xp.where(zero >= 1, shard, 1),
        optimizer_state_bytes=n_params * state_per_param / xp.where(zero >= 1, shard, 1),
    )


@dataclass(frozen=True, kw_only=True)
class StageParams:
    """Parameters one GPU of a pipeline stage holds before ZeRO: dense ones (sharded over the
    data-parallel group) and expert ones (sharded over the expert-data-parallel group)."""

    dense: Any
    experts: Any
    layer_dense: Any
    """One layer's dense parameters on this GPU (what ZeRO-3 gathers at a time)."""


STAGES = ("first", "middle", "last", "only")


def stage_params(
    spec: ModelSpec, plan: Plan | PlanNumbers, stage: str, xp: Ops = SCALAR
) -> StageParams:
    """'first' holds the embeddings, 'last' the final norm and head (and, when tied and pp > 1,
    a copy of the word embedding, as Megatron keeps one on the last stage), 'middle' neither;
    with pp = 1 the one stage ('only', or any name) holds both."""
    if stage not in STAGES:
        raise unknown_key("stage", stage, STAGES)
    L = as_numbers(plan)
    p = count_params(spec)
    n = spec.n_layers
    norms_per_layer = (p.attention_norm + p.mlp_norm) / n  # replicated across TP
    split_per_layer = (p.attention_qkv + p.attention_proj + p.mlp + p.moe_shared_experts) / n
    router_per_layer = p.moe_router / n  # replicated
    layer_dense = norms_per_layer + router_per_layer + split_per_layer / L.tp
    layers = n if stage == "only" else L.stage_layers(n, stage)
    dense = layers * layer_dense
    experts = layers * (p.moe_experts / n) / (L.ep * L.tp)
    vocab_rows = spec.vocab_size * spec.d_model / L.tp  # vocab-parallel embedding / head
    one_stage = L.pp == 1
    embedding = (stage in ("first", "only")) | one_stage
    head = (stage in ("last", "only")) | one_stage
    dense = dense + xp.where(embedding, vocab_rows + p.embedding_position, 0)
    dense = dense + xp.where(head, p.final_norm, 0)
    untied_or_split = (not spec.tied_embeddings) | (L.pp > 1)
    dense = dense + xp.where(head & untied_or_split, vocab_rows, 0)
    return StageParams(dense=dense, experts=experts, layer_dense=layer_dense)


def in_flight_micro_batches(
    plan: Plan | PlanNumbers, xp: Ops = SCALAR, stage_index: Any = 0
) -> Any:
    """Micro-batches whose activations stage `stage_index` (0 = the first) holds at its peak.

    GPipe keeps all m; 1F1B at most pp - i on stage i (Narayanan et al. 2021, Sec. 2.2.1); the
    interleaved schedule pp * (1 + (pp - 1) / (pp * vpp)) on the first stage (Korthikanti et
    al. 2022, Sec. 4.2.3), and on stage i Megatron's warm-up of 2 (pp - i - 1) + (vpp - 1) pp
    chunks plus the one in flight, 1 / vpp of a micro-batch each: pp + (pp - 1 - 2 i) / vpp
    (megatron/core/pipeline_parallel/schedules.py, num_warmup_microbatches of
    forward_backward_pipelining_with_interleaving)."""
    L = as_numbers(plan)
    m, pp = L.grad_accum, L.pp
    one_f_one_b = xp.minimum(m, pp - stage_index)
    interleaved = xp.minimum(m, pp) * (1 + (pp - 1 - 2 * stage_index) / (pp * L.vpp))
    return xp.where(
        L.schedule == GPIPE, m, xp.where(L.schedule == INTERLEAVED, interleaved, one_f_one_b)
    )


@dataclass(frozen=True, kw_only=True)
class PlanMemory:
    stage: str
    """The pipeline stage whose GPU needs the most: 'first', 'middle' or 'last' ('only' when
    pp = 1)."""
    state: ModelState
    activations_bytes: Any
    buffers_bytes: Any
    """ZeRO-3 gathered layers, DDP gradient buckets, the framework's runtime overhead."""
    host_bytes: Any
    """Offloaded to CPU or NVMe (not on the GPU)."""

    @property
    def params_bytes(self) -> Any:
        return self.state.params_bytes

    @property
    def grads_bytes(self) -> Any:
        return self.state.grads_bytes

    @property
    def optimizer_bytes(self) -> Any:
        return self.state.optimizer_bytes

    @property
    def total_bytes(self) -> Any:
        return self.state.total_bytes + self.activations_bytes + self.buffers_bytes


def layer_bytes(spec: ModelSpec, L: PlanNumbers, seq_len: int, e: int, xp: Ops = SCALAR) -> Any:
    """What one layer saves for one micro-batch on one GPU of `L` (the same on every stage)."""
    return layer_activations(
        spec,
        seq_len=seq_len,
        micro_batch=L.micro_batch,
        activation_bytes=e,
        flash_attention=L.flash,
        drop_attention_matrix=L.recompute == SELECTIVE,
        tp=L.tp,
        sp=L.sp,
        cp=L.cp,
        xp=xp,
    ).total_bytes


def stage_activations(
    spec: ModelSpec,
    L: PlanNumbers,
    seq_len: int,
    e: int,
    stage: str,
    xp: Ops = SCALAR,
    layer: Any = None,
) -> Any:
    """Activation bytes at the peak of a stage's GPU: the layers' saved tensors for every
    micro-batch in flight (checkpoints only under full recomputation, what the per-op policy
    saves under selective-op, plus the layer being recomputed), and on the stage with the head
    its inputs, logits and loss. `layer`:
    `layer_bytes` when the caller has it already."""
    if layer is None:
        layer = layer_bytes(spec, L, seq_len, e, xp)
    layers = spec.n_layers if stage == "only" else L.stage_layers(spec.n_layers, stage)
    tokens = seq_len * L.micro_batch / L.cp
    rep = xp.where(L.sp, L.tp, 1)
    full = L.recompute == FULL
    checkpoint = tokens * spec.d_model * e / rep
    # recomputed layers keep their input; with recompute_every > 1 the others keep everything
    recomputed = L.recomputed_layers(layers)
    kept = xp.where(
        L.recompute_every == 1,
        layers * checkpoint,
        recomputed * checkpoint + (layers - recomputed) * layer,
    )
    per_micro_batch = xp.where(full, kept, layers * layer)
    working = xp.where(full, layer - checkpoint, 0.0)  # the layer being recomputed
    op = L.recompute == SELECTIVE_OP
    # (validate_plan refuses selective-op where op_checkpoint cannot model the layer; the
    # grid skips the per-op tensors when no plan of it uses the policy)
    if not op_checkpoint.unsupported(spec) and (op.any() if xp.is_array else op):
        saved = op_checkpoint_layer(
            spec,
            seq_len=seq_len,
            micro_batch=L.micro_batch,
            activation_bytes=e,
            flash_attention=L.flash,
            tp=L.tp,
            sp=L.sp,
            cp=L.cp,
            xp=xp,
        )
        per_micro_batch = xp.where(op, layers * saved.total_bytes, per_micro_batch)
        working = xp.where(op, op_checkpoint_working_bytes(layer, saved, xp), working)
    # the last stage: 1 (1F1B's bound, kept for every schedule); a middle one: the second
    # stage's count (i = 1), the most any stage between first and last holds
    last_of_many = (stage == "last") & (L.pp > 1)
    in_flight = in_flight_micro_batches(L, xp, 1 if stage == "middle" else 0)
    in_flight = xp.where(last_of_many, 1, in_flight)
    acts = in_flight * per_micro_batch + working
    # final norm and head inputs, vocab-parallel logits (activation dtype) plus fp32
    # log-probabilities and their gradient (Megatron's vocab-parallel cross-entropy)
    head = (stage in ("last", "only")) | (L.pp == 1)
    acts = acts + xp.where(head, 2 * tokens * spec.d_model * e / rep, 0)
    acts = acts + xp.where(head, tokens * spec.vocab_size / L.tp * (e + 2 * FP32_BYTES), 0)
    return acts


_NO_EXPERTS = ModelState(
    params_bytes=0.0, grads_bytes=0.0, master_bytes=0.0, optimizer_state_bytes=0.0
)


def stage_memory(
    spec: ModelSpec,
    plan: Plan | PlanNumbers,
    stage: str,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
    xp: Ops = SCALAR,
    layer: Any = None,
) -> PlanMemory:
    """Peak bytes on one GPU of a pipeline stage of `plan` (numbers, or arrays of plans).
    `layer`: `layer_bytes` of the plan, when the caller computes several stages."""
    L = as_numbers(plan)
    sp_ = stage_params(spec, L, stage, xp)
    shard = L.shard_dp * L.cp  # ZeRO's shard group: dp * cp, or the HSDP shard times cp
    grad = framework.main_grad_bytes or precision.grad_bytes
    kw = dict(zero=L.zero, precision=precision, optimizer=optimizer, grad_bytes=grad, xp=xp)
    dense = zero_model_state(sp_.dense, shard=shard, **kw)
    experts = _NO_EXPERTS  # a dense model: skip the zeros (the grid's hot path)
    if spec.is_moe:
        experts = zero_model_state(sp_.experts, shard=xp.maximum(1, shard // L.ep), **kw)
    master = dense.master_bytes + experts.master_bytes
    opt_state = dense.optimizer_state_bytes + experts.optimizer_state_bytes
    params = dense.params_bytes + experts.params_bytes
    off_opt, off_params = L.offload_optimizer != ON_GPU, L.offload_params != ON_GPU
    host = xp.where(off_opt, master + opt_state, 0.0) + xp.where(off_params, params, 0.0)
    state = ModelState(
        params_bytes=xp.where(off_params, 0.0, params),
        grads_bytes=dense.grads_bytes + experts.grads_bytes,
        master_bytes=xp.where(off_opt, 0.0, master),
        optimizer_state_bytes=xp.where(off_opt, 0.0, opt_state),
    )
    # ZeRO-3: the layer in use and the one prefetched, gathered in full (TP-split) weights,
    # plus that layer's unsharded gradient before its reduce-scatter; else DDP's buckets
    zero3 = sp_.layer_dense * (2 * precision.weight_bytes + grad)
    # (a bucket never holds more than the model's gradients)
    bucket = xp.minimum(framework.bucket_bytes, (sp_.dense + sp_.experts) * grad)
    buckets = xp.where(L.dp * L.cp > 1, DDP_BUCKETS_IN_FLIGHT * bucket, 0.0)
    e = precision.activation_bytes
    return PlanMemory(
        stage=stage,
        state=state,
        activations_bytes=stage_activations(spec, L, seq_len, e, stage, xp, layer),
        buffers_bytes=xp.where(L.zero >= 3, zero3, buckets) + framework.runtime_overhead_bytes,
        host_bytes=host,
    )


def plan_memory(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
) -> PlanMemory:
    """Peak bytes on the most loaded GPU of `plan` (the first of the heaviest stages)."""
    stages = stage_memories(
        spec, plan, seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework
    )
    return max(stages.values(), key=lambda m: m.total_bytes)


def stage_memories(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
) -> dict[str, PlanMemory]:
    """Each pipeline stage's peak: 'only' (pp = 1), or 'first', 'middle' (pp > 2: the second
    stage's in-flight micro-batches with the largest middle stage's layers, the most any middle
    stage holds) and 'last'. With an even split the middle never exceeds the first (no
    embedding, fewer micro-batches in flight)."""
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    if plan.pp == 1:
        return {"only": stage_memory(spec, plan, "only", **kw)}
    names = ("first", "middle", "last") if plan.pp > 2 else ("first", "last")
    return {name: stage_memory(spec, plan, name, **kw) for name in names}
