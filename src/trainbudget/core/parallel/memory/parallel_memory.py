"""The model state of one GPU under a parallel plan -- its stage's parameters, sharded by TP, PP,
EP and ZeRO -- and the micro-batches a pipeline stage keeps in flight: the terms the per-GPU
phase model (`gpu_peak`) builds on.

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
    GPIPE,
    INTERLEAVED,
    PlanNumbers,
    as_numbers,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


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
    spec: ModelSpec,
    plan: Plan | PlanNumbers,
    stage: str,
    xp: Ops = SCALAR,
    split_embedding: bool = True,
) -> StageParams:
    """`rank_params` of a named stage: 'first' holds the embeddings, 'last' the final norm and
    head, 'middle' neither; with pp = 1 the one stage ('only', or any name) holds both.
    `split_embedding`: as `rank_params` (Framework.tp_splits_embedding)."""
    if stage not in STAGES:
        raise unknown_key("stage", stage, STAGES)
    L = as_numbers(plan)
    layers = spec.n_layers if stage == "only" else L.stage_layers(spec.n_layers, stage)
    one = L.pp == 1
    first = (stage in ("first", "only")) | one
    last = (stage in ("last", "only")) | one
    return rank_params(
        spec, L, layers=layers, first=first, last=last, xp=xp, split_embedding=split_embedding
    )


def rank_params(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    layers: Any,
    first: Any,
    last: Any,
    xp: Ops = SCALAR,
    split_embedding: bool = True,
) -> StageParams:
    """Parameters one GPU of a pipeline stage of `layers` layers holds before ZeRO: the first
    stage the embeddings, the last the final norm and head (and, when tied and pp > 1, a copy
    of the word embedding, as Megatron keeps one on the last stage); matrices split by TP
    (vocabulary-parallel embedding and head), experts by EP and TP, norms and routers whole.
    `split_embedding` False: the token embedding replicated on every TP rank
    (`Framework.tp_splits_embedding`)."""
    p = count_params(spec)
    n = spec.n_layers
    norms_per_layer = (p.attention_norm + p.mlp_norm) / n  # replicated across TP
    split_per_layer = (p.attention_qkv + p.attention_proj + p.mlp + p.moe_shared_experts) / n
    router_per_layer = p.moe_router / n  # replicated
    layer_dense = norms_per_layer + router_per_layer + split_per_layer / L.tp
    dense = layers * layer_dense
    experts = layers * (p.moe_experts / n) / (L.ep * L.tp)
    vocab_rows = spec.vocab_size * spec.d_model / L.tp  # vocab-parallel embedding / head
    embedding_rows = vocab_rows if split_embedding else spec.vocab_size * spec.d_model
    dense = dense + xp.where(first, embedding_rows + p.embedding_position, 0)
    dense = dense + xp.where(last, p.final_norm, 0)
    untied_or_split = (not spec.tied_embeddings) | (L.pp > 1)
    dense = dense + xp.where(last & untied_or_split, vocab_rows, 0)
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


def fp8_recipe_weights_per_layer(spec: ModelSpec, L: PlanNumbers) -> Any:
    """Elements of one layer's FP8-recipe linear weights on a GPU (the projections, the MLP,
    the shared and the routed experts, split by TP and EP; not the embeddings, the head or the
    norms): what Transformer Engine caches in FP8 and what an FP8 parameter gather moves at one
    byte, averaged over the layers (MoE and dense layers mixed)."""
    p = count_params(spec)
    split = (p.attention_qkv + p.attention_proj + p.mlp + p.moe_shared_experts) / L.tp
    experts = p.moe_experts / (L.ep * L.tp)
    return (split + experts) / spec.n_layers
