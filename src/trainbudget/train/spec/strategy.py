"""The data-parallel strategies the trainer runs, each on PyTorch's own engine, and the device
mesh each needs. Pure (no torch): preflight, the budget (train.observe.accounting) and the wrapper
(train.parallel.parallelize) read the same table.

| strategy | ZeRO | what runs | mesh axes |
|---|---|---|---|
| ddp | 0 | DistributedDataParallel | dp |
| zero1 | 1 | DDP + torch.distributed.optim.ZeroRedundancyOptimizer | dp |
| zero2 | 2 | FSDP2 fully_shard(reshard_after_forward=False) | dp |
| fsdp | 3 | FSDP2 fully_shard | dp |
| hsdp | 3 | FSDP2 fully_shard on a 2-D mesh | dp_replicate, dp_shard |

ZeRO stages after Rajbhandari et al. 2020 (arXiv 1910.02054, Sec. 5.1): 1 shards the optimizer
state, 2 also the gradients, 3 also the parameters. PyTorch has no engine for exactly stage 2:
FSDP2 without resharding after forward is the closest exact equivalent (the same update; the
parameters, sharded at rest, stay gathered from the start of forward to the end of backward, so
that backward all-gathers nothing). `zero2_extra_params_bytes` in train.observe.accounting says what
that holds beyond ZeRO-2.

Naming (torchtitan's rule): an "axis" is a device-mesh axis, a "dim" a tensor dimension. The
mesh has the data-parallel axes, after a "pp" axis when the model is split into pipeline
stages (train.parallel.pipeline) and, with tensor parallelism, before an innermost "tp" axis (the
strategy then runs on the data-parallel sub-mesh: train.parallel.parallelize); expert groups are
carved out of the "dp" axis (train.parallel.expert_parallel); with context parallelism a "cp"
axis sits between the data-parallel axes and "tp" (the core's tp-cp-dp-pp order;
train.parallel.context), laid out in `mesh_shape`, the one place the mesh is laid out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainbudget.core.errors import SpecError

if TYPE_CHECKING:
    from trainbudget.core.spec.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    zero: int
    """The ZeRO stage the core's memory model is given for it."""
    engine: str
    """What runs, in PyTorch's words (summary.json's `strategy_engine`)."""
    fsdp2: bool
    """The model is wrapped by FSDP2's fully_shard (parameters become DTensors)."""
    reshard_after_forward: bool = True
    """FSDP2 only: free the gathered parameters after each block's forward."""
    memory_engine: str = "ddp"
    """The row of core.parallel.memory.rank_peak.ENGINES whose buffers it holds on each rank."""


STRATEGIES_TABLE = {
    s.name: s
    for s in (
        Strategy(name="ddp", zero=0, engine="DistributedDataParallel", fsdp2=False),
        Strategy(
            name="zero1",
            zero=1,
            engine="DistributedDataParallel + ZeroRedundancyOptimizer",
            fsdp2=False,
            memory_engine="ddp+zero-redundancy",
        ),
        Strategy(
            name="zero2",
            zero=2,
            engine="FSDP2 fully_shard(reshard_after_forward=False), the closest exact "
            "equivalent of ZeRO-2 in PyTorch: parameters gathered from forward to backward",
            fsdp2=True,
            reshard_after_forward=False,
            memory_engine="fsdp2-no-reshard",
        ),
        Strategy(
            name="fsdp", zero=3, engine="FSDP2 fully_shard", fsdp2=True, memory_engine="fsdp2"
        ),
        Strategy(
            name="hsdp",
            zero=3,
            engine="FSDP2 fully_shard on a 2-D mesh",
            fsdp2=True,
            memory_engine="fsdp2",
        ),
    )
}
STRATEGIES = tuple(STRATEGIES_TABLE)
ZERO_STRATEGIES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "fsdp"}
"""The strategy for a plan's ZeRO stage over all dp ranks (a shard group: hsdp)."""


@dataclass(frozen=True, kw_only=True)
class MeshShape:
    axes: tuple[str, ...]
    """Axis names, outermost first."""
    sizes: tuple[int, ...]
    """Ranks along each axis; their product is the world size."""


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES_TABLE:
        raise SpecError("strategy", name, "must be one of " + ", ".join(STRATEGIES))
    return STRATEGIES_TABLE[name]


def strategy_for_plan(zero: int, zero_shard: int) -> str:
    """The strategy that runs a plan's ZeRO stage and HSDP shard group (0: all dp ranks)."""
    if not zero_shard:
        return ZERO_STRATEGIES[zero]
    if zero != 3:
        raise SpecError(
            "zero_shard",
            zero_shard,
            f"the trainer runs a shard group (HSDP) with ZeRO-3 only; this plan has "
            f"zero={zero} with zero_shard={zero_shard}",
        )
    return "hsdp"


