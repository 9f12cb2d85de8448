"""`trainbudget plot RUN_DIR [RUN_DIR ...]`: loss curves (training loss, validation points),
throughput and MFU from metrics.jsonl as one PNG; several runs give one comparison figure. The
runs are read by `train.spec.run_files` and drawn by `report.run_charts`, as `report --run` does;
matplotlib is imported inside run() only."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from trainbudget.cli.args import dumps_json
from trainbudget.core.errors import SpecError

if TYPE_CHECKING:
    from trainbudget.train.spec.run_files import RunLog


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


def _digest(r: RunLog) -> dict:
    """What was drawn of one run, for --json and the text lines."""
    loss = [p.loss for p in r.points if p.loss is not None]
    val = [p.val_loss for p in r.points if p.val_loss is not None]
    return {
        "run": r.name,
        "metrics": r.metrics,
        "records": len(r.points),
        "last_step": r.points[-1].step if r.points else None,
        "loss_final": loss[-1] if loss else None,
        "val_loss_final": val[-1] if val else None,
        "eval_points": len(val),
        "skipped_records": r.replaced_records,
        "skipped_lines": r.skipped,
    }


def _out_path(args: argparse.Namespace, runs: list[RunLog]) -> Path:
    if args.out is not None:
        out = Path(args.out)
    elif len(runs) == 1:
        out = Path(runs[0].run_dir) / "loss.png"
    else:
        raise SpecError("--out", None, "is needed to compare several runs (where to write)")
    if out.suffix.lower() != ".png":
        raise SpecError("out", str(out), "must be a .png file")
    if not out.parent.is_dir():
        raise SpecError("out", str(out), f"its folder {out.parent} does not exist")
    return out


def _write(out: Path, png: bytes) -> None:
    """The chart to `out`; a read-only folder or file system is a one-line error naming --out."""
    try:
        out.write_bytes(png)
    except OSError as err:
        raise SpecError(
            "out", str(out), f"cannot be written ({err.strerror}); choose a writable --out"
        ) from None


def run(args: argparse.Namespace) -> int:
    from trainbudget.report.figures import require_matplotlib
    from trainbudget.train.spec.run_files import read_runs

    runs = read_runs(args.runs)  # bad input fails here, before matplotlib is imported
    out = _out_path(args, runs)
    require_matplotlib()
    from trainbudget.report.run_charts import curves_chart

    _write(out, curves_chart(runs).png)
    digests = [_digest(r) for r in runs]
    if args.json:
        print(dumps_json({"out": str(out), "runs": digests}))
        return 0
    print(f"wrote {out}")
    for r, d in zip(runs, digests, strict=True):
        val = f", val loss {d['val_loss_final']:.4f}" if d["val_loss_final"] is not None else ""
        loss = f"{d['loss_final']:.4f}" if d["loss_final"] is not None else "n/a"
        print(f"  {r.name}: {d['records']} logged steps to {d['last_step']}, loss {loss}{val}")
        for note in r.notes:
            print(f"  note: {note}")
    return 0
