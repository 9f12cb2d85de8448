"""One plan evaluated (`evaluate`: its memory per GPU and step time), and why the planner's best
plan wins (`why_best`).

The search itself, over every valid layout for a model on a cluster at a global batch, is
`planner_fast.search_fast` (numpy arrays, one element per plan, through the same term functions
`evaluate` uses); what it searches and what it returns are `plan_space`'s. Imports run one way:
plan_space <- planner <- planner_fast.
"""

from __future__ import annotations

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import fits, n_communicators, rule_for
from trainbudget.core.parallel.memory.gpu_memory import stage_memories
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.plan_space import (
    TIE_TOLERANCE,
    PlannerResult,
    RankedPlan,
    model_parallel_degree,
    parallel_axes,
)
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY, Efficiency, step_time
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


def evaluate(
    spec: ModelSpec,
    plan: Plan,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    headroom: float | None = DEFAULT_MEMORY_HEADROOM,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    count_causal: bool = False,
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
        count_causal=count_causal,
        framework=framework,
    )
    return RankedPlan(
        plan=plan,
        memory=mem,
        time=t,
        fits=bool(
            fits(
                mem.total_bytes,
                cluster.hardware.usable_memory_bytes,
                rule_for(headroom, framework.name),
                n_communicators(plan.dp, plan.tp, plan.pp, plan.cp),
            )
        ),
        stage_memory_bytes={name: m.total_bytes for name, m in stages.items()},
        stage_peak_phases={name: m.phase for name, m in stages.items()},
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
