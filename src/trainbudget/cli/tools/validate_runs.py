"""`trainbudget validate --runs FILE`: the model against your own measured runs. Each run states
itself as `trainbudget estimate` options (its model, GPUs, layout, framework, precision), with
what was measured: the step time (or tokens/s), and optionally the peak memory and its kind. The
prediction is `estimate`'s answer to those options, so the error printed is the CLI's.

The file is JSON (a list of runs, or {"runs": [...]}) or CSV (a header row and one run a line),
with these fields:

    id                          a name for the run, unique in the file
    estimate                    the estimate options, e.g. "--model llama-3-8b --gpus 8 --dp 8
                                --zero 3 --global-batch 32 --seq-len 8192 --framework torchtitan"
    step_seconds                one of these three: seconds per optimizer step,
    tokens_per_second_per_gpu   tokens per second per GPU,
    tokens_per_second           or tokens per second over all GPUs
    memory                      optional: the measured peak per GPU, e.g. 71.3GiB or 7.6e10
    memory_measure              with memory: allocated | reserved | device
    completed                   optional, default true: the run ran to its end, so it fits
    source                      optional: where the figures come from (carried to the output)

Every row is checked before the first is predicted; a bad one is a one-line error naming it."""

from __future__ import annotations

import csv
import functools
import io
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError

MEASURED_FIELDS = ("step_seconds", "tokens_per_second_per_gpu", "tokens_per_second")
FIELDS = ("id", "estimate", *MEASURED_FIELDS, "memory", "memory_measure", "completed", "source")
REFUSED_OPTIONS = ("--json", "--explain", "--mfu", "-h", "--help")
"""Options a run's `estimate` may not carry: output forms, and --mfu, which assumes the answer."""


@dataclass(frozen=True, kw_only=True)
class UserRun:
    """One measured run as the file states it, checked."""

    run_id: str
    estimate_argv: tuple[str, ...]
    measured_field: str
    measured_value: float
    memory_bytes: float | None = None
    memory_measure: str | None = None
    completed: bool = True
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class UserComparison:
    """A run's prediction beside its measurement."""

    run: UserRun
    layout: str
    n_gpus: int
    measured_step_seconds: float
    predicted_step_seconds: float
    predicted_memory_bytes: float
    """The allocated peak `estimate` predicts."""
    predicted_memory_in_measure_bytes: float | None
    fits: bool

    @property
    def error(self) -> float:
        """(predicted - measured) / measured step time."""
        return self.predicted_step_seconds / self.measured_step_seconds - 1

    @property
    def memory_error(self) -> float | None:
        if self.run.memory_bytes is None or self.predicted_memory_in_measure_bytes is None:
            return None
        return self.predicted_memory_in_measure_bytes / self.run.memory_bytes - 1


