"""The planner: enumerate every valid layout for a model on a cluster at a global batch, drop
those that do not fit, rank the rest by predicted time per token.

The search runs on the grid (`planner_fast`: numpy arrays, one element per plan), through the
same term functions `evaluate` uses for one plan; numpy is imported only when a search runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.parallel_memory import PlanMemory, stage_memories
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.step_time import DEFAULT_EFFICIENCY, Efficiency, StepTime, step_time
from trainbudget.core.spec.defaults import DEFAULT_FLASH_ATTENTION, DEFAULT_MEMORY_HEADROOM
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What the search may use. Defaults follow common practice; each is a knob."""

    max_tp: int = 0
    """Largest TP degree; 0 = GPUs per node (TP across nodes is rarely worth it)."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    allow_offload: bool = False
    allow_cp: bool = True
    max_vpp: int = 4
    max_micro_batch: int = 16
    flash_attention: bool = DEFAULT_FLASH_ATTENTION
    """Plans use FlashAttention (every modern stack does); False searches the unfused kernel."""
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    """Fraction of GPU memory a plan may use (the rest: CUDA context, fragmentation)."""
    hsdp: bool = True
    """Also try ZeRO over shard groups smaller than dp (HSDP), `hsdp_shards` sizes."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two_dividing(n: int, cap: int) -> list[int]:
    out, d = [], 1
    while d <= cap and n % d == 0:
        out.append(d)
        d *= 2
    return out


