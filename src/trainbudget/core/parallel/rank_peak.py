"""The peak of one training step on one rank of a data-parallel plan, phase by phase: the
single-device phase model (`core.single.peak_memory.training_peak`, held to torch's MemTracker
by the profile tests) with the model state sharded by the plan's ZeRO stage
(`parallel_memory.zero_model_state`) and the buffers of the engine that runs it, each a named
term of an `Engine` row with its source.

A data-parallel rank runs the whole model on its own micro-batch, so the activations and the
loss's temporaries are the single device's at that micro-batch; only the model state and the
engine's buffers differ. A tensor-parallel rank runs its shard of the model (`tensor_shard`) as
a model of its own, with loss parallel's extra temporary and, under sequence parallelism, the
layers' replicated activations split (`sequence_split_bytes`). An expert-parallel rank holds
n_experts / ep of each layer's routed experts (`expert_parallel_params`), at balanced routing
the single device's activations, and `expert_rows_bytes` more (or fewer) for the rows its
experts received beyond (short of) their balanced share. Plans that split the model otherwise
(pipeline or context parallelism) are not covered (`covers`): their per-GPU figure is
`stage_peak`'s or `parallel_memory`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from trainbudget.core.errors import unknown_key
from trainbudget.core.parallel.parallel_memory import zero_model_state
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.activations import (
    FP32_BYTES,
    activation_memory,
    expert_row_bytes,
    kept_slots_per_token,
    layer_activations,
)
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.single.peak_memory import PeakMemory, PhaseMemory, training_peak
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Precision, get_precision, get_trainable_optimizer


@dataclass(frozen=True, kw_only=True)
class Engine:
    """What a data-parallel engine holds beside the sharded model state."""

    name: str
    gradient_buckets: bool
    """A flat copy of every (unsharded) gradient in the all-reduce buckets, allocated once and
    kept for the whole run."""
    shards_parameters: bool
    """Parameters sharded at rest whatever the ZeRO stage the engine stands in for (FSDP2
    running ZeRO-2 keeps its shard beside the gathered copy: train.strategy)."""
    whole_tensor_shards: bool
    """The optimizer state is sharded by whole parameters, dealt largest first to the rank
    that owns the fewest elements so far (`whole_tensor_shares`), not cut evenly."""
    gathered_until_backward: bool
    """Every parameter gathered (unsharded) from the start of forward to the end of backward:
    at backward start a rank holds the whole model's weights beside its shard."""
    unit_backward: bool
    """FSDP2's units (each block, and the root: embeddings, final norm, head) in backward: the
    last block's backward holds its unsharded gradients before their reduce-scatter -- and,
    resharded after forward, its parameters gathered again and the next block's prefetched --
    while the root's gradients stay unsharded until the root's own post-backward at the end;
    at backward end the root is gathered with its unsharded gradients (`_unit_phases`)."""
    source: str


DDP_SOURCE = (
    "torch.nn.parallel.DistributedDataParallel with gradient_as_bucket_view=False (the "
    "default): the Reducer's buckets hold a copy of the gradients for the whole run; torch's "
    "documentation of that argument: as views 'the saved memory size will be equal to the "
    "total gradients size'"
)