def read_rows(path: Path) -> list[dict]:
    """The file's rows as mappings (JSON or CSV by its content); a missing, unreadable or
    malformed file is a one-line error."""
    if not path.is_file():
        raise SpecError("runs", str(path), "no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError("runs", str(path), f"cannot be read as text ({err})") from None
    if text.lstrip().startswith(("[", "{")):
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise SpecError("runs", str(path), f"is not JSON ({err})") from None
        rows = doc.get("runs") if isinstance(doc, dict) else doc
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise SpecError("runs", str(path), 'must hold a list of runs, or {"runs": [...]}')
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        if "id" not in header or "estimate" not in header:
            rule = "is neither JSON nor CSV whose header names id and estimate"
            raise SpecError("runs", str(path), rule)
        rows = list(reader)
        rows = [{k: v for k, v in r.items() if k is not None and v not in (None, "")} for r in rows]
    if not rows:
        raise SpecError("runs", str(path), "holds no runs")
    return rows


def _number(where: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not number > 0 or number == float("inf"):
        raise SpecError(where, value, "must be a positive number")
    return number


def _flag(where: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise SpecError(where, value, "must be true or false")


def check_row(row: dict, index: int) -> UserRun:
    """One row as a UserRun; any problem is a SpecError naming the row and the field."""
    from trainbudget.core.parallel.fits import MEMORY_MEASURES
    from trainbudget.core.units import parse_bytes

    run_id = str(row.get("id", "")).strip()
    name = f"runs[{run_id or index}]"
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise SpecError(
            f"{name}.{unknown[0]}", row[unknown[0]], "unknown field; known: " + ", ".join(FIELDS)
        )
    if not run_id:
        raise SpecError(f"runs[{index}].id", row.get("id"), "must be a non-empty name")
    estimate = row.get("estimate")
    if not isinstance(estimate, str) or not estimate.strip():
        raise SpecError(f"{name}.estimate", estimate, "must be the run's estimate options as text")
    try:
        argv = tuple(shlex.split(estimate))
    except ValueError as err:
        raise SpecError(
            f"{name}.estimate", estimate, f"cannot be split into options ({err})"
        ) from None
    refused = [a for a in argv if a.split("=", 1)[0] in REFUSED_OPTIONS]
    if refused:
        raise SpecError(
            f"{name}.estimate",
            refused[0],
            "is not allowed here: the run is timed by the step model",
        )
    given = [f for f in MEASURED_FIELDS if f in row]
    if len(given) != 1:
        rule = "give exactly one of " + ", ".join(MEASURED_FIELDS)
        raise SpecError(f"{name}.measured", ", ".join(given) or None, rule)
    memory = measure = None
    if "memory" in row:
        memory = parse_bytes(row["memory"], f"{name}.memory")
        measure = row.get("memory_measure")
        if measure not in MEMORY_MEASURES:
            rule = "must say what the memory figure measures: " + " | ".join(MEMORY_MEASURES)
            raise SpecError(f"{name}.memory_measure", measure, rule)
    elif "memory_measure" in row:
        raise SpecError(f"{name}.memory_measure", row["memory_measure"], "given without memory")
    return UserRun(
        run_id=run_id,
        estimate_argv=argv,
        measured_field=given[0],
        measured_value=_number(f"{name}.{given[0]}", row[given[0]]),
        memory_bytes=memory,
        memory_measure=measure,
        completed=_flag(f"{name}.completed", row.get("completed", True)),
        source=str(row.get("source", "")),
    )


def check_rows(rows: Sequence[dict]) -> list[UserRun]:
    """Every row checked, its estimate options parsed too, before any run is predicted."""
    runs = [check_row(row, i) for i, row in enumerate(rows)]
    seen: set[str] = set()
    for r in runs:
        if r.run_id in seen:
            raise SpecError("runs.id", r.run_id, "appears twice; each run needs its own name")
        seen.add(r.run_id)
        _estimate_args(r)
    return runs


@functools.cache
def _estimate_parser():
    from trainbudget.cli.main import build_parser

    return build_parser("estimate")


def _estimate_args(run: UserRun):
    """The run's options as `trainbudget estimate` parses them; a parse error names the row."""
    import contextlib

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return _estimate_parser().parse_args(["estimate", *run.estimate_argv])
    except SystemExit:
        message = err.getvalue().strip().split("error: ", 1)[-1].removesuffix(" (see --help)")
        raise SpecError(f"runs[{run.run_id}].estimate", None, message) from None


def predict(run: UserRun) -> UserComparison:
    """`estimate`'s answer to the run's options beside what was measured."""
    from trainbudget.api.answers.estimate_answer import answer_estimate
    from trainbudget.core.parallel.fits import in_measure, n_communicators

    name = f"runs[{run.run_id}]"
    try:
        doc = answer_estimate(_estimate_args(run)).to_json()
    except SpecError as err:
        if err.field.startswith(name):
            raise
        raise SpecError(f"{name}.{err.field}", err.value, err.rule) from None
    if doc["answer"]["kind"] != "layout":
        rule = (
            "states no layout: give the run's (e.g. --dp 8 --zero 3), so that the step model "
            "times it"
        )
        raise SpecError(f"{name}.estimate", " ".join(run.estimate_argv), rule)
    plan, tokens, gpus = doc["plan"], doc["tokens_per_step"], doc["gpus"]
    measured = {
        "step_seconds": run.measured_value,
        "tokens_per_second_per_gpu": tokens / (run.measured_value * gpus),
        "tokens_per_second": tokens / run.measured_value,
    }[run.measured_field]
    allocated = doc["memory_bytes"]["total"]
    in_kind = None
    if run.memory_measure is not None:
        communicators = n_communicators(plan["dp"], plan["tp"], plan["pp"], plan["cp"])
        in_kind = in_measure(allocated, run.memory_measure, communicators)
    return UserComparison(
        run=run,
        layout=plan["description"],
        n_gpus=gpus,
        measured_step_seconds=measured,
        predicted_step_seconds=doc["step_seconds"],
        predicted_memory_bytes=allocated,
        predicted_memory_in_measure_bytes=in_kind,
        fits=doc["fits"],
    )


def compare_file(path: Path) -> list[UserComparison]:
    """Every run of the file, checked first, then predicted."""
    return [predict(r) for r in check_rows(read_rows(path))]


def summary_json(comparisons: list[UserComparison]) -> dict:
    """What `validate --runs FILE --json` prints."""
    errors = [c.error for c in comparisons]
    memory = [c.memory_error for c in comparisons if c.memory_error is not None]
    completed = [c for c in comparisons if c.run.completed]
    return {
        "runs": [
            {
                "id": c.run.run_id,
                "source": c.run.source,
                "estimate": " ".join(c.run.estimate_argv),
                "gpus": c.n_gpus,
                "layout": c.layout,
                "measured_step_seconds": c.measured_step_seconds,
                "predicted_step_seconds": c.predicted_step_seconds,
                "error": c.error,
                "measured_memory_bytes": c.run.memory_bytes,
                "memory_measure": c.run.memory_measure,
                "predicted_memory_bytes": c.predicted_memory_bytes,
                "predicted_memory_bytes_in_measure": c.predicted_memory_in_measure_bytes,
                "memory_error": c.memory_error,
                "completed": c.run.completed,
                "predicted_to_fit": c.fits,
            }
            for c in comparisons
        ],
        "mean_absolute_error": sum(map(abs, errors)) / len(errors),
        "mean_error": sum(errors) / len(errors),
        "memory_mean_absolute_error": sum(map(abs, memory)) / len(memory) if memory else None,
        "memory_runs": len(memory),
        "completed_runs": len(completed),
        "completed_runs_predicted_to_fit": sum(c.fits for c in completed),
        "predicted_not_to_fit": [c.run.run_id for c in completed if not c.fits],
    }


def summary_text(doc: dict, markdown: bool) -> list[str]:
    """`summary_json`'s document as the table and lines `validate --runs FILE` prints."""
    from trainbudget.cli.tools.tables import pct, table
    from trainbudget.core.units import format_bytes

    def memory(run: dict, key: str) -> str:
        return "-" if run[key] is None else format_bytes(run[key])

    head = ["run", "GPUs", "layout", "measured s", "predicted s", "error"]
    head += ["memory (measure)", "predicted", "memory error", "fits"]
    rows = [
        [
            r["id"], str(r["gpus"]), r["layout"], f"{r['measured_step_seconds']:.4g}",
            f"{r['predicted_step_seconds']:.4g}", pct(r["error"]),
            "-" if r["memory_measure"] is None
            else f"{memory(r, 'measured_memory_bytes')} ({r['memory_measure']})",
            memory(r, "predicted_memory_bytes_in_measure"), pct(r["memory_error"]),
            "yes" if r["predicted_to_fit"] else "NO",
        ]
        for r in doc["runs"]
    ]  # fmt: skip
    worst = max(doc["runs"], key=lambda r: abs(r["error"]))
    lines = [*table(head, rows, markdown), ""]
    lines.append(
        f"step-time mean absolute error over {_runs(len(doc['runs']))}: "
        f"{100 * doc['mean_absolute_error']:.1f} % (mean {pct(doc['mean_error'])}; worst "
        f"{worst['id']} {pct(worst['error'])})"
    )
    if doc["memory_mean_absolute_error"] is not None:
        lines.append(
            f"memory mean absolute error over {_runs(doc['memory_runs'])}: "
            f"{100 * doc['memory_mean_absolute_error']:.1f} %"
        )
    lines.append(
        f"completed runs predicted to fit: {doc['completed_runs_predicted_to_fit']} of "
        f"{doc['completed_runs']}"
        + (
            f" (not: {', '.join(doc['predicted_not_to_fit'])})"
            if doc["predicted_not_to_fit"]
            else ""
        )
    )
    return lines


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"
