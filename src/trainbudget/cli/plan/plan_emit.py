"""`trainbudget plan --emit ENGINE [--emit-out PATH]`: the best plan as the engine's config.

Without --emit-out the file goes to stdout (so `> file` keeps it clean) and the notes, what
the file cannot carry, to stderr. With it the file is written (into PATH, named after the
engine, when PATH is a folder) and the plan, the path and the notes are printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainbudget.api.inputs.values import dumps_json
from trainbudget.api.returned.engine_config import emitted as engine_file
from trainbudget.api.returned.results import PlanResult
from trainbudget.core.errors import SpecError
from trainbudget.emit.engines import VERSIONS


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


def _out_path(args: argparse.Namespace, file_name: str) -> Path:
    path = Path(args.emit_out)
    if path.is_dir():
        return path / file_name
    if not path.parent.is_dir():
        raise SpecError("--emit-out", args.emit_out, "its folder does not exist")
    return path


def run_emit(args: argparse.Namespace, answer: PlanResult) -> int:
    """Emit the best plan of `answer` for args.emit (api.returned.engine_config, as the result's
    `.emit(engine)` does); 0, or a SpecError naming what the engine cannot carry."""
    emitted = engine_file(answer, args.emit)
    plan = answer.best.plan
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
                    "plan": plan.describe(),
                    "engine": VERSIONS[args.emit],
                    "path": str(path),
                    "notes": list(emitted.notes),
                }
            )
        )
        return 0
    print(f"plan         {plan.describe()}")
    print(f"emitted      {path} ({VERSIONS[args.emit]})")
    for note in emitted.notes:
        print(f"note         {note}")
    return 0
