"""The scaling curve: the same question at other GPU counts, the fastest fitting layout at
each, with its training time, cost and step-time parts. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.search.planner import PlannerResult, RankedPlan
from trainbudget.core.single.training_time import TrainingTime
from trainbudget.report.plan_question import PlanQuestion, search, step_parts, train_time

SCALING_POWERS = range(-4, 5)
"""Default scaling curve: the asked GPU count times 2**k for these k."""


@dataclass(frozen=True, kw_only=True)
class ScalingPoint:
    """The fastest fitting layout at one GPU count, same model, tokens and global batch."""

    n_gpus: int
    plan: str
    step_seconds: float
    tokens_per_second: float
    mfu: float
    train_days: float
    gpu_hours: float
    cost: float | None
    step_seconds_by_part: dict[str, float]
    scaling_efficiency: float
    """Least GPU-hours of any count shown / GPU-hours here: 1 at the cheapest count, and a
    count twice as large with efficiency 0.5 trains no faster."""


def scaling_counts(q: PlanQuestion) -> tuple[int, ...]:
    if q.scaling_gpus:
        return tuple(sorted(set(q.scaling_gpus)))
    n, per_node = q.cluster.n_gpus, q.cluster.gpus_per_node
    counts = set()
    for k in SCALING_POWERS:
        c = n * 2**k
        # whole GPUs; beyond one node, whole nodes (the Cluster's rule)
        if c >= 1 and c == int(c) and (c <= per_node or c % per_node == 0):
            counts.add(int(c))
    return tuple(sorted(counts))


def scaling(
    q: PlanQuestion, asked: PlannerResult
) -> tuple[tuple[ScalingPoint, ...], tuple[str, ...]]:
    rows: list[tuple[int, RankedPlan, TrainingTime]] = []
    skipped: list[str] = []
    for n in scaling_counts(q):
        if n == q.cluster.n_gpus:
            result = asked  # the same numbers as the headline
        else:
            try:
                cluster = dataclasses.replace(q.cluster, n_gpus=n)
                result = search(q, cluster, top=1)
            except SpecError as err:
                skipped.append(f"{n} GPUs: {err.rule}")
                continue
        best = result.plans[0]
        if not best.fits:
            skipped.append(f"{n} GPUs: no layout fits in memory")
            continue
        rows.append((n, best, train_time(best, q.tokens, q.price_per_gpu_hour)))
    least = min((t.gpu_hours for _, _, t in rows), default=0.0)
    points = []
    for n, best, t in rows:
        parts, _ = step_parts(best)
        points.append(
            ScalingPoint(
                n_gpus=n,
                plan=best.plan.describe(),
                step_seconds=best.time.step_seconds,
                tokens_per_second=best.time.tokens_per_second,
                mfu=best.time.mfu,
                train_days=t.days,
                gpu_hours=t.gpu_hours,
                cost=t.cost,
                step_seconds_by_part=parts,
                scaling_efficiency=least / t.gpu_hours,
            )
        )
    return tuple(points), tuple(skipped)
