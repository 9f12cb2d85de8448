"""How far to trust a predicted step time: a low/high range from the model's own error on
similar published runs (data: trainbudget.validation).

Each scored published run gives one ratio measured / predicted, predicted with the in-training
GEMM share (Efficiency.in_training) fitted WITHOUT the run's source
(validation.leave_one_source_out): the error the model makes on a source it was not tuned on,
which is the situation of a new plan. The in-sample errors (the efficiency chosen with the run's
own source in the fit) would flatter the model.

The similar runs are those of the plan's layout family and GPU generation whose data-parallel
collectives take as large a share of the predicted step (DP_HEAVY_SHARE or more, or less:
`trainbudget validate` finds the runs at 10 % and more some 11 % slower than predicted, the
others about right); where fewer than MIN_RUNS of them are scored, those of the family and
generation whatever their share; then those of its layout family on any GPU; where those are
too few too, every scored run. The range is the 10th and 90th percentile of their ratios (linear
interpolation between order statistics), so about 8 in 10 similar runs fell inside it; with
a handful of runs it is a rough band, and the basis says how many runs it rests on.

Memory gets the same treatment (`MemoryRatio`, `memory_error_range`): each published run with a
measured peak gives measured / predicted peak bytes; the similar runs are those predicted with
the same framework row (validation.RUN_FRAMEWORK_ROWS: the engine that holds the memory), or
every memory row where fewer than MIN_RUNS share it. No constant is fitted to memory, so leaving
a source out changes only which rows form the band (`held_out_source`).

The ratios depend only on the code and the published data, so they are computed once by
REFRESH_COMMAND into LOSO_FILE and read from there: a range costs no prediction of the
published runs (tests/test_uncertainty.py recomputes them and fails when the file is stale).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass

from trainbudget.core.parallel.fits import FitsRule, credited_margin
from trainbudget.core.parallel.plan import Plan

MIN_RUNS = 5
"""Fewest scored runs a set must have to be used; a smaller set falls back to a wider one."""
DP_HEAVY_SHARE = 0.10
"""Share of the predicted step the data-parallel collectives take (reductions and gathers,
hidden or not) from which a plan is compared with the published runs at that share or more;
the edge of `validation.DP_COMM_BANDS`' 10-30 % band."""
LOW_PERCENTILE, HIGH_PERCENTILE = 10.0, 90.0


@dataclass(frozen=True)
class RunError:
    """One scored published run: what it is, and how far off the held-out prediction was."""

    run_id: str
    layout_family: str
    gpu_generation: str
    ratio: float
    """measured / predicted step seconds, predicted with its source left out of the fit."""
    dp_comm_share: float = 0.0
    """validation.Comparison.dp_comm_share (StepTime.data_parallel_share of its prediction)."""


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


def error_range(
    runs: list[RunError],
    layout_family: str,
    gpu_generation: str | None,
    dp_share: float | None = None,
) -> ErrorRange:
    """The range from the most specific set of similar runs that has MIN_RUNS of them;
    `dp_share` (the plan's data-parallel communication share, None: not known) first narrows
    the same-generation set to the runs on its side of DP_HEAVY_SHARE."""
    family = [r for r in runs if r.layout_family == layout_family]
    same = [r for r in family if r.gpu_generation == gpu_generation]
    tiers = [
        (f"{layout_family} on {gpu_generation}", same),
        (f"{layout_family} on any GPU", family),
    ]
    if dp_share is not None:
        heavy = dp_share >= DP_HEAVY_SHARE
        side = f"{'>=' if heavy else '<'} {100 * DP_HEAVY_SHARE:g} %"
        tiers.insert(
            0,
            (
                f"{layout_family} on {gpu_generation}, data-parallel communication {side} of "
                "the step",
                [r for r in same if (r.dp_comm_share >= DP_HEAVY_SHARE) == heavy],
            ),
        )
    if gpu_generation is None:  # a GPU outside validation's table: no same-generation sets
        tiers = tiers[-1:]
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


@dataclass(frozen=True)
class MemoryRatio:
    """One published run with a measured peak: how far the predicted peak was from it."""

    run_id: str
    source_key: str
    framework_row: str
    """The framework row the run is predicted with (validation.framework_row's name)."""
    ratio: float
    """measured / predicted peak bytes per GPU, the prediction converted to what the source's
    figure measures (validation.Comparison.predicted_in_measure_bytes)."""


def memory_error_range(
    rows: list[MemoryRatio], framework_row: str, held_out_source: str | None = None
) -> ErrorRange:
    """The 10th-90th percentile of measured / predicted peak over the memory rows predicted
    with `framework_row` (every memory row where fewer than MIN_RUNS are), leaving out
    `held_out_source`'s rows: how far a run's true peak may lie above its prediction."""
    pool = [r for r in rows if r.source_key != held_out_source]
    same = [r for r in pool if r.framework_row == framework_row]
    basis, chosen = (
        (f"memory rows of the {framework_row} row", same)
        if len(same) >= MIN_RUNS
        else ("every memory row", pool)
    )
    if not chosen:
        raise ValueError("no published runs with a measured peak to take the memory error from")
    ratios = [r.ratio for r in chosen]
    return ErrorRange(
        low=percentile(ratios, LOW_PERCENTILE),
        high=percentile(ratios, HIGH_PERCENTILE),
        n_runs=len(chosen),
        basis=basis,
    )