ENGINES = MappingProxyType(
    {
        e.name: e
        for e in (
            Engine(
                name="single",
                whole_tensor_shards=False,
                shards_parameters=False,
                gradient_buckets=False,
                gathered_until_backward=False,
                unit_backward=False,
                source="one process, no wrapper",
            ),
            Engine(
                name="ddp",
                shards_parameters=False,
                gradient_buckets=True,
                whole_tensor_shards=False,
                gathered_until_backward=False,
                unit_backward=False,
                source=DDP_SOURCE,
            ),
            Engine(
                name="ddp+zero-redundancy",
                shards_parameters=False,
                gradient_buckets=True,
                whole_tensor_shards=True,
                gathered_until_backward=False,
                unit_backward=False,
                source=f"{DDP_SOURCE}; torch.distributed.optim.ZeroRedundancyOptimizer "
                "(torch 2.13 _partition_parameters): parameters sorted by size, largest first, "
                "each to the rank with the fewest elements so far; the updated parameters "
                "broadcast in place",
            ),
            Engine(
                name="fsdp2",
                whole_tensor_shards=False,
                shards_parameters=True,
                gradient_buckets=False,
                gathered_until_backward=False,
                unit_backward=True,
                source="torch FSDP2 fully_shard on every block and on the root, "
                "reshard_after_forward=True: each unit's parameters gathered for its forward "
                "and again for its backward, freed after each; its gradients reduce-scattered "
                "at its post-backward (torch 2.13 fsdp/_fully_shard/_fsdp_param_group.py)",
            ),
            Engine(
                name="fsdp2-no-reshard",
                whole_tensor_shards=False,
                shards_parameters=True,
                gradient_buckets=False,
                gathered_until_backward=True,
                unit_backward=True,
                source="torch FSDP2 fully_shard(reshard_after_forward=False): parameters "
                "gathered in forward stay gathered until each unit's post-backward reshards "
                "them (torch 2.13 fsdp/_fully_shard/_fsdp_param_group.py: post_backward)",
            ),
        )
    }
)


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise unknown_key("engine", name, list(ENGINES))
    return ENGINES[name]


def covers(plan: Plan) -> bool:
    """Whether `rank_peak` models `plan`: data parallelism (and ZeRO), with tensor (and
    sequence) parallelism or with expert parallelism (not both)."""
    return (plan.pp, plan.cp) == (1, 1) and (plan.ep == 1 or plan.tp == 1)


def tensor_shard(spec: ModelSpec, tp: int) -> ModelSpec:
    """What one of `tp` tensor-parallel ranks holds and computes, as a model of its own
    (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3): n_heads/tp whole heads (and
    n_kv_heads/tp kv groups) at the same head width, d_ff/tp hidden units, V/tp vocabulary rows
    of the embedding and of the head (logits kept split: loss parallel); the norms, the learned
    positions and the row-parallel layers' biases whole (replicated). Its weights, gradients,
    optimizer state and activations are the rank's (without sequence parallelism, the layer
    inputs the norms and the residual stream keep are whole on every rank: Korthikanti et al.
    2022, arXiv:2205.05198, Sec. 4.2.1, the 10sbh term left unsplit)."""
    if tp == 1:
        return spec
    return spec.replace(
        n_heads=spec.n_heads // tp,
        n_kv_heads=(spec.n_kv_heads or spec.n_heads) // tp,
        head_dim=spec.d_head,
        d_ff=spec.d_ff // tp,
        vocab_size=spec.vocab_size // tp,
    )


def pipeline_stage(index: int, pp: int) -> str:
    """The `parallel_memory.stage_memories` key of pipeline stage `index` of `pp`: 'only',
    'first', 'last', or 'middle' (whose figure is the most any middle stage holds)."""
    if pp == 1:
        return "only"
    return "first" if index == 0 else "last" if index == pp - 1 else "middle"


def whole_tensor_shares(spec: ModelSpec, n_ranks: int) -> list[float]:
    """Parameters each of `n_ranks` ranks owns when whole tensors are dealt out largest first,
    each to the rank owning the fewest elements so far (`Engine.whole_tensor_shards`). The
    weight matrices are dealt one by one (`params.matrix_shapes`); the vectors (norms,
    biases), which the core counts in total only, then fill the least-loaded ranks evenly, as
    dealing many small tensors does (off by less than the largest vector)."""
    matrices = sorted(
        (rows * cols for _, rows, cols, count in matrix_shapes(spec) for _ in range(count)),
        reverse=True,
    )
    loads = [0.0] * n_ranks
    for size in matrices:
        loads[loads.index(min(loads))] += size
    rest = count_params(spec).total - sum(loads)
    # raise the lowest loads to one level until the vectors' elements are spent
    order = sorted(range(n_ranks), key=lambda i: loads[i])
    for k in range(1, n_ranks + 1):
        level = (rest + sum(loads[i] for i in order[:k])) / k
        if k == n_ranks or level <= loads[order[k]]:
            break
    return [max(load, level) if i in order[:k] else load for i, load in enumerate(loads)]


