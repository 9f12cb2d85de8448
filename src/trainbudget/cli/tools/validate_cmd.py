"""`trainbudget validate`: predicted vs published step times (and memory) of real training runs,
broken down by source, framework, GPU generation, layout family and the rest of
`validation.BREAKDOWN_KEYS`, with the in-training share fitted leaving each source out; with
`--runs FILE`, the same comparison for the user's own measured runs (`validate_runs`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from trainbudget.cli.args import dumps_json
from trainbudget.cli.tools.tables import pct as _pct
from trainbudget.cli.tools.tables import table as _table
from trainbudget.core.units import GB


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    form = p.add_mutually_exclusive_group()  # one output form: tables or JSON
    form.add_argument("--markdown", action="store_true", help="print the docs/validation.md tables")
    form.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--runs",
        metavar="FILE",
        help="your own measured runs instead of the published ones: a JSON list or a CSV file, "
        "each run an `id`, its `estimate` options (model, GPUs, layout, framework, precision) "
        "and one of `step_seconds`, `tokens_per_second_per_gpu`, `tokens_per_second`; "
        "optionally `memory` with `memory_measure` (allocated | reserved | device) and "
        "`completed` (default true)",
    )


def run(args: argparse.Namespace) -> int:
    if args.runs is not None:
        from pathlib import Path

        from trainbudget.cli.tools.validate_runs import compare_file, summary_json, summary_text

        comparisons = compare_file(Path(args.runs))
        doc = summary_json(comparisons)
        print(dumps_json(doc) if args.json else "\n".join(summary_text(doc, args.markdown)))
        return 0
    r = _Results.collect()
    print(dumps_json(_as_json(r)) if args.json else "\n".join(_as_text(r, args.markdown)))
    return 0


@dataclass(frozen=True)
class _Results:
    """Every figure `validate` prints, computed once."""

    comparisons: list
    counted: list
    mae: float
    loso: object
    loso_mae: float
    groups: dict
    memory: list
    memory_groups: list
    memory_by: dict

    @classmethod
    def collect(cls) -> _Results:
        from trainbudget.validation import (
            BREAKDOWN_KEYS,
            MEMORY_BREAKDOWN_KEYS,
            breakdown,
            compare_all,
            leave_one_source_out,
            mean_absolute_error,
            memory_error,
            scored,
            with_memory,
        )

        comparisons = compare_all()
        counted = scored(comparisons)
        loso = leave_one_source_out()
        memory = with_memory(counted)
        return cls(
            comparisons=comparisons,
            counted=counted,
            mae=mean_absolute_error(counted),
            loso=loso,
            loso_mae=sum(abs(v) for v in loso.errors.values()) / len(loso.errors),
            groups={name: breakdown(counted, key) for name, key in BREAKDOWN_KEYS.items()},
            memory=memory,
            memory_groups=breakdown(memory, BREAKDOWN_KEYS["source"], memory_error),
            memory_by={
                name: breakdown(memory, key, memory_error)
                for name, key in {**BREAKDOWN_KEYS, **MEMORY_BREAKDOWN_KEYS}.items()
                if name != "source"
            },
        )


def _as_json(r: _Results) -> dict:
    from trainbudget.validation import EXCLUDED

    return {
        "runs": [
            {
                "id": c.run_id,
                "source": c.source_key,
                "framework": c.framework,
                "gpu_generation": c.gpu_generation,
                "layout_family": c.layout_family,
                "gpus": c.n_gpus,
                "layout": c.layout,
                "measured_step_seconds": c.measured_seconds,
                "predicted_step_seconds": c.predicted_seconds,
                "error": c.error,
                "leave_one_source_out_error": r.loso.errors.get(c.run_id),
                "measured_memory_bytes": c.measured_memory_bytes,
                "memory_measure": c.memory_measure,
                "predicted_memory_bytes": c.predicted_memory_bytes,
                "predicted_memory_bytes_in_measure": c.predicted_in_measure_bytes,
                "memory_error": c.memory_error,
                "allocated_memory_error": c.allocated_memory_error,
                "excluded": EXCLUDED.get(c.run_id),
            }
            for c in r.comparisons
        ],
        "breakdown": {name: [g.__dict__ for g in gs] for name, gs in r.groups.items()},
        "memory_breakdown": [g.__dict__ for g in r.memory_groups],
        "memory_breakdown_by": {name: [g.__dict__ for g in gs] for name, gs in r.memory_by.items()},
        "memory_mean_absolute_error": _memory_mae(r.memory),
        "outliers": [
            {"id": c.run_id, "error": c.error, "explanation": why} for c, why in _outliers(r)
        ],
        "leave_one_source_out_in_training": r.loso.chosen,
        "mean_absolute_error": r.mae,
        "leave_one_source_out_mean_absolute_error": r.loso_mae,
        "scored": len(r.counted),
        "predicted_not_to_fit": [c.run_id for c in _not_fitting(r)],
        "predicted_not_to_fit_by_rule": {
            name: [c.run_id for c in rejected] for name, rejected in _fits_rules(r).items()
        },
    }


def _not_fitting(r: _Results) -> list:
    """The runs the default fits rule rejects: the device rule, its margin the median of the
    model's memory error on the framework row's memory rows, the run's own source left out."""
    from trainbudget.core.parallel.fits import MARGIN_PERCENTILE
    from trainbudget.uncertainty import predicted_not_to_fit_with_measured_error

    return predicted_not_to_fit_with_measured_error(r.counted, MARGIN_PERCENTILE)


