"""Communication of one training step, by parallel axis, and how much of it hides behind
compute (Megatron-LM's and FSDP's schedules; see `step_time` for the overlap rules). Each
collective is written once, for one plan or the planner's arrays (`xp`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import FULL, SELECTIVE_OP, PlanNumbers
from trainbudget.core.parallel.memory.parallel_memory import StageParams
from trainbudget.core.parallel.plan import members_per_node
from trainbudget.core.parallel.timing.comm import CollectiveTotal, collective_total
from trainbudget.core.parallel.timing.compute_time import MicroBatchCompute
from trainbudget.core.parallel.timing.dp_time import (
    data_parallel_seconds,
    gather_copy_out_seconds,
    overlap_cost,
)
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY
from trainbudget.core.parallel.timing.layer_traffic import stage_mix
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.loss_kernels import get_loss_kernel
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Precision

TP_COLLECTIVES_PER_LAYER = 4
"""Megatron's f and g operators: 2 all-reduces forward (after attention and MLP), 2 backward
(Shoeybi et al. 2019, Fig. 3); SP turns each into an all-gather + reduce-scatter pair of the
same bytes (Korthikanti et al. 2022, Sec. 4.2.2)."""
TP_COLLECTIVES_RECOMPUTED = 2
"""Full recomputation repeats the forward pass, and its 2 collectives. Selective-op repeats
them too (torchtitan saves no all-reduce or all-gather output), except SP's reduce-scatters,
whose outputs it saves (core/single/op_checkpoint.py)."""
CP_RING_PASSES = 3
"""Ring attention passes K and V around the ring once forward, and K, V and their gradients
twice backward (Liu et al. 2023, arXiv 2310.01889)."""
EP_ALL_TO_ALLS_PER_LAYER = 4
"""Token dispatch and combine, forward and backward, per MoE layer (GShard / Megatron-Core)."""
EP_ALL_TO_ALLS_RECOMPUTED = 2
"""Full recomputation repeats a layer's forward, its dispatch and combine with it (measured in
the trainer: 6 all-to-alls per MoE layer and micro-batch,
tests/train/parallel/test_expert_parallel.py)."""


@dataclass(frozen=True, kw_only=True)
class Communication:
    """Exposed seconds per axis and every collective of the step (numbers or arrays)."""

    tp_seconds: Any
    pp_seconds: Any
    cp_seconds: Any
    ep_seconds: Any
    dp_seconds: Any
    collectives: tuple[tuple[str, CollectiveTotal], ...]
    """(category, total) in call order; a category may repeat (an SP all-gather and its
    reduce-scatter are both "tp"). "dp_param_gather" is ZeRO-3's per-micro-batch gathers too
    (`step_time` names them "zero3_gather")."""


def _spans(L: PlanNumbers, g: int, xp: Ops) -> dict[str, Any]:
    """Members per node of each group under the tp-cp-dp-pp rank order (`plan.group_span`);
    an HSDP shard group is the innermost shard_dp of the dp ranks, its replicas the rest."""
    tp, cp, dp, shard = L.tp, L.cp, L.dp, L.shard_dp
    cp_pn = members_per_node(cp, tp, g, xp)
    dp_pn = members_per_node(dp, tp * cp, g, xp)
    shard_pn = members_per_node(shard, tp * cp, g, xp)
    return {
        "tp": members_per_node(tp, 1, g, xp),
        "cp": cp_pn,
        "dp": dp_pn,
        "pp": members_per_node(L.pp, tp * cp * dp, g, xp),
        "dp_cp": xp.maximum(1, xp.minimum(dp * cp, dp_pn * cp_pn)),
        "shard_cp": xp.maximum(1, xp.minimum(shard * cp, shard_pn * cp_pn)),
        "replica": members_per_node(dp // shard, tp * cp * shard, g, xp),
    }


def communication(
    spec: ModelSpec,
    L: PlanNumbers,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    micro_batch: MicroBatchCompute,
    compute_seconds: Any,
    stage: StageParams,
    framework: Framework = GENERIC,
    memory_bytes_per_second: Any = None,
    xp: Ops = SCALAR,
) -> Communication:
    """Every collective of one step of `L` and the part each axis leaves exposed. `stage`: the
    parameters of the stage whose gradients are reduced (the last one).
    `memory_bytes_per_second`: the HBM rate memory-bound kernels achieve (what times FSDP2's
    copy-out); None: the hardware row's at the default efficiency."""
    if memory_bytes_per_second is None:
        memory_bytes_per_second = cluster.hardware.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    out: list[tuple[str, CollectiveTotal]] = []

    def run(name: str, kind: str, n_bytes: Any, size: Any, per_node: Any, count: Any) -> Any:
        total = collective_total(
            kind, n_bytes, size, per_node, cluster, count, xp, with_bytes=not xp.is_array
        )
        out.append((name, total))
        return total.seconds

    span = _spans(L, cluster.gpus_per_node, xp)
    # per-layer collectives on the critical path: those of the largest (slowest) stage
    e, m, layers = precision.activation_bytes, L.grad_accum, L.stage_layers(spec.n_layers, "max")
    tokens = L.micro_batch * seq_len / L.cp
    act_msg = tokens * spec.d_model * e  # one layer's activations for one micro-batch
    t_tp = _tensor_parallel(L, span, act_msg, layers, framework, micro_batch, run, xp)
    t_tp = t_tp + _gathered_logits(spec, L, span, tokens * e, framework, run)
    t_pp = _pipeline(L, span, act_msg, framework, run, xp)
    # CP: K and V around the ring (cp - 1 hops per pass), overlapped with the attention, at
    # their own widths (a KV head shared by several TP ranks is sent whole). MLA exchanges
    # the up-projected per-head K (d_head wide) and V (d_v_head), not its latent: Megatron-Core
    # hands the expanded q, k, v to Transformer Engine's attention, whose context-parallel
    # ring (AttnFuncWithCPAndKVP2P) passes the k and v chunks it is given
    k_width = xp.maximum(spec.d_kv / L.tp, spec.d_head)
    kv = tokens * (k_width + xp.maximum(spec.d_v / L.tp, spec.d_v_head)) * e
    passes = m * layers * CP_RING_PASSES
    hop = run("cp", "send_recv", kv, L.cp, span["cp"], passes * (L.cp - 1))
    # each hop runs beside one ring step's attention (1/cp of the layer's): cp - 1 of them,
    # the last step's compute has no transfer beside it
    hidden_by = passes * micro_batch.attention_seconds * (L.cp - 1) / L.cp
    t_cp = xp.maximum(0.0, hop - hidden_by)
    t_cp = t_cp + overlap_cost(hop - t_cp)  # the hidden part slows the attention beside it
    t_ep = 0.0
    if spec.is_moe:  # EP: dispatch and combine all-to-alls inside the dp * cp group, on the
        # stage's MoE layers only (the dense ones come first); with a capacity factor the
        # buffers of the capacity are sent, filled or not
        a2a = tokens * spec.routed_slots_per_token * spec.d_model * e
        ep_pn = xp.minimum(L.ep, span["dp"])
        moe_layers = stage_mix(spec, L, xp).moe
        # ceil(moe / K) of every K-th layer recomputed: exact for K = 1
        first = framework.recompute_every_from_first
        redone = xp.where(L.recompute == FULL, L.recomputed_layers(moe_layers, first), 0)
        n_a2a = m * (moe_layers * EP_ALL_TO_ALLS_PER_LAYER + redone * EP_ALL_TO_ALLS_RECOMPUTED)
        t_ep = run("ep", "all_to_all", a2a, L.ep, ep_pn, n_a2a)
    t_dp = data_parallel_seconds(
        spec, L, span, precision, framework, micro_batch, compute_seconds, stage, run, xp
    )
    t_dp = t_dp + gather_copy_out_seconds(
        L, precision, framework, stage, memory_bytes_per_second, xp
    )
    return Communication(
        tp_seconds=t_tp,
        pp_seconds=t_pp,
        cp_seconds=t_cp,
        ep_seconds=t_ep,
        dp_seconds=t_dp,
        collectives=tuple(out),
    )


