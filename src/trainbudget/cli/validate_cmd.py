"""`trainbudget validate`: predicted vs published step times (and memory) of real training runs,
broken down by source, framework, GPU generation and layout family, with the matmul efficiency
fitted leaving each source out."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainbudget.cli.args import dumps_json
from trainbudget.core.units import GB


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--markdown", action="store_true", help="print the docs/validation.md tables")
    p.add_argument("--json", action="store_true", help="print JSON")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def _table(head: Sequence[str], rows: list[list[str]], markdown: bool) -> list[str]:
    """Rows under a header: a markdown table, or columns as wide as their longest entry
    (numbers right-aligned, text left-aligned)."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    columns = list(zip(head, *rows, strict=True))
    widths = [max(len(x) for x in col) for col in columns]
    numeric = [all(x[:1] in "0123456789+-" for x in col[1:]) for col in columns]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            f"{c:>{w}}" if num else f"{c:<{w}}"
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    return [line(head), *(line(r) for r in rows)]


def run(args: argparse.Namespace) -> int:
    from trainbudget.validation import (
        BREAKDOWN_KEYS,
        EXCLUDED,
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
    mae = mean_absolute_error(counted)
    loso = leave_one_source_out()
    loso_mae = sum(abs(v) for v in loso.errors.values()) / len(loso.errors)
    groups = {name: breakdown(counted, key) for name, key in BREAKDOWN_KEYS.items()}
    memory = with_memory(counted)
    memory_groups = breakdown(memory, BREAKDOWN_KEYS["source"], memory_error)
    if args.json:
        print(
            dumps_json(
                {
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
                            "leave_one_source_out_error": loso.errors.get(c.run_id),
                            "measured_memory_bytes": c.measured_memory_bytes,
                            "predicted_memory_bytes": c.predicted_memory_bytes,
                            "memory_error": c.memory_error,
                            "excluded": EXCLUDED.get(c.run_id),
                        }
                        for c in comparisons
                    ],
                    "breakdown": {name: [g.__dict__ for g in gs] for name, gs in groups.items()},
                    "memory_breakdown": [g.__dict__ for g in memory_groups],
                    "leave_one_source_out_matmul_efficiency": loso.chosen,
                    "mean_absolute_error": mae,
                    "leave_one_source_out_mean_absolute_error": loso_mae,
                    "scored": len(counted),
                }
            )
        )
        return 0
    md = args.markdown
    out: list[str] = []

    def section(title: str, head: Sequence[str], rows: list[list[str]]) -> None:
        out.extend(["", f"### {title}" if md else f"{title}:", ""] if out else [])
        out.extend(_table(head, rows, md))

    section(
        "Runs",
        ["run", "GPUs", "layout", "measured s", "predicted s", "error", "LOSO error"],
        [
            [
                c.run_id + (" (excluded)" if c.run_id in EXCLUDED else ""),
                str(c.n_gpus),
                c.layout,
                f"{c.measured_seconds:.3f}",
                f"{c.predicted_seconds:.3f}",
                _pct(c.error),
                _pct(loso.errors.get(c.run_id)),
            ]
            for c in comparisons
        ],
    )
    by_source = {g.name: g for g in groups["source"]}
    section(
        "Step-time error by source (leave-one-source-out: matmul efficiency fitted without it)",
        ["source", "runs", "MAE", "mean error", "LOSO MAE", "LOSO matmul eff."],
        [
            [
                key,
                str(g.n_runs),
                f"{100 * g.mean_absolute_error:.1f} %",
                _pct(g.mean_error),
                f"{100 * _mean_abs(loso.errors, counted, key):.1f} %",
                f"{loso.chosen[key]:.2f}",
            ]
            for key, g in by_source.items()
        ],
    )
    for name in ("framework", "GPU generation", "layout family"):
        section(
            f"Step-time error by {name}",
            [name, "runs", "MAE", "mean error"],
            [
                [g.name, str(g.n_runs), f"{100 * g.mean_absolute_error:.1f} %", _pct(g.mean_error)]
                for g in groups[name]
            ],
        )
    section(
        "Peak memory per GPU, where the source reports it (core plan_memory)",
        ["run", "measured GB", "predicted GB", "error"],
        [
            [
                c.run_id,
                f"{c.measured_memory_bytes / GB:.1f}",
                f"{c.predicted_memory_bytes / GB:.1f}",
                _pct(c.memory_error),
            ]
            for c in memory
            if c.measured_memory_bytes is not None
        ],
    )
    out.append("")
    out.extend(
        f"memory: {g.name}: mean absolute error {100 * g.mean_absolute_error:.1f} % over "
        f"{g.n_runs} runs"
        for g in memory_groups
    )
    out.append(
        f"mean absolute error over {len(counted)} runs from {len(by_source)} sources: "
        f"{100 * mae:.1f} % (leave-one-source-out: {100 * loso_mae:.1f} %)"
    )
    print("\n".join(out))
    return 0


def _mean_abs(errors: dict[str, float], counted: list, source_key: str) -> float:
    """Mean |leave-one-source-out error| over the scored runs of `source_key`."""
    errs = [abs(errors[c.run_id]) for c in counted if c.source_key == source_key]
    return sum(errs) / len(errs)