def _fits_rules(r: _Results) -> dict[str, list]:
    """The runs each fits rule rejects, each against the memory the device gives the process:
    the flat 90 % (the former default), and the device rule (the OOM peak, allocated + CUDA
    context + NCCL buffers) with the median (the default), 75th and 90th percentile of the
    model's own memory error on the framework row's memory rows (own source left out)."""
    from trainbudget.uncertainty import predicted_not_to_fit_with_measured_error
    from trainbudget.validation import predicted_not_to_fit

    out = {"flat 90 % of the device's memory": predicted_not_to_fit(r.counted)}
    for q in (50, 75, 90):
        name = f"device peak x the {q}th percentile of measured / predicted"
        out[name] = predicted_not_to_fit_with_measured_error(r.counted, q)
    return out


def _memory_mae(memory: list) -> float | None:
    return sum(abs(c.memory_error) for c in memory) / len(memory) if memory else None


def _as_text(r: _Results, md: bool) -> list[str]:
    out: list[str] = []
    for title, head, rows in _sections(r):
        out.extend(["", f"### {title}" if md else f"{title}:", ""] if out else [])
        out.extend(_table(head, rows, md))
    out.append("")
    out.extend(
        f"memory: {g.name}: mean absolute error {100 * g.mean_absolute_error:.1f} % over "
        f"{g.n_runs} runs"
        for g in r.memory_groups
    )
    if r.memory:
        out.append(
            f"memory: mean absolute error {100 * _memory_mae(r.memory):.1f} % over "
            f"{len(r.memory)} runs from {len(r.memory_groups)} sources, each compared in its "
            "own measure (no constant is fitted to memory: leave-one-source-out is the same)"
        )
    rejected = _not_fitting(r)
    out.append(
        f"completed runs predicted to fit: {len(r.counted) - len(rejected)} of {len(r.counted)} "
        "(the default fits rule: (peak + CUDA context + NCCL buffers) x the median measured / "
        "predicted of the framework row's other sources, at most the memory the device gives "
        f"the process; not: {', '.join(c.run_id for c in rejected)})"
        if rejected
        else f"completed runs predicted to fit: all {len(r.counted)}"
    )
    out.extend(
        f"fits rule '{name}': {len(r.counted) - len(rejected)} of {len(r.counted)} predicted to fit"
        for name, rejected in _fits_rules(r).items()
    )
    out.append(
        f"mean absolute error over {len(r.counted)} runs from {len(r.groups['source'])} sources: "
        f"{100 * r.mae:.1f} % (leave-one-source-out: {100 * r.loso_mae:.1f} %)"
    )
    return out