def hsdp_shards(dp: int, tp: int, cp: int, gpus_per_node: int) -> list[int]:
    """HSDP shard sizes (in dp ranks) worth trying for a dp group: the dp ranks one node holds
    (g // (tp * cp)) and every multiple of it that divides dp, short of dp itself (that is full
    sharding, zero_shard 0); never a group of one GPU, which shards nothing."""
    node = max(1, gpus_per_node // (tp * cp))
    return [s for s in divisors(dp) if s % node == 0 and s < dp and s * cp > 1]


def axis_candidates(
    spec: ModelSpec, cluster: Cluster, *, seq_len: int, policy: Policy
) -> tuple[list[int], list[int], list[int]]:
    """The TP, PP and CP degrees validate_plan can accept for this model and cluster."""
    n = cluster.n_gpus
    max_tp = policy.max_tp or cluster.gpus_per_node
    tps = [
        t
        for t in divisors(spec.n_heads)
        if t <= max_tp
        and t <= spec.vocab_size
        and n % t == 0
        and (spec.n_kv_heads % t == 0 or t % spec.n_kv_heads == 0)
    ]
    pps = [p for p in divisors(spec.n_layers) if n % p == 0]
    cps = [1]
    if policy.allow_cp:
        cps = [c for c in _powers_of_two_dividing(seq_len, n) if c == 1 or seq_len % (2 * c) == 0]
    return tps, pps, cps


def enumerate_plans(
    spec: ModelSpec, cluster: Cluster, *, global_batch: int, seq_len: int, policy: Policy = Policy()
) -> Iterator[Plan]:
    """Every plan the validation accepts under `policy` (the grid's plans, one by one)."""
    from trainbudget.core.parallel.planner_fast import enumerate_plan_arrays

    arrays = enumerate_plan_arrays(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    for i in range(len(arrays)):
        yield arrays.plan(i)


@dataclass(frozen=True, kw_only=True)
class RankedPlan:
    plan: Plan
    memory: PlanMemory
    time: StepTime
    fits: bool
    stage_memory_bytes: dict[str, float] = field(default_factory=dict)
    """Peak bytes per GPU of each pipeline stage ('first', 'middle', 'last', or 'only')."""

    @property
    def seconds_per_token(self) -> float:
        return self.time.step_seconds / self.time.tokens_per_step


TIE_TOLERANCE = 1e-3
"""Plans within 0.1 % of the fastest time per token tie: far below the step model's own error
on published runs (docs/validation.md), so the planner prefers the simpler layout among them."""


def parallel_axes(plan):
    """Model-parallel axes a layout uses beyond data parallelism (tp, pp, virtual stages, cp,
    ep, an HSDP shard group): the planner's tie-break, fewer first. One plan (a Plan, ints) or
    a grid of plans (PlanNumbers of arrays): the same arithmetic."""
    return (
        (plan.tp > 1) * 1
        + (plan.pp > 1)
        + (plan.vpp > 1)
        + (plan.cp > 1)
        + (plan.ep > 1)
        + (plan.zero_shard > 0)
    )


def model_parallel_degree(plan):
    """GPUs one model replica spans (tp x pp x cp x ep): the second tie-break, smaller first
    (fewer GPUs in each collective outside data parallelism). Numbers or arrays."""
    return plan.tp * plan.pp * plan.cp * plan.ep


@dataclass(frozen=True, kw_only=True)
class PlannerResult:
    plans: tuple[RankedPlan, ...]
    """Best first; fitting plans only (unless none fits: then the smallest-memory ones)."""
    evaluated: int
    n_fitting: int
    search_seconds: float


def evaluate(
    spec: ModelSpec,
    plan: Plan,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    headroom: float = DEFAULT_MEMORY_HEADROOM,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = False,
    framework: Framework = GENERIC,
) -> RankedPlan:
    stages = stage_memories(
        spec, plan, seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework
    )
    mem = max(stages.values(), key=lambda m: m.total_bytes)  # as plan_memory takes it
    t = step_time(
        spec,
        plan,
        cluster,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        efficiency=efficiency,
        causal=causal,
        framework=framework,
    )
    return RankedPlan(
        plan=plan,
        memory=mem,
        time=t,
        fits=mem.total_bytes <= headroom * cluster.hardware.memory_bytes,
        stage_memory_bytes={name: m.total_bytes for name, m in stages.items()},
    )


def search(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    policy: Policy = Policy(),
    top: int = 5,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = False,
    framework: Framework = GENERIC,
) -> PlannerResult:
    """Evaluate every plan; keep the `top` fastest that fit (`planner_fast.search_fast`)."""
    from trainbudget.core.parallel.planner_fast import search_fast

    return search_fast(
        spec,
        cluster,
        global_batch=global_batch,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        policy=policy,
        top=top,
        efficiency=efficiency,
        causal=causal,
        framework=framework,
    )


def _tie_text(best: RankedPlan, ties: list[RankedPlan]) -> str:
    """Why the winner beats the plans tied with it on time: fewer parallel axes, a smaller
    model-parallel group, else less memory."""
    axes, degree = parallel_axes(best.plan), model_parallel_degree(best.plan)
    more_axes = [r for r in ties if parallel_axes(r.plan) > axes]
    larger = [r for r in ties if model_parallel_degree(r.plan) > degree]
    if more_axes:
        reason = (
            f"chosen for fewer parallel axes ({axes} vs {parallel_axes(more_axes[0].plan)}: "
            "the simpler layout)"
        )
    elif larger:
        reason = (
            f"chosen for the smaller model-parallel group ({degree} vs "
            f"{model_parallel_degree(larger[0].plan)} GPUs per replica: the simpler layout)"
        )
    elif any(r.memory.total_bytes > best.memory.total_bytes for r in ties):
        reason = "chosen for less memory"
    else:
        reason = "equal memory"
    names = ", ".join(r.plan.describe() for r in ties)
    return f"ties within {100 * TIE_TOLERANCE:g} % on time with {names}; {reason}; "


def why_best(result: PlannerResult) -> str:
    """One line on why the winner wins: the plans that tie with it, and the categories where it
    saves time over the fastest plan shown that is strictly slower."""
    if not result.plans:
        return "no plan fits"
    best = result.plans[0]
    if not best.fits:
        return "no plan fits: these need the least memory"
    ties = [
        r
        for r in result.plans[1:]
        if r.seconds_per_token <= best.seconds_per_token * (1 + TIE_TOLERANCE)
    ]
    slower = [r for r in result.plans[1:] if r not in ties]
    tie_text = _tie_text(best, ties) if ties else ""
    if not slower:
        return tie_text + "no slower plan among those shown"
    b = slower[0]
    diffs = sorted(
        (
            (b.time.breakdown_seconds.get(k, 0.0) - v, k)
            for k, v in best.time.breakdown_seconds.items()
        ),
        reverse=True,
    )
    gains = ", ".join(f"{k} {d:.3g} s less" for d, k in diffs if d > 1e-9)
    ratio = b.seconds_per_token / best.seconds_per_token
    return (
        f"{tie_text}{100 * (ratio - 1):.1f} % faster per token than {b.plan.describe()}: "
        f"{gains or 'the same breakdown'}"
    )