LOSO_FILE = os.path.join(os.path.dirname(__file__), "loso_errors.json")
"""published_errors' table, generated by REFRESH_COMMAND from computed_errors() (a str path:
pathlib would be one more import for every `estimate`)."""
REFRESH_COMMAND = "python scripts/refresh_loso.py"


def computed_errors() -> tuple[RunError, ...]:
    """Every scored published run's leave-one-source-out ratio, computed: the published runs
    predicted once per in-training grid value (a few tenths of a second). LOSO_FILE stores
    this table; tests/test_uncertainty.py checks the file against it."""
    from trainbudget import validation

    loso = validation.leave_one_source_out()
    out = []
    for c in validation.scored(validation.compare_all()):
        if c.run_id in loso.errors:
            ratio = 1 / (1 + loso.errors[c.run_id])  # error = predicted / measured - 1
            out.append(
                RunError(c.run_id, c.layout_family, c.gpu_generation, ratio, c.dp_comm_share)
            )
    return tuple(out)


def memory_ratios(comparisons: list) -> list[MemoryRatio]:
    """measured / predicted peak of each validation.Comparison with a measured peak, with its
    source and framework row."""
    from trainbudget import validation

    return [
        MemoryRatio(
            c.run_id,
            c.source_key,
            validation.framework_row(c.framework).name,
            c.measured_memory_bytes / c.predicted_in_measure_bytes,
        )
        for c in validation.with_memory(comparisons)
    ]


def computed_memory_ratios() -> tuple[MemoryRatio, ...]:
    """Every scored published run with a measured peak: measured / predicted peak bytes."""
    from trainbudget import validation

    return tuple(memory_ratios(validation.scored(validation.compare_all())))


def device_rule(
    rows: list[MemoryRatio], framework_row: str, held_out_source: str | None, quantile: float
) -> FitsRule:
    """The device fits rule with the model's own memory error on similar runs as its margin:
    the `quantile` (0-100) of measured / predicted peak over the memory rows of
    `framework_row` (every memory row where fewer than MIN_RUNS are), `held_out_source`'s left
    out (a run is not judged by its own source's error)."""
    pool = [r for r in rows if r.source_key != held_out_source]
    same = [r for r in pool if r.framework_row == framework_row]
    chosen = same if len(same) >= MIN_RUNS else pool
    if not chosen:
        raise ValueError("no published runs with a measured peak to take the memory error from")
    margin = credited_margin(percentile([r.ratio for r in chosen], quantile))
    return FitsRule(headroom=None, error_margin=margin)


def predicted_not_to_fit_with_measured_error(
    comparisons: list, quantile: float = HIGH_PERCENTILE
) -> list:
    """The runs (validation.Comparison) that the device fits rule rejects: the predicted peak
    as a device figure (allocated -> reserved -> + CUDA context and NCCL buffers), times the
    `quantile` of the model's own memory error on similar runs, own source left out
    (`device_rule`), above the GPU's memory."""
    from trainbudget import validation

    rows = memory_ratios(comparisons)

    def rule(c) -> FitsRule:
        return device_rule(rows, validation.framework_row(c.framework).name, c.source_key, quantile)

    return validation.predicted_not_to_fit(comparisons, rule)


def errors_to_json(errors: tuple[RunError, ...], memory: tuple[MemoryRatio, ...] = ()) -> str:
    """The text of LOSO_FILE for `errors` (and the memory rows' ratios), one run a line
    (floats written as repr: they read back exactly)."""
    head = {
        "generated_by": REFRESH_COMMAND,
        "what": "measured / predicted step seconds of every scored published run, predicted "
        "with its source left out of the in-training fit (uncertainty.computed_errors); "
        "memory_runs: measured / predicted peak memory of those with a measured peak "
        "(uncertainty.computed_memory_ratios); regenerate, do not edit",
    }
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = ",\n".join(f"  {json.dumps(asdict(e))}" for e in errors)
    memory_rows = ",\n".join(f"  {json.dumps(asdict(m))}" for m in memory)
    return (
        "{\n"
        + "\n".join(lines)
        + '\n "runs": [\n'
        + rows
        + '\n ],\n "memory_runs": [\n'
        + memory_rows
        + "\n ]\n}\n"
    )


@functools.cache
def published_errors() -> tuple[RunError, ...]:
    """computed_errors() as LOSO_FILE stores it: read once per process, so that a plan's range
    costs no prediction of the published runs (the test that recomputes it keeps it current)."""
    with open(LOSO_FILE, encoding="utf-8") as f:
        rows = json.load(f)["runs"]
    return tuple(RunError(**row) for row in rows)


@functools.cache
def published_memory_ratios() -> tuple[MemoryRatio, ...]:
    """computed_memory_ratios() as LOSO_FILE stores it, read once per process."""
    with open(LOSO_FILE, encoding="utf-8") as f:
        rows = json.load(f).get("memory_runs", [])
    return tuple(MemoryRatio(**row) for row in rows)


def plan_error_range(plan: Plan, hardware_name: str, dp_share: float | None = None) -> ErrorRange:
    """The range for a plan on a catalog GPU (a GPU without a generation in validation's
    table skips the same-generation sets); `dp_share`, its predicted step's
    (StepTime.data_parallel_share), picks the side. Its keys come from validation_keys, not
    validation, which would bring the published runs' models into every `estimate`."""
    from trainbudget.validation_keys import GPU_GENERATION, layout_family

    generation = GPU_GENERATION.get(hardware_name)
    return error_range(list(published_errors()), layout_family(plan), generation, dp_share)