def rank_peak(
    spec: ModelSpec,
    plan: Plan,
    *,
    engine: str,
    precision: str,
    optimizer: str,
    seq_len: int,
    fused_update: bool = False,
    rank: int = 0,
) -> PeakMemory:
    """The phases of one step on one rank of `plan` (`covers(plan)`) under `engine`, the
    largest being the peak; with gradient accumulation, those of the step's last micro-batch.
    `fused_update`: the optimizer runs torch's fused kernel (no per-tensor scratch at the
    update). `rank`: the rank's place in its shard group (what whole-tensor shards depend
    on). Under tensor parallelism the rank runs its shard of the model (`tensor_shard`), and
    loss parallel's backward holds one more fp32 V/tp tensor than the single device's loss
    (`LOSS_PARALLEL_TEMPORARIES`)."""
    eng = get_engine(engine)
    whole, spec = spec, tensor_shard(spec, plan.tp)
    prec, opt = get_precision(precision), get_trainable_optimizer(optimizer)
    n = count_params(spec).total
    shard = plan.zero_shard or plan.dp
    zero = max(plan.zero, 3) if eng.shards_parameters else plan.zero
    kw = dict(shard=shard, precision=prec, optimizer=opt)
    # expert parallelism: the rank holds n_experts / ep of each layer's routed experts, which
    # FSDP2 shards over their dp / ep replicas (the same share of the rank's elements as the
    # rest over dp) and DDP leaves out of its buckets (`expert_parallel_params`)
    local, bucketed = expert_parallel_params(spec, plan.ep)
    n = n if eng.shards_parameters else local
    state = zero_model_state(n, zero=plan.zero, **kw)
    params = zero_model_state(n, zero=zero, **kw).params_bytes
    optimizer_bytes = state.optimizer_bytes
    if eng.whole_tensor_shards and plan.zero >= 1:
        owned = whole_tensor_shares(spec, shard)[rank % shard]
        optimizer_bytes = state.optimizer_bytes * owned / (n / shard)
    single = training_peak(
        spec,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        recompute=plan.recompute,
        fused_update=fused_update,
    )
    full_grads = local * prec.grad_bytes
    phases = _engine_phases(
        spec, eng, single, prec, seq_len=seq_len, micro_batch=plan.micro_batch, ep=plan.ep
    )
    buckets = bucketed * prec.grad_bytes if eng.gradient_buckets else 0.0
    gathered = local * prec.weight_bytes if eng.gathered_until_backward else 0.0
    # accumulation: the last micro-batch's backward starts beside the earlier ones' gradients,
    # unsynchronised and unsharded (DDP's no_sync, FSDP2 without gradient sync)
    accumulated = full_grads if plan.grad_accum > 1 else 0.0
    # the rank's share of the logits is tokens x V/tp (`tensor_shard`)
    tokens = seq_len * plan.micro_batch
    loss_parallel = LOSS_PARALLEL_TEMPORARIES * tokens * spec.vocab_size * FP32_BYTES
    loss_parallel = loss_parallel if plan.tp > 1 else 0.0
    split = sequence_split_bytes(
        whole, plan, seq_len=seq_len, activation_bytes=prec.activation_bytes
    )
    return PeakMemory(
        phases=tuple(
            replace(
                phase,
                params_bytes=params,
                # the phase's gradients (none, some or all), sharded as the plan shards them
                grads_bytes=phase.grads_bytes * state.grads_bytes / full_grads
                + (accumulated if phase.phase in UNTIL_BACKWARD else 0.0),
                optimizer_bytes=optimizer_bytes,
                activations_bytes=phase.activations_bytes
                - (split if phase.phase in SEQUENCE_SPLIT else 0.0),
                temporaries_bytes=phase.temporaries_bytes
                + (loss_parallel if phase.phase == "backward start" else 0.0),
                buffers_bytes=phase.buffers_bytes
                + buckets
                + (gathered if phase.phase in UNTIL_BACKWARD else 0.0),
            )
            for phase in phases
        )
    )


def expert_parallel_params(spec: ModelSpec, ep: int) -> tuple[float, float]:
    """(parameters one rank of `ep` expert-parallel ranks holds -- everything but the routed
    experts, and n_experts / ep of those --, of them the ones DDP's buckets hold: all but the
    experts, which train.expert_parallel has DDP ignore and synchronises itself)."""
    p = count_params(spec)
    return p.total - p.moe_experts * (1 - 1 / ep), p.total - (p.moe_experts if ep > 1 else 0)


