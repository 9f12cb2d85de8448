"""Memory per GPU under a parallel plan: model state sharded by TP, PP, EP and ZeRO, activations
split by TP/SP/CP and multiplied by the micro-batches a pipeline stage keeps in flight.

Model state follows ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 5.1 and Fig. 1):
stage 1 shards the optimizer state (K*Psi/N), stage 2 also the gradients, stage 3 also the
parameters -- over the data-parallel group (dp * cp ranks, or the HSDP shard group), never over
the world. Layer weights split by TP inside a stage; experts split by EP (and TP).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.activations import FP32_BYTES, layer_activations
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision
from trainbudget.core.units import MB

# PyTorch DDP default gradient bucket (bucket_cap_mb=25, torch DistributedDataParallel);
# two are in flight while one reduces and the next fills.
DDP_BUCKET_BYTES = 25 * MB


@dataclass(frozen=True, kw_only=True)
class ModelState:
    """Bytes of weights, gradients, fp32 master and optimizer state on one GPU."""

    params_bytes: float
    grads_bytes: float
    master_bytes: float
    optimizer_state_bytes: float

    @property
    def optimizer_bytes(self) -> float:
        return self.master_bytes + self.optimizer_state_bytes

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def zero_model_state(
    n_params: float, *, shard: int, zero: int, precision: Precision, optimizer: Optimizer
) -> ModelState:
    """ZeRO's per-GPU model state for n_params replicated over `shard` data-parallel ranks
    (B-zero, seed 004 / ZeRO Fig. 1: Psi = 7.5e9, N = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB)."""
    state_per_param = optimizer.state_bytes_per_param(precision)
    return ModelState(
        params_bytes=n_params * precision.weight_bytes / (shard if zero >= 3 else 1),
        grads_bytes=n_params * precision.grad_bytes / (shard if zero >= 2 else 1),
        master_bytes=n_params * precision.master_bytes / (shard if zero >= 1 else 1),
        optimizer_state_bytes=n_params * state_per_param / (shard if zero >= 1 else 1),
    )


@dataclass(frozen=True, kw_only=True)
class StageParams:
    """Parameters one GPU of a pipeline stage holds before ZeRO: dense ones (sharded over the
    data-parallel group) and expert ones (sharded over the expert-data-parallel group)."""

    dense: float
    experts: float
    layer_dense: float
    """One layer's dense parameters on this GPU (what ZeRO-3 gathers at a time)."""


def stage_params(spec: ModelSpec, plan: Plan, stage: str) -> StageParams:
    """'first' holds the embeddings, 'last' the final norm and head (and, when tied and pp > 1,
    a copy of the word embedding, as Megatron keeps one on the last stage)."""
    p = count_params(spec)
    n = spec.n_layers
    norms_per_layer = (p.attention_norm + p.mlp_norm) / n  # replicated across TP
    split_per_layer = (p.attention_qkv + p.attention_proj + p.mlp + p.moe_shared_experts) / n
    router_per_layer = p.moe_router / n  # replicated
    layer_dense = norms_per_layer + router_per_layer + split_per_layer / plan.tp
    layers = n // plan.pp
    dense = layers * layer_dense
    experts = layers * (p.moe_experts / n) / (plan.ep * plan.tp)
    vocab_rows = spec.vocab_size * spec.d_model / plan.tp  # vocab-parallel embedding / head
    if stage == "first" or plan.pp == 1:
        dense += vocab_rows + p.embedding_position
    if stage == "last" or plan.pp == 1:
        dense += p.final_norm
        if not spec.tied_embeddings or plan.pp > 1:
            dense += vocab_rows
    return StageParams(dense=dense, experts=experts, layer_dense=layer_dense)


def in_flight_micro_batches(plan: Plan) -> float:
    """Micro-batches whose activations the first stage holds at its peak.

    GPipe keeps all m; 1F1B at most pp (Narayanan et al. 2021, Sec. 2.2.1); the interleaved
    schedule pp * (1 + (pp - 1) / (pp * vpp)) (Korthikanti et al. 2022, Sec. 4.2.3)."""
    m = plan.grad_accum
    if plan.schedule == "gpipe":
        return m
    if plan.schedule == "interleaved":
        return min(m, plan.pp) * (1 + (plan.pp - 1) / (plan.pp * plan.vpp))
    return min(m, plan.pp)