def _tensor_parallel(L, span, act_msg, layers, framework, micro_batch, run, xp: Ops):
    """TP: the all-reduces, or SP's all-gather + reduce-scatter pairs, of the largest stage's
    layers and what recomputation repeats; exposed, or pipelined with their GEMMs where the
    framework overlaps them (`Framework.tp_comm_overlap`)."""
    m = L.grad_accum
    by_op = xp.where(L.recompute == SELECTIVE_OP, layers, 0)
    first = framework.recompute_every_from_first
    recomputed = xp.where(L.recompute == FULL, L.recomputed_layers(layers, first), by_op)
    n_tp = m * (layers * TP_COLLECTIVES_PER_LAYER + recomputed * TP_COLLECTIVES_RECOMPUTED)
    sp_count, ar_count = xp.where(L.sp, n_tp, 0), xp.where(L.sp, 0, n_tp)
    rs_count = sp_count - xp.where(L.sp, m * by_op * TP_COLLECTIVES_RECOMPUTED, 0)
    t_tp = run("tp", "all_gather", act_msg, L.tp, span["tp"], sp_count)
    t_tp = t_tp + run("tp", "reduce_scatter", act_msg, L.tp, span["tp"], rs_count)
    t_tp = t_tp + run("tp", "all_reduce", act_msg, L.tp, span["tp"], ar_count)
    if not framework.tp_comm_overlap:
        return t_tp
    # the GEMMs beside the collectives, forward, backward (2 x) and recomputed
    gemms = m * (layers * 3 + recomputed) * micro_batch.linear_seconds
    return tp_exposed_when_pipelined(t_tp, gemms, L.tp, xp)


