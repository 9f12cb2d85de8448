"""Which accelerator, and how many, finish N tokens within D days at the least cost?

For each candidate (hardware, GPU count, price per GPU-hour) the planner finds the fastest
fitting layout; days = tokens / (tokens per second) and cost = GPU-hours x price. The answer is
the cheapest candidate that meets the deadline (or, if none does, the fastest one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.search.planner import PlannerResult, RankedPlan
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


@dataclass(frozen=True, kw_only=True)
class Candidate:
    hardware: Hardware
    n_gpus: int
    price_per_gpu_hour: float


@dataclass(frozen=True, kw_only=True)
class Quote:
    candidate: Candidate
    best: RankedPlan | None
    """None when no layout fits on this candidate."""
    days: float
    cost: float
    meets_deadline: bool


def quote(candidate: Candidate, tokens: float, max_days: float, result: PlannerResult) -> Quote:
    fitting = [r for r in result.plans if r.fits]
    if not fitting:
        return Quote(
            candidate=candidate,
            best=None,
            days=float("inf"),
            cost=float("inf"),
            meets_deadline=False,
        )
    best = fitting[0]
    seconds = tokens / best.time.tokens_per_second
    cost = seconds / SECONDS_PER_HOUR * candidate.n_gpus * candidate.price_per_gpu_hour
    days = seconds / SECONDS_PER_DAY
    return Quote(
        candidate=candidate, best=best, days=days, cost=cost, meets_deadline=days <= max_days
    )


def cheapest(
    candidates: Sequence[Candidate],
    *,
    tokens: float,
    max_days: float,
    search: Callable[[Cluster], PlannerResult],
) -> list[Quote]:
    """Quotes for every candidate, best first: those meeting the deadline by cost, then the
    rest by days. `search` runs the planner for one cluster."""
    if tokens <= 0:
        raise SpecError("tokens", tokens, "must be positive")
    if max_days <= 0:
        raise SpecError("within_days", max_days, "must be positive")
    if not candidates:
        raise SpecError("gpu_counts", (), "needs at least one candidate cluster")
    quotes = [
        quote(c, tokens, max_days, search(Cluster(hardware=c.hardware, n_gpus=c.n_gpus)))
        for c in candidates
    ]
    return sorted(
        quotes, key=lambda q: (not q.meets_deadline, q.cost if q.meets_deadline else q.days)
    )
