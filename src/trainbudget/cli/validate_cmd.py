"""`trainbudget validate`: predicted vs published step times of real training runs."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import dumps_json


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--markdown", action="store_true", help="print the docs/validation.md table")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from trainbudget.validation import (
        EXCLUDED,
        compare_all,
        leave_one_out_errors,
        mean_absolute_error,
        scored,
    )

    comparisons = compare_all()
    counted = scored(comparisons)
    mae = mean_absolute_error(counted)
    loo = leave_one_out_errors()
    loo_mae = sum(abs(v) for v in loo.values()) / len(loo)
    if args.json:
        print(
            dumps_json(
                {
                    "runs": [
                        {
                            "id": c.run_id,
                            "source": c.source,
                            "gpus": c.n_gpus,
                            "layout": c.layout,
                            "measured_step_seconds": c.measured_seconds,
                            "predicted_step_seconds": c.predicted_seconds,
                            "error": c.error,
                            "leave_one_out_error": loo.get(c.run_id),
                            "excluded": EXCLUDED.get(c.run_id),
                        }
                        for c in comparisons
                    ],
                    "mean_absolute_error": mae,
                    "leave_one_out_mean_absolute_error": loo_mae,
                    "scored": len(counted),
                }
            )
        )
        return 0
    sep = " | " if args.markdown else "  "
    head = ["run", "GPUs", "layout", "measured s", "predicted s", "error", "LOO error"]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        # columns as wide as their longest entry, so long layouts keep the table aligned
        w_run = max(len("run"), *(len(c.run_id) for c in comparisons))
        w_layout = max(len("layout"), *(len(c.layout) for c in comparisons))
        print(
            f"{'run':<{w_run}} {'GPUs':>6} {'layout':<{w_layout}} {'measured':>9} "
            f"{'predicted':>9} {'error':>7}"
        )
    for c in comparisons:
        note = " (excluded)" if c.run_id in EXCLUDED else ""
        loo_err = f"{100 * loo[c.run_id]:+.1f} %" if c.run_id in loo else "-"
        if args.markdown:
            cells = [
                c.run_id + note,
                str(c.n_gpus),
                c.layout,
                f"{c.measured_seconds:.3f}",
                f"{c.predicted_seconds:.3f}",
                f"{100 * c.error:+.1f} %",
                loo_err,
            ]
            print("| " + sep.join(cells) + " |")
        else:
            print(
                f"{c.run_id:<{w_run}} {c.n_gpus:>6} {c.layout:<{w_layout}} "
                f"{c.measured_seconds:>9.3f} "
                f"{c.predicted_seconds:>9.3f} {100 * c.error:>+6.1f}%{note}"
            )
    print()
    print(
        f"mean absolute error over {len(counted)} runs: {100 * mae:.1f} % "
        f"(leave-one-out: {100 * loo_mae:.1f} %)"
    )
    return 0
