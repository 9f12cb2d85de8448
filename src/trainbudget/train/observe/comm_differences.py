"""What PyTorch's engines move beyond the core's step model, named (comm.json's `difference`
column, `comm_report`): the facts of a run they are computed from (`RunFacts`), the
adjustments (`Adjustment`) and their reasons.

The named differences, what PyTorch's engines do beyond the core's ZeRO model (each computed
from the plan and the model, never from the measurement):
- zero1 runs DDP + ZeroRedundancyOptimizer: the gradients are all-reduced whole, the bytes the
  core reduce-scatters (so on the wire 2(p-1)/p of them per rank where the core's step time
  counts (p-1)/p), and each rank broadcasts the parameters it updated, the bytes the core
  all-gathers;
- FSDP2 (zero2, fsdp, hsdp) pads each parameter's dim 0 to a multiple of the shard group's
  size: every one of its collectives moves the padded bytes;
- zero2 on FSDP2 reshards after every backward, gradient sync or not: each micro-batch's
  forward gathers the parameters again (grad_accum gathers where the core's ZeRO-2 has one);
- calls: DDP reduces in buckets, ZeroRedundancyOptimizer broadcasts parameter by parameter,
  FSDP2 communicates per fully_shard unit (each block, then the root): the same bytes in more
  calls than the core's one per buffer;
- the "trainer" row (the loss-and-flags all-reduce, the gradient norm of FSDP2's shards, the
  pipeline's norm over its stages) is not in the core's step;
- tp (DTensor, train.parallel.tensor_parallel): beyond the core's Megatron per-layer collectives,
per
  micro-batch the vocabulary-parallel embedding's forward and the head's backward (an
  all-reduce each; under SP the head's all-gather forward and reduce-scatter backward and the
  embedding's all-gather backward), loss parallel's 3 all-reduces of one fp32 per token, and
  under SP the norms' Partial gradients summed once a step (at every micro-batch's backward
  when no data-parallel wrapper replaces the hooked parameters); with pp > 1 rank 0 holds the
  first stage: the embedding's collectives only, no head, no loss; DDP reduces the row-parallel
  linears' biases whole where the core's per-rank share divides them by tp. Not in the core's
  step time: 2 activation-sized collectives per micro-batch beside its 4 per layer;
- pp (rank 0's rows): rank 0 holds the first stage, which sends no gradients back: one of the
  2 x stages-per-rank directions the core charges an inner stage; the tied embedding's gradient
  all-reduced between the first and last stage ("pp_tie", not in the core); under dp x pp,
  rank 0's dp row is its stage's gradients (the core's: the stage it charges the step with)
  plus DDP's used-parameter map (find_unused_parameters: one int32 per parameter);
- ep (the mean over the ranks, train.observe.comm_count): each MoE layer's forward first exchanges
the
  (n_experts,) int64 token counts; with a capacity factor the core charges buffers of the
  capacity and the trainer sends the kept assignments (named, not equal: routing decides how
  many are dropped); dropless, equal. The experts' gradients: the core's dp_grad_reduce on
  the dp / ep replica group, told apart from the dense weights' by its group size
  (`predicted_rows`), row "ep_replicas";
- cp (train.parallel.context): K and V all-gathered in each layer's forward and again in its
  backward, their gradients reduce-scattered, where the core's ring sends them cp - 1 hops
  three times: the same bytes on the wire, (cp - 1) / cp of each gathered buffer per rank,
  counted as the gathered buffer (the convention above); under full recomputation the forward's
  gather runs once more. The gradients are averaged over the dp x cp ranks, as the core's dp * cp
  group: the "dp_cp" rows ("dp_shard_cp" under hsdp), or with one rank there the "cp" rows
  (one group), beside the attention's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainbudget.core.parallel.timing.comm_time import CP_RING_PASSES
from trainbudget.train.spec.strategy import get_strategy

_AXES = {
    "tp": "tp",
    "cp": "cp",
    "pp": "pp",
    "ep": "ep",
    "dp_replica_all_reduce": "dp_replicate",
}
"""The core's collective category (comm_time) -> mesh axis; the data-parallel gradient and
parameter collectives run on the shard group (`mesh_axis`)."""


def mesh_axis(category: str, mesh: dict[str, int]) -> str:
    """The mesh axis of a core collective category on the run's mesh (axis -> size)."""
    if category in _AXES:
        return _AXES[category]
    axis = "dp_shard" if "dp_shard" in mesh else "dp"
    if mesh.get("cp", 1) == 1:
        return axis
    # cp folded in (train.parallel.context.gradient_mesh): "dp_cp", or with one data-parallel
    # rank the cp axis itself
    return "cp" if mesh.get(axis, 1) == 1 else f"{axis}_cp"


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the named differences are computed from: the run's layout and its model."""

    strategy: str
    mesh: dict[str, int]
    """Axis -> ranks along it (empty alone)."""
    grad_accum: int
    param_shapes: tuple[tuple[tuple[int, ...], int], ...]
    """(shape, bytes per element) of each distinct parameter of the model."""
    tokens_per_micro_batch: int = 0
    """micro_batch x seq_len / cp, this rank's tokens: loss parallel's statistics are one fp32
    number per token."""
    sequence_parallel: bool = False
    norm_grad_bytes: int = 0
    """SP: the norms' parameters (replicated, gradient Partial), summed over tp once a step."""
    row_bias_bytes: int = 0
    """tp > 1: the row-parallel linears' biases (attention out, MLP down), whole on each rank."""
    tied_grad_bytes: int = 0
    """pp > 1, tied embeddings: the embedding's gradient, summed over first and last stage."""
    stage_grad_bytes: int = 0
    """pp > 1: rank 0's stages' gradients (the first stage: the embedding and positions)."""
    n_stage_params: int = 0
    """pp > 1: rank 0's parameter tensors (DDP's used map: one int32 each)."""
    stages_per_rank: int = 1
    """pp > 1: the stages rank 0 holds (vpp under interleaved 1F1B)."""
    n_experts: int = 0
    capacity_factor: float = 0.0
    recompute: str = "none"
    """cp > 1: under "full" each layer's forward, its K and V gather with it, runs again."""
    moe_layers: int = 0
    """MoE under ep > 1: the layers whose tokens are dispatched (every one, count exchange)."""