def _gathered_logits(spec, L, span, token_bytes, framework: Framework, run) -> Any:
    """The head's vocabulary-split logits gathered whole to every TP rank before the loss,
    where the framework's loss kernel runs on them (`LossKernel.whole_vocabulary`):
    KempnerForge's TP plan (kempnerforge/distributed/tensor_parallel.py, read at 0c4eba1)
    parallelizes the head as ColwiseParallel(input_layouts=Shard(1), output_layouts=
    Replicate()), and DTensor (torch 2.13, placement_types.Shard._to_replicate_tensor)
    all-gathers the tokens x V x e output once per micro-batch forward. Its backward sends
    nothing: Replicate -> Shard is a local slice (`Shard._replicate_to_shard`; the copies are
    timed with the loss, `loss_time.gathered_logits_copy_seconds`). Exposed: it sits between
    the head's GEMM and the loss."""
    whole = get_loss_kernel(framework.loss_kernel).whole_vocabulary
    count = L.grad_accum if whole else 0  # the head runs once per micro-batch (last stage)
    return run("tp", "all_gather", token_bytes * spec.vocab_size, L.tp, span["tp"], count)


def _pipeline(L: PlanNumbers, span: dict, act_msg: Any, framework: Framework, run, xp: Ops):
    """PP: each micro-batch crosses each stage boundary forward and back (vpp times when
    interleaved); with SP the message is split across the TP group, and without SP where the
    framework scatters it (1/tp a rank) and the receiving TP group all-gathers the pieces."""
    crossings = 2 * L.grad_accum * L.vpp
    scatter = (L.tp > 1) & xp.not_(L.sp) & framework.pipeline_scatter_gather
    p2p = act_msg / xp.where(L.sp | scatter, L.tp, 1)
    t_pp = run("pp", "send_recv", p2p, L.pp, span["pp"], crossings)
    regather = xp.where(scatter & (L.pp > 1), crossings, 0)
    t_pp = t_pp + run("pp", "all_gather", act_msg, L.tp, span["tp"], regather)
    if not framework.overlaps_p2p_interleaved:
        return t_pp
    exposed = t_pp * p2p_exposed_share(L.pp, L.vpp, L.grad_accum, xp)
    return exposed + overlap_cost(t_pp - exposed)  # the hidden sends slow the compute beside


def p2p_exposed_share(pp: Any, vpp: Any, micro_batches: Any, xp: Ops = SCALAR) -> Any:
    """Share of the pipeline's sends that stay exposed when the interleaved schedule overlaps
    them (`Framework.overlaps_p2p_interleaved`): those of the warm-up forwards and the
    cool-down backwards, the rest run beside the 1F1B steady state's compute. The first stage
    (the longest warm-up) sets it: Megatron-Core's interleaved schedule warms up
    2 (pp - 1) + (vpp - 1) pp of its vpp x m chunk passes (megatron/core/pipeline_parallel/
    schedules.py, get_pp_rank_microbatches: (pp - rank - 1) x 2 + (num_model_chunks - 1) x
    microbatch_group_size_per_vp_stage, the group size pp by default), all of them when
    m == pp. Without interleaving (vpp 1) every send is exposed, as Megatron turns the
    overlap off there."""
    warmup = 2 * (pp - 1) + (vpp - 1) * pp
    share = xp.minimum(1.0, warmup / (vpp * micro_batches))
    return xp.where((vpp > 1) & (micro_batches != pp), share, 1.0)


def tp_exposed_when_pipelined(t_tp: Any, gemm_seconds: Any, tp: Any, xp: Ops) -> Any:
    """Exposed seconds of TP collectives pipelined with the GEMMs that consume or produce them
    (Transformer Engine's userbuffers under Megatron's --tp-comm-overlap; torch's async TP):
    each all-gather + GEMM (GEMM + reduce-scatter) is split into tp chunks, the chunk's
    exchange running beside the previous chunk's GEMM (Wang et al. 2023, 'Overlap
    Communication with Dependent Computation via Decomposition in Large Deep Learning
    Models', ASPLOS, Sec. 4), so one chunk in tp of each collective stays exposed, the rest
    hides while the GEMMs last and pays `overlap_cost`."""
    first = t_tp / tp
    rest = t_tp - first
    late = xp.maximum(0.0, rest - gemm_seconds)
    return first + late + overlap_cost(rest - late)
