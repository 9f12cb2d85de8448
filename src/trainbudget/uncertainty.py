"""How far to trust a predicted step time: a low/high range from the model's own error on
similar published runs (data: trainbudget.validation).

Each scored published run gives one ratio measured / predicted, predicted with the in-training
GEMM share (Efficiency.in_training) fitted WITHOUT the run's source
(validation.leave_one_source_out): the error the model makes on a source it was not tuned on,
which is the situation of a new plan. The in-sample errors (the efficiency chosen with the run's
own source in the fit) would flatter the model.

The similar runs are those of the plan's layout family and GPU generation; where fewer than
MIN_RUNS of them are scored, those of its layout family on any GPU; where those are too few
too, every scored run. The range is the 10th and 90th percentile of their ratios (linear
interpolation between order statistics), so about 8 in 10 similar runs fell inside it; with
a handful of runs it is a rough band, and the basis says how many runs it rests on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainbudget.core.parallel.plan import Plan

MIN_RUNS = 5
"""Fewest scored runs a set must have to be used; a smaller set falls back to a wider one."""
LOW_PERCENTILE, HIGH_PERCENTILE = 10.0, 90.0


@dataclass(frozen=True)
class RunError:
    """One scored published run: what it is, and how far off the held-out prediction was."""

    run_id: str
    layout_family: str
    gpu_generation: str
    ratio: float
    """measured / predicted step seconds, predicted with its source left out of the fit."""


@dataclass(frozen=True)
class ErrorRange:
    """Multiply a predicted step time by `low` and `high` to get the range."""

    low: float
    high: float
    n_runs: int
    basis: str
    """The set of runs used, e.g. 'tp+pp on A100', 'tp+pp on any GPU', 'every scored run'."""


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between the sorted values."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    below = int(pos)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (pos - below)


def error_range(runs: list[RunError], layout_family: str, gpu_generation: str | None) -> ErrorRange:
    """The range from the most specific set of similar runs that has MIN_RUNS of them."""
    family = [r for r in runs if r.layout_family == layout_family]
    tiers = [
        (
            f"{layout_family} on {gpu_generation}",
            [r for r in family if r.gpu_generation == gpu_generation],
        ),
        (f"{layout_family} on any GPU", family),
    ]
    if gpu_generation is None:  # a GPU outside validation's table: no same-generation set
        tiers.pop(0)
    basis, chosen = next(
        ((b, c) for b, c in tiers if len(c) >= MIN_RUNS), ("every scored run", runs)
    )
    if not chosen:
        raise ValueError("no scored published runs to take the model's error from")
    ratios = [r.ratio for r in chosen]
    return ErrorRange(
        low=percentile(ratios, LOW_PERCENTILE),
        high=percentile(ratios, HIGH_PERCENTILE),
        n_runs=len(chosen),
        basis=basis,
    )


@functools.cache
def published_errors() -> tuple[RunError, ...]:
    """Every scored published run's leave-one-source-out ratio (computed once per process:
    a few tens of ms on top of importing the published runs)."""
    from trainbudget import validation

    loso = validation.leave_one_source_out()
    out = []
    for c in validation.scored(validation.compare_all()):
        if c.run_id in loso.errors:
            ratio = 1 / (1 + loso.errors[c.run_id])  # error = predicted / measured - 1
            out.append(RunError(c.run_id, c.layout_family, c.gpu_generation, ratio))
    return tuple(out)


def plan_error_range(plan: Plan, hardware_name: str) -> ErrorRange:
    """The range for a plan on a catalog GPU (a GPU without a generation in validation's
    table skips the same-generation set)."""
    from trainbudget import validation

    generation = validation.GPU_GENERATION.get(hardware_name)
    return error_range(list(published_errors()), validation.layout_family(plan), generation)