def expert_rows_bytes(
    spec: ModelSpec, plan: Plan, *, rows_received: float, seq_len: int, activation_bytes: int
) -> float:
    """Bytes an expert-parallel rank holds beyond `rank_peak`'s balanced routing when its
    experts received `rows_received` rows in a micro-batch, over the MoE layers: each received
    row is its expert's input and hidden tensors (train.expert_parallel: the rows a rank's own
    tokens send out and get back are the same number whatever the routing, dropless; the
    rows it receives are not). Negative when it received fewer than the balanced share,
    micro_batch x seq_len x the kept slots per token a layer (`kept_slots_per_token`)."""
    balanced = spec.n_moe_layers * plan.micro_batch * seq_len * kept_slots_per_token(spec)
    return (rows_received - balanced) * expert_row_bytes(spec, e=activation_bytes)


def _engine_phases(
    spec: ModelSpec, eng, single: PeakMemory, prec, *, seq_len: int, micro_batch: int, ep: int
) -> list:
    """The reference step's phases (their gradients: the rank's, `expert_parallel_params`),
    and the engine's extra moments when it backs up unit by unit (FSDP2: `_unit_phases`)."""
    local = expert_parallel_params(spec, ep)[0]
    ratio = local / count_params(spec).total
    phases = [replace(ph, grads_bytes=ph.grads_bytes * ratio) for ph in single.phases]
    if not eng.unit_backward:
        return phases
    layer = activation_memory(
        spec,
        seq_len=seq_len,
        micro_batch=micro_batch,
        activation_bytes=prec.activation_bytes,
        flash_attention=True,
    ).per_layer.total_bytes
    tokens = seq_len * micro_batch
    return _unit_phases(spec, eng, phases, prec, tokens=tokens, layer_bytes=layer, ep=ep)


SEQUENCE_SPLIT = ("backward start", "last block backward")
"""The phases that hold every layer's saved tensors (no recomputation)."""


def sequence_split_bytes(
    spec: ModelSpec, plan: Plan, *, seq_len: int, activation_bytes: int
) -> float:
    """Bytes sequence parallelism saves on one rank beside tensor parallelism alone, over the
    layers (`layer_sequence_split_bytes` each), and the final norm's input, split (the head's
    input, which the column-parallel head all-gathers, is kept whole for its backward). None
    without SP or recomputing every layer."""
    if not plan.sp or plan.tp == 1 or plan.recompute != "none":
        return 0.0
    saved = layer_sequence_split_bytes(
        spec, plan, seq_len=seq_len, activation_bytes=activation_bytes
    )
    final_norm_input = seq_len * plan.micro_batch * spec.d_model * activation_bytes
    return spec.n_layers * saved + final_norm_input * (1 - 1 / plan.tp)


def layer_sequence_split_bytes(
    spec: ModelSpec, plan: Plan, *, seq_len: int, activation_bytes: int
) -> float:
    """Bytes sequence parallelism saves in one layer's saved tensors beside tensor parallelism
    alone, as PyTorch's DTensor runs it: the norms' inputs (and dropout masks) split by tp
    (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2, eq. 2 against eq. 3:
    `activations.layer_activations`), but not the column-parallel linears' inputs: the norm's
    sequence shard is all-gathered (PrepareModuleInput, torch.distributed.tensor.parallel) and
    the matmul saves that whole tensor for its backward, where Megatron-LM saves the shard and
    gathers it again. Measured with MemTracker on the first stage of
    tests/train/test_rank_memory.py's tp2+sp pp2 run: each micro-batch's forward adds 62,464 B,
    this model 62,208 B (the Korthikanti split: 54,016 B). None without SP."""
    if not plan.sp or plan.tp == 1:
        return 0.0
    kw = dict(
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        activation_bytes=activation_bytes,
        flash_attention=True,
        tp=plan.tp,
    )
    tp_alone, split = layer_activations(spec, **kw), layer_activations(spec, sp=True, **kw)
    return (
        tp_alone.norm_inputs_bytes
        - split.norm_inputs_bytes
        + tp_alone.dropout_bytes
        - split.dropout_bytes
    )