@dataclass(frozen=True, kw_only=True)
class Adjustment:
    axis: str
    op: str
    n_bytes: float
    """Added to the prediction (negative: taken away)."""
    reason: str


def padded_ratio(param_shapes, shard: int) -> float:
    """Bytes FSDP2 moves per byte of parameters: each parameter's dim 0 padded up to a multiple
    of the `shard` ranks it is split over (a 0-d parameter counts as one row)."""
    plain = padded = 0
    for shape, element_bytes in param_shapes:
        rows = shape[0] if shape else 1
        rest = math.prod(shape[1:]) * element_bytes
        plain += rows * rest
        padded += -(-rows // shard) * shard * rest
    return padded / plain if plain else 1.0


ZERO1_ENGINE = (
    "ZeroRedundancyOptimizer: DDP all-reduces the whole gradient (the core reduce-scatters "
    "these bytes) and each rank broadcasts the parameters it updated (the core all-gathers them)"
)
PADDING = "padding: FSDP2 pads each parameter's dim 0 to a multiple of the {shard} shard ranks"
ZERO2_REGATHER = (
    "FSDP2 reshards after every backward, gradient sync or not: each of the {m} micro-batches' "
    "forwards gathers the parameters (the core's ZeRO-2 gathers once per step)"
)


TP_ENDS = (
    "the vocabulary-parallel embedding's forward and the head's backward: one activation-sized "
    "collective each per micro-batch beyond the core's per-layer ones"
)
TP_FIRST_STAGE = (
    "rank 0 holds the first stage: of the vocabulary-parallel ends only the embedding, whose "
    "forward all-reduces (under SP: and whose backward all-gathers) one activation-sized "
    "collective per micro-batch beyond the core's per-layer ones; the head and loss parallel "
    "are on the last stage"
)
LOSS_PARALLEL = "loss parallel: 3 all-reduces of one fp32 number per token, per micro-batch"
SP_NORMS = "sequence parallel: the norms' Partial gradients summed over tp once a step"
SP_NORMS_PER_PASS = (
    "sequence parallel without a data-parallel wrapper: the norms' Partial gradients summed "
    "over tp by their gradient hook at every micro-batch's backward (a wrapper's parameters, "
    "which replace the hooked ones, are summed once a step)"
)
TP_ROW_BIAS = (
    "tp: the row-parallel linears' biases are whole on every tp rank (Megatron's "
    "RowParallelLinear); the core's per-rank share divides them by tp"
)
PP_FIRST = (
    "rank 0 holds the first stage: it sends activations forward, no gradients back (the core "
    "charges inner stages, both ways)"
)
PP_STAGE = (
    "rank 0 holds the first stage, its gradients {b} bytes (the embedding, the positions); "
    "the core's dp bytes are those of the stage it charges the step with"
)
PP_USED_MAP = (
    "DDP per stage runs with find_unused_parameters: each step it all-reduces the stage's "
    "used-parameter map, one int32 per parameter"
)
PP_TIE = "tied embeddings: the first and last stage sum the embedding's gradient once a step"
EP_COUNTS = (
    "ep: each MoE layer's forward first exchanges the (n_experts,) int64 token counts per "
    "micro-batch"
)

CP_GATHER = (
    "cp: K and V all-gathered in each layer's forward and backward and their gradients "
    "reduce-scattered (train.parallel.context), where the core's ring sends them cp - 1 hops "
    "3 times: the same bytes on the wire, counted as the gathered buffer"
)
CP_RECOMPUTE = "cp: full recomputation gathers each layer's K and V once more, in backward"

EP_CAPACITY = (
    "capacity: the core charges buffers of capacity_factor ({cf:g}) x the even share, filled or "
    "not; the trainer sends the kept assignments only (routing-dependent; dropless, "
    "capacity_factor=0, they agree)"
)


def _tp_differences(predicted, facts: RunFacts) -> list[Adjustment]:
    """DTensor's collectives beyond the core's Megatron layer ones (embedding, head, loss) and
    DDP's whole row-parallel biases."""
    tp = facts.mesh.get("tp", 1)
    out = []
    dp = mesh_axis("dp_grad_reduce", facts.mesh)
    if tp > 1 and facts.strategy == "ddp" and (dp, "all_reduce") in predicted:
        extra = facts.row_bias_bytes * (1 - 1 / tp)
        out.append(Adjustment(axis=dp, op="all_reduce", n_bytes=extra, reason=TP_ROW_BIAS))
    per_call = [b / c for (axis, _), (b, c) in predicted.items() if axis == "tp" and c]
    if tp < 2 or not per_call:
        return [a for a in out if a.n_bytes]
    a, m = per_call[0], facts.grad_accum
    first_stage = facts.mesh.get("pp", 1) > 1  # rank 0's rows: the embedding, no head, no loss
    # the embedding: all-reduce forward (SP: and all-gather backward); the head: all-reduce
    # backward (SP: all-gather forward, reduce-scatter backward)
    ends = {"all_reduce": m * a} if first_stage else {"all_reduce": 2 * m * a}
    if facts.sequence_parallel:
        ends = {"all_reduce": m * a, "all_gather": m * a}
        if not first_stage:
            ends = {"all_reduce": m * a, "all_gather": 2 * m * a, "reduce_scatter": m * a}
    reason = TP_FIRST_STAGE if first_stage else TP_ENDS
    out += [Adjustment(axis="tp", op=op, n_bytes=b, reason=reason) for op, b in ends.items()]
    if not first_stage:
        loss = 3 * m * facts.tokens_per_micro_batch * 4
        out.append(Adjustment(axis="tp", op="all_reduce", n_bytes=loss, reason=LOSS_PARALLEL))
    if facts.sequence_parallel:
        wrapped = any(size > 1 for axis, size in facts.mesh.items() if axis not in ("pp", "tp"))
        norms, why = (1, SP_NORMS) if wrapped else (m, SP_NORMS_PER_PASS)
        norms *= facts.norm_grad_bytes
        out.append(Adjustment(axis="tp", op="all_reduce", n_bytes=norms, reason=why))
    return [a for a in out if a.n_bytes]


def _pp_ep_differences(predicted, facts: RunFacts) -> list[Adjustment]:
    """Pipeline: the first stage's one-way sends and the tied gradient; experts: the counts."""
    out = []
    sends = predicted.get(("pp", "send_recv"))
    if sends:  # of the 2 x stages_per_rank directions the core charges, one is not sent
        first = -sends[0] / (2 * facts.stages_per_rank)
        out.append(Adjustment(axis="pp", op="send_recv", n_bytes=first, reason=PP_FIRST))
    dp = mesh_axis("dp_grad_reduce", facts.mesh)  # "dp", or with cp "dp_cp" / "cp"
    grads = predicted.get((dp, "all_reduce"))
    if grads and facts.stage_grad_bytes and facts.strategy == "ddp":
        stage, why = facts.stage_grad_bytes - grads[0], PP_STAGE.format(b=facts.stage_grad_bytes)
        out.append(Adjustment(axis=dp, op="all_reduce", n_bytes=stage, reason=why))
        used = facts.n_stage_params * 4
        out.append(Adjustment(axis=dp, op="all_reduce", n_bytes=used, reason=PP_USED_MAP))
    if facts.tied_grad_bytes:
        tie = facts.tied_grad_bytes
        out.append(Adjustment(axis="pp_tie", op="all_reduce", n_bytes=tie, reason=PP_TIE))
    if facts.n_experts and ("ep", "all_to_all") in predicted:
        counts = facts.grad_accum * facts.moe_layers * facts.n_experts * 8
        out.append(Adjustment(axis="ep", op="all_to_all", n_bytes=counts, reason=EP_COUNTS))
        if facts.capacity_factor:
            why = EP_CAPACITY.format(cf=facts.capacity_factor)
            out.append(Adjustment(axis="ep", op="all_to_all", n_bytes=0.0, reason=why))
    return out


def _cp_differences(predicted, facts: RunFacts) -> list[Adjustment]:
    """The all-gather attention's collectives in place of the core's ring (CP_GATHER)."""
    cp = facts.mesh.get("cp", 1)
    ring = predicted.get(("cp", "send_recv"))
    if cp < 2 or not ring or not ring[1]:
        return []
    n_bytes, hops = ring
    gathered = cp * n_bytes / hops  # one layer's K and V of one micro-batch, every rank's
    passes = hops / (CP_RING_PASSES * (cp - 1))  # layers x micro-batches
    out = [
        Adjustment(axis="cp", op="send_recv", n_bytes=-n_bytes, reason=CP_GATHER),
        Adjustment(axis="cp", op="all_gather", n_bytes=2 * passes * gathered, reason=CP_GATHER),
        Adjustment(axis="cp", op="reduce_scatter", n_bytes=passes * gathered, reason=CP_GATHER),
    ]
    if facts.recompute == "full":
        out.append(
            Adjustment(axis="cp", op="all_gather", n_bytes=passes * gathered, reason=CP_RECOMPUTE)
        )
    return out


def differences(
    predicted: dict[tuple[str, str], tuple[float, float]], facts: RunFacts
) -> list[Adjustment]:
    """The named differences of the run's engine (the module docstring), in bytes."""
    out: list[Adjustment] = [*_tp_differences(predicted, facts)]
    out += _pp_ep_differences(predicted, facts) + _cp_differences(predicted, facts)
    if facts.strategy == "zero1":
        for (axis, op), (n_bytes, _) in predicted.items():
            to = {"reduce_scatter": "all_reduce", "all_gather": "broadcast"}.get(op)
            if to is not None:
                out.append(Adjustment(axis=axis, op=op, n_bytes=-n_bytes, reason=ZERO1_ENGINE))
                out.append(Adjustment(axis=axis, op=to, n_bytes=n_bytes, reason=ZERO1_ENGINE))
    if not facts.mesh or not get_strategy(facts.strategy).fsdp2:
        return out
    regather = facts.strategy == "zero2" and facts.grad_accum > 1
    shard = facts.mesh.get("dp_shard", facts.mesh.get("dp", 1)) * facts.mesh.get("cp", 1)
    ratio = padded_ratio(facts.param_shapes, shard)
    for (axis, op), (n_bytes, _) in predicted.items():
        if op == "send_recv":  # activations (pp, cp's ring), not the engine's parameters
            continue
        times = facts.grad_accum if regather and op == "all_gather" else 1
        if times > 1:
            reason = ZERO2_REGATHER.format(m=facts.grad_accum)
            out.append(Adjustment(axis=axis, op=op, n_bytes=n_bytes * (times - 1), reason=reason))
        if ratio != 1.0:
            reason = PADDING.format(shard=shard)
            out.append(
                Adjustment(axis=axis, op=op, n_bytes=n_bytes * times * (ratio - 1), reason=reason)
            )
    return out
