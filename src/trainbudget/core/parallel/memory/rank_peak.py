"""One rank of a plan the trainer runs: its pipeline stage, its share of a whole-tensor-sharded
optimizer state, its experts, and its peak -- `core.parallel.memory.gpu_peak`'s phase model for that
rank (the model `estimate`, `plan` and the planner use for the heaviest GPU), under the
trainer's own framework row (`frameworks.TRAINBUDGET`: DDP, ZeroRedundancyOptimizer, FSDP2).
The measured side is tests/train/observe/test_rank_memory.py (MemTracker on each rank of torchrun
runs).
"""

from __future__ import annotations

from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.memory.gpu_peak import GpuPeak, gpu_peak
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.activations import expert_row_bytes, kept_slots_per_token
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.spec.frameworks import TRAINBUDGET, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_precision, get_trainable_optimizer


def rank_peak(
    spec: ModelSpec,
    plan: Plan,
    *,
    precision: str,
    optimizer: str,
    seq_len: int,
    rank: int = 0,
    framework: Framework = TRAINBUDGET,
) -> GpuPeak:
    """The phases of one step on `rank` of `plan` (ranks laid out as the trainer's mesh lays
    them: "pp" outermost, `stage_of`): its stage's layers, and under whole-tensor optimizer
    sharding its own share (`whole_tensor_shares`)."""
    prec, opt = get_precision(precision), get_trainable_optimizer(optimizer)
    index = stage_of(rank, plan)
    shard = (plan.zero_shard or plan.dp) * plan.cp
    share = 1.0
    if plan.zero >= 1 and shard > 1:
        shares = whole_tensor_shares(tensor_shard(spec, plan.tp), shard)
        share = shares[rank % shard] / (sum(shares) / shard)
    return gpu_peak(
        spec,
        PlanNumbers.of(plan),
        stage=pipeline_stage(index, plan.pp),
        stage_index=index,
        layers=plan.stage_layer_counts(spec.n_layers)[index],
        seq_len=seq_len,
        precision=prec,
        optimizer=opt,
        framework=framework,
        optimizer_share=share,
    )


def stage_of(rank: int, plan: Plan) -> int:
    """The pipeline stage `rank` runs: "pp" is the mesh's outermost axis
    (train.parallel.parallelize.build_mesh), so ranks [i n / pp, (i + 1) n / pp) are stage i."""
    return rank // (plan.n_gpus // plan.pp)


def heaviest_share(spec: ModelSpec, tp: int, shard: int) -> float:
    """The most any of `shard` ranks owns under whole-tensor sharding, as a multiple of the
    even share (`whole_tensor_shares` of the tensor-parallel rank's shard)."""
    if shard <= 1:
        return 1.0
    shares = whole_tensor_shares(tensor_shard(spec, tp), shard)
    return max(shares) / (sum(shares) / shard)


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


def expert_parallel_params(spec: ModelSpec, ep: int) -> tuple[float, float]:
    """(parameters one rank of `ep` expert-parallel ranks holds -- everything but the routed
    experts, and n_experts / ep of those --, of them the ones DDP's buckets hold: all but the
    experts, which train.parallel.expert_parallel has DDP ignore and synchronises itself)."""
    p = count_params(spec)
    return p.total - p.moe_experts * (1 - 1 / ep), p.total - (p.moe_experts if ep > 1 else 0)


def expert_rows_bytes(
    spec: ModelSpec, plan: Plan, *, rows_received: float, seq_len: int, activation_bytes: int
) -> float:
    """Bytes an expert-parallel rank holds beyond `rank_peak`'s balanced routing when its
    experts received `rows_received` rows in a micro-batch, over the MoE layers: each received
    row is its expert's input and hidden tensors (train.parallel.expert_parallel: the rows a rank's
    own tokens send out and get back are the same number whatever the routing, dropless; the
    rows it receives are not). Negative when it received fewer than the balanced share,
    micro_batch x seq_len x the kept slots per token a layer (`kept_slots_per_token`)."""
    balanced = spec.n_moe_layers * plan.micro_batch * seq_len * kept_slots_per_token(spec)
    return (rows_received - balanced) * expert_row_bytes(spec, e=activation_bytes)