LOSS_PARALLEL_TEMPORARIES = 1
"""fp32 tensors of the rank's logits' size (tokens x V/tp) beyond the single device's two
gradients that loss parallel's backward holds at its start: its log-softmax backward handler
(torch.distributed.tensor.parallel.loss_parallel, torch 2.13 _loss_ops) forms exp(log-probs)
beside the gradients rather than in place (an attribution, not traced: the one term that
closes the gap). Measured on tests/train/test_rank_memory.py's tp2 run: +1.0 % with it, +10 %
without."""

UNTIL_BACKWARD = ("backward start", "last block backward", "first recomputation")
"""The phases before the blocks' post-backwards have resharded them."""


def _unit_phases(
    spec: ModelSpec,
    eng: Engine,
    phases: list[PhaseMemory],
    prec: Precision,
    *,
    tokens: int,
    layer_bytes: float,
    ep: int = 1,
) -> list[PhaseMemory]:
    """`phases` with FSDP2's units in backward (`Engine.unit_backward`). The root (embeddings,
    final norm, head) is gathered again for the head's backward and stays so, its gradients
    unsharded, until its post-backward at the very end. Two moments compete with backward
    start: the last block's backward (no recomputation: every activation but the loss's; or
    the "first recomputation" phase, the last block rebuilt), with that block's unsharded
    gradients and, resharding, it and the next block gathered; and the first block's backward,
    every other block's gradients already reduce-scattered into their shards, one block's
    activations (`layer_bytes`, rebuilt or kept) left beside the caller's logits. At backward
    end the root's unsharded gradients are reduced."""
    p = count_params(spec)
    w, g, e = prec.weight_bytes, prec.grad_bytes, prec.activation_bytes
    root = p.embedding_token + p.embedding_position + p.final_norm + p.head
    # a block as the rank gathers it; under expert parallelism each local expert is a unit of
    # its own (train.expert_parallel.fully_shard_experts), gathered when it runs (and the
    # next one prefetched), the block's unit its dense part
    local = expert_parallel_params(spec, ep)[0]
    experts = p.moe_experts / ep if ep > 1 else 0.0
    block = (local - experts - root) / spec.n_layers
    expert = experts / max(1, spec.n_moe_layers * spec.n_experts / ep)
    root_grads = (
        (p.head or p.embedding_token) + p.final_norm
    ) * g  # the head's (or tied) and norm's
    # the block (and an expert) in backward and the next one prefetched (all gathered until
    # backward without resharding: UNTIL_BACKWARD), its unsharded gradients
    gathered = 0.0 if eng.gathered_until_backward else 2 * (block + expert) * w
    blocks = gathered + (block + expert) * g
    out = []
    for phase in phases:
        if phase.phase == "backward end":
            phase = replace(phase, buffers_bytes=phase.buffers_bytes + root * (w + g))
        if phase.phase == "first recomputation":
            phase = replace(
                phase,
                grads_bytes=0.0,
                temporaries_bytes=phase.temporaries_bytes + root_grads,
                buffers_bytes=phase.buffers_bytes + root * w + blocks,
            )
        out.append(phase)
        if phase.phase != "backward start":
            continue
        if not any(ph.phase == "first recomputation" for ph in phases):
            out.append(
                replace(
                    phase,
                    phase="last block backward",
                    activations_bytes=phase.activations_bytes
                    - tokens * spec.vocab_size * FP32_BYTES,
                    temporaries_bytes=root_grads,
                    buffers_bytes=phase.buffers_bytes + blocks,
                )
            )
        out.append(
            replace(
                phase,
                phase="first block backward",
                grads_bytes=(local - root - block - expert) * g,  # sharded by the caller
                # the block's saved tensors and its input, the logits the caller holds
                activations_bytes=layer_bytes
                + tokens * spec.d_model * e
                + tokens * spec.vocab_size * e,
                temporaries_bytes=root_grads + tokens * spec.d_model * g,
                buffers_bytes=phase.buffers_bytes + root * w + (block + expert) * (w + g),
            )
        )
    return out