def mesh_shape(
    strategy: str, *, world_size: int, zero_shard: int, tp: int = 1, pp: int = 1, cp: int = 1
) -> MeshShape:
    """The device mesh of `strategy` on `world_size` processes: ("dp",) for every strategy but
    hsdp, whose ("dp_replicate", "dp_shard") axes hold world_size / zero_shard replicas of
    zero_shard shards each (outer axis across the groups, as FSDP2's HSDP expects).

    With pp > 1 a "pp" axis comes first (outermost: the ranks of one stage are consecutive);
    with tp > 1 a trailing (innermost) "tp" axis of tp ranks: a tensor-parallel group is tp
    consecutive ranks (the core's tp-innermost rank order, core.parallel.plan). The
    data-parallel axes hold world_size / (pp x tp x cp) ranks; with cp > 1 a "cp" axis of cp
    ranks sits just outside "tp" (the core's tp-cp-dp-pp order)."""
    if pp > 1:
        if world_size % pp:
            raise SpecError("pp", pp, f"must divide the processes ({world_size})")
        inner = mesh_shape(
            strategy, world_size=world_size // pp, zero_shard=zero_shard, tp=tp, cp=cp
        )
        return MeshShape(axes=("pp", *inner.axes), sizes=(pp, *inner.sizes))
    if tp < 1 or world_size % tp:
        raise SpecError("tp", tp, f"must be >= 1 and divide the processes ({world_size})")
    if tp > 1:
        dp = mesh_shape(strategy, world_size=world_size // tp, zero_shard=zero_shard, cp=cp)
        return MeshShape(axes=(*dp.axes, "tp"), sizes=(*dp.sizes, tp))
    if cp < 1 or world_size % cp:
        raise SpecError(
            "cp", cp, f"must be >= 1 and divide the processes / (pp x tp) ({world_size})"
        )
    if cp > 1:
        dp = mesh_shape(strategy, world_size=world_size // cp, zero_shard=zero_shard)
        return MeshShape(axes=(*dp.axes, "cp"), sizes=(*dp.sizes, cp))
    get_strategy(strategy)
    if strategy != "hsdp":
        if zero_shard:
            raise SpecError(
                "zero_shard", zero_shard, f"is for strategy hsdp only (this run: {strategy})"
            )
        return MeshShape(axes=("dp",), sizes=(world_size,))
    if zero_shard < 1 or world_size % zero_shard:
        raise SpecError(
            "zero_shard",
            zero_shard,
            f"must be >= 1 and divide the processes ({world_size}) for strategy hsdp",
        )
    replicas = world_size // zero_shard
    return MeshShape(axes=("dp_replicate", "dp_shard"), sizes=(replicas, zero_shard))


def alone_note(strategy: str, *, world_size: int) -> str | None:
    """What a one-process run does with a strategy other than the default: no wrapper at all
    (FSDP2 or ZeroRedundancyOptimizer over one rank would shard nothing), said rather than
    silent; None when it runs as asked."""
    if world_size > 1 or strategy == "ddp":
        return None
    return (
        f"strategy {strategy} shards over several processes and this run has one: it runs "
        f"unwrapped (single); launch it with torchrun --nproc-per-node N to run {strategy}"
    )


def check_strategy(
    strategy: str,
    *,
    zero_shard: int,
    world_size: int,
    precision: str,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
) -> None:
    """What the strategy needs of the run, before anything starts: a mesh that fits the
    processes, and a precision its optimizer wrapper supports."""
    mesh_shape(strategy, world_size=world_size, zero_shard=zero_shard, tp=tp, pp=pp, cp=cp)
    if strategy == "zero1" and tp > 1 and world_size > tp:
        raise SpecError(
            "strategy",
            strategy,
            "zero1's ZeroRedundancyOptimizer takes plain tensors, not tensor parallelism's "
            "DTensor parameters; with tp > 1 use ddp, zero2, fsdp or hsdp",
        )
    if strategy == "zero1" and precision == "bf16-mixed" and world_size > 1:
        raise SpecError(
            "precision",
            precision,
            "zero1 shards torch optimizers, not bf16-mixed's fp32 master weights; use zero2, "
            "fsdp or another precision",
        )


def check_tensor_parallel(spec: ModelSpec, *, tp: int) -> None:
    """What tensor parallelism (train.parallel.tensor_parallel) needs of the model: every split it
    makes is of whole heads, whole hidden units and whole vocabulary rows, the same count on each
    rank; and the layers it has a plan for (dense attention and MLP)."""
    if tp == 1:
        return
    # the fused qkv projection is split by kv-head groups (model.transformer.Attention), so tp
    # must divide the kv heads: a kv head shared by ranks would be a replicated copy instead
    for name in ("n_heads", "n_kv_heads", "d_ff", "vocab_size"):
        value = getattr(spec, name)
        if value % tp:
            raise SpecError(name, value, f"must be divisible by tp ({tp}){_TP_WHY[name]}")
    refused = (
        (spec.is_mla, "multi-head latent attention has no tensor-parallel plan"),
        (spec.is_moe, "expert layers have no tensor-parallel plan (use ep)"),
        (
            spec.qk_norm,
            "QK-norm's per-head weight would need its gradient summed over the tp "
            "ranks, which the plan does not do",
        ),
    )
    for applies, why in refused:
        if applies:
            raise SpecError("tp", tp, f"is not supported for this model: {why}")


_TP_WHY = {
    "n_heads": ": each rank computes n_heads / tp query heads",
    "n_kv_heads": ": each rank holds n_kv_heads / tp key/value heads and their query heads",
    "d_ff": ": each rank holds d_ff / tp hidden units of every MLP",
    "vocab_size": ": the embedding and the output head are split by vocabulary rows "
    "(--set vocab_size=<a multiple of tp> pads it)",
}


def engine_name(strategy: str, *, world_size: int, tp: int = 1, sequence_parallel: bool = False):
    """What runs (summary.json's `strategy_engine`): the strategy's engine, and with tp > 1
    tensor parallelism's styles (train.parallel.tensor_parallel) -- alone when the processes are one
    tp group; ddp then runs as FSDP2's `replicate` (train.parallel.parallelize)."""
    engine = get_strategy(strategy).engine
    if tp == 1:
        return engine
    split = "sequence parallel, " if sequence_parallel else ""
    styles = f"DTensor tensor parallel (colwise/rowwise, {split}loss parallel)"
    if world_size == tp:
        return styles
    if not get_strategy(strategy).fsdp2:
        engine = "replicate (FSDP2's engine without sharding: gradients all-reduced, as DDP)"
    return f"{engine} + {styles}"
