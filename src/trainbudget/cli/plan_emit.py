"""`trainbudget plan --emit ENGINE [--emit-out PATH]`: the best plan as the engine's config.

Without --emit-out the file goes to stdout (so `> file` keeps it clean) and the notes, what
the file cannot carry, to stderr. With it the file is written (into PATH, named after the
engine, when PATH is a folder) and the plan, the path and the notes are printed.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from trainbudget.cli.args import dumps_json
from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.emit.engines import ENGINES, VERSIONS, emit
from trainbudget.emit.job import Job


def add_emit_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hand the best plan to a training engine")
    g.add_argument(
        "--emit",
        help="write the best plan as a config of: "
        + ", ".join(f"{k} ({v})" for k, v in VERSIONS.items()),
    )
    g.add_argument(
        "--emit-out",
        help="file to write (or a folder: the file is named after the engine); default stdout",
    )


def _job(args: argparse.Namespace, result, model: ModelSpec, seq_len: int, tokens) -> Job:
    if not result.plans or not result.plans[0].fits:
        raise SpecError("--emit", args.emit, "no plan fits in memory: nothing to emit")
    plan = result.plans[0].plan
    steps = math.ceil(tokens / (plan.global_batch * seq_len)) if tokens else None
    return Job(
        model=model,
        plan=plan,
        seq_len=seq_len,
        precision=args.precision,
        optimizer=args.optimizer,
        train_steps=steps,
    )


def _out_path(args: argparse.Namespace, file_name: str) -> Path:
    path = Path(args.emit_out)
    if path.is_dir():
        return path / file_name
    if not path.parent.is_dir():
        raise SpecError("--emit-out", args.emit_out, "its folder does not exist")
    return path


def run_emit(args: argparse.Namespace, result, model: ModelSpec, seq_len: int, tokens) -> int:
    """Emit the best plan of `result` for args.emit; 0, or a SpecError naming what the
    engine cannot carry."""
    if args.emit not in ENGINES:
        raise unknown_key("--emit", args.emit, list(ENGINES))
    job = _job(args, result, model, seq_len, tokens)
    emitted = emit(args.emit, job)
    if args.emit_out is None:
        sys.stdout.write(emitted.text)
        for note in emitted.notes:
            print(f"note: {note}", file=sys.stderr)
        return 0
    path = _out_path(args, emitted.file_name)
    path.write_text(emitted.text, encoding="utf-8")
    if args.json:
        print(
            dumps_json(
                {
                    "plan": job.plan.describe(),
                    "engine": VERSIONS[args.emit],
                    "path": str(path),
                    "notes": list(emitted.notes),
                }
            )
        )
        return 0
    print(f"plan         {job.plan.describe()}")
    print(f"emitted      {path} ({VERSIONS[args.emit]})")
    for note in emitted.notes:
        print(f"note         {note}")
    return 0