@dataclass(frozen=True, kw_only=True)
class PlanMemory:
    stage: str
    """The pipeline stage whose GPU needs the most: 'first' or 'last' ('only' when pp = 1)."""
    state: ModelState
    activations_bytes: float
    buffers_bytes: float
    """ZeRO-3 gathered layers, DDP gradient buckets."""
    host_bytes: float
    """Offloaded to CPU or NVMe (not on the GPU)."""

    @property
    def params_bytes(self) -> float:
        return self.state.params_bytes

    @property
    def grads_bytes(self) -> float:
        return self.state.grads_bytes

    @property
    def optimizer_bytes(self) -> float:
        return self.state.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        return self.state.total_bytes + self.activations_bytes + self.buffers_bytes


def _stage_activations(spec: ModelSpec, plan: Plan, seq_len: int, e: int, stage: str) -> float:
    layer = layer_activations(
        spec,
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        activation_bytes=e,
        flash_attention=plan.flash_attention,
        drop_attention_matrix=plan.recompute == "selective",
        tp=plan.tp,
        sp=plan.sp,
        cp=plan.cp,
    ).total_bytes
    layers = spec.n_layers // plan.pp
    tokens = seq_len * plan.micro_batch / plan.cp
    rep = plan.tp if plan.sp else 1
    if plan.recompute == "full":
        checkpoint = tokens * spec.d_model * e / rep
        per_micro_batch = layers * checkpoint
        working = layer - checkpoint  # the layer being recomputed, beyond its own checkpoint
    else:
        per_micro_batch = layers * layer
        working = 0.0
    in_flight = 1 if stage == "last" and plan.pp > 1 else in_flight_micro_batches(plan)
    acts = in_flight * per_micro_batch + working
    if stage == "last" or plan.pp == 1:
        # final norm and head inputs, vocab-parallel logits (activation dtype) plus fp32
        # log-probabilities and their gradient (Megatron's vocab-parallel cross-entropy)
        acts += 2 * tokens * spec.d_model * e / rep
        acts += tokens * spec.vocab_size / plan.tp * (e + 2 * FP32_BYTES)
    return acts


def plan_memory(
    spec: ModelSpec, plan: Plan, *, seq_len: int, precision: Precision, optimizer: Optimizer
) -> PlanMemory:
    """Peak bytes on the most loaded GPU of `plan` (first or last pipeline stage)."""
    best: PlanMemory | None = None
    for stage in ("only",) if plan.pp == 1 else ("first", "last"):
        sp_ = stage_params(spec, plan, stage)
        dense = zero_model_state(
            sp_.dense,
            shard=plan.shard_group,
            zero=plan.zero,
            precision=precision,
            optimizer=optimizer,
        )
        expert_shard = max(1, plan.shard_group // plan.ep)
        experts = zero_model_state(
            sp_.experts,
            shard=expert_shard,
            zero=plan.zero,
            precision=precision,
            optimizer=optimizer,
        )
        host = 0.0
        master = dense.master_bytes + experts.master_bytes
        opt_state = dense.optimizer_state_bytes + experts.optimizer_state_bytes
        params = dense.params_bytes + experts.params_bytes
        if plan.offload_optimizer != "none":
            host += master + opt_state
            master = opt_state = 0.0
        if plan.offload_params != "none":
            host += params
            params = 0.0
        state = ModelState(
            params_bytes=params,
            grads_bytes=dense.grads_bytes + experts.grads_bytes,
            master_bytes=master,
            optimizer_state_bytes=opt_state,
        )
        if plan.zero >= 3:
            # the layer in use and the one prefetched, gathered in full (TP-split) weights,
            # plus that layer's unsharded gradient before its reduce-scatter
            buffers = sp_.layer_dense * (2 * precision.weight_bytes + precision.grad_bytes)
        else:
            buffers = 2 * DDP_BUCKET_BYTES if plan.dp * plan.cp > 1 else 0.0
        mem = PlanMemory(
            stage=stage,
            state=state,
            activations_bytes=_stage_activations(
                spec,
                plan,
                seq_len,
                precision.activation_bytes,
                stage if stage != "only" else "first",
            ),
            buffers_bytes=buffers,
            host_bytes=host,
        )
        if best is None or mem.total_bytes > best.total_bytes:
            best = mem
    assert best is not None
    return best