def _sections(r: _Results) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table, in print order."""
    from trainbudget.validation import EXCLUDED

    runs = [
        [
            c.run_id + (" (excluded)" if c.run_id in EXCLUDED else ""),
            str(c.n_gpus),
            c.layout,
            f"{c.measured_seconds:.3f}",
            f"{c.predicted_seconds:.3f}",
            _pct(c.error),
            _pct(r.loso.errors.get(c.run_id)),
        ]
        for c in r.comparisons
    ]
    sources = [
        [
            g.name,
            str(g.n_runs),
            f"{100 * g.mean_absolute_error:.1f} %",
            _pct(g.mean_error),
            f"{100 * _mean_abs(r.loso.errors, r.counted, g.name):.1f} %",
            f"{r.loso.chosen[g.name]:.2f}",
        ]
        for g in r.groups["source"]
    ]
    memory = [
        [
            c.run_id,
            c.memory_measure or "-",
            f"{c.measured_memory_bytes / GB:.1f}",
            f"{c.predicted_memory_bytes / GB:.1f}",
            f"{c.predicted_in_measure_bytes / GB:.1f}",
            _pct(c.memory_error),
            _pct(c.allocated_memory_error),
        ]
        for c in r.memory
        if c.measured_memory_bytes is not None
    ]
    return [
        (
            "Runs",
            ["run", "GPUs", "layout", "measured s", "predicted s", "error", "LOSO error"],
            runs,
        ),
        (
            "Step-time error by source (leave-one-source-out: in-training share fitted without it)",
            ["source", "runs", "MAE", "mean error", "LOSO MAE", "LOSO in-training"],
            sources,
        ),
        *_group_sections(r),
        (
            "Peak memory per GPU, where the source reports it (core plan_memory, converted to "
            "the source's measure by core.parallel.fits.in_measure)",
            [
                "run",
                "measure",
                "measured GB",
                "predicted allocated GB",
                "predicted in measure GB",
                "error",
                "error as allocated",
            ],
            memory,
        ),
        (
            "Scored runs beyond +-15 %, and why (validation.OUTLIERS)",
            ["run", "error", "why"],
            [[c.run_id, _pct(c.error), why or "-"] for c, why in _outliers(r)],
        ),
    ]


def _group_sections(r: _Results) -> list[tuple[str, list[str], list[list[str]]]]:
    """The step-time error by every breakdown but the source (with its leave-one-source-out
    error), then the memory error by each."""

    def row(g) -> list[str]:
        return [g.name, str(g.n_runs), f"{100 * g.mean_absolute_error:.1f} %", _pct(g.mean_error)]

    step = [
        (
            f"Step-time error by {name}",
            [name, "runs", "MAE", "mean error", "LOSO MAE"],
            [
                [*row(g), f"{100 * _mean_abs(r.loso.errors, r.counted, g.name, name):.1f} %"]
                for g in r.groups[name]
            ],
        )
        for name in r.groups
        if name != "source"
    ]
    memory = [
        (
            f"Memory error by {name} (no constant is fitted to memory: leave-one-source-out "
            "is the same)",
            [name, "runs", "MAE", "mean error"],
            [row(g) for g in groups],
        )
        for name, groups in r.memory_by.items()
    ]
    return step + memory


def _outliers(r: _Results) -> list:
    from trainbudget.validation import outliers

    return outliers(r.counted)


def _mean_abs(errors: dict[str, float], counted: list, group: str, by: str = "source") -> float:
    """Mean |leave-one-source-out error| over the scored runs whose `by` breakdown key is
    `group`."""
    from trainbudget.validation import BREAKDOWN_KEYS

    key = BREAKDOWN_KEYS[by]
    errs = [abs(errors[c.run_id]) for c in counted if key(c) == group]
    return sum(errs) / len(errs)
