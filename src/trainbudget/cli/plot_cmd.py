"""`trainbudget plot RUN_DIR [RUN_DIR ...]`: loss curves (training loss, validation points) and
throughput (tokens/s, MFU) from metrics.jsonl as a PNG; several runs give one comparison figure.
matplotlib is imported inside run() only."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainbudget.cli.args import dumps_json
from trainbudget.core.errors import SpecError


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory from `trainbudget train --out` (or its metrics.jsonl); several "
        "are drawn on one figure to compare them",
    )
    p.add_argument(
        "--out",
        metavar="FILE.png",
        help="the image to write (default RUN_DIR/loss.png; needed with several runs)",
    )
    p.add_argument("--json", action="store_true", help="print what was drawn as JSON")


def run(args: argparse.Namespace) -> int:
    from trainbudget.train.plot import load_runs, plot_runs

    runs = load_runs(args.runs)  # bad input fails here, before matplotlib is imported
    if args.out is not None:
        out = Path(args.out)
    elif len(runs) == 1:
        out = runs[0].path.parent / "loss.png"
    else:
        raise SpecError("--out", None, "is needed to compare several runs (where to write)")
    path = plot_runs(runs, out)
    if args.json:
        print(dumps_json({"out": str(path), "runs": [r.as_dict() for r in runs]}))
        return 0
    print(f"wrote {path}")
    for r in runs:
        d = r.as_dict()
        val = f", val loss {d['val_loss_final']:.4f}" if d["val_loss_final"] is not None else ""
        loss = f"{d['loss_final']:.4f}" if d["loss_final"] is not None else "n/a"
        print(f"  {r.name}: {d['records']} logged steps to {d['last_step']}, loss {loss}{val}")
        if r.skipped:
            print(
                f"  note: {r.skipped} earlier records in {r.path} skipped (the step count "
                "restarted: another run was written into the same folder)"
            )
    return 0
