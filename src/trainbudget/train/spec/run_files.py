"""A run folder as `trainbudget train --out DIR` writes it, and the one reader of it: `trainbudget
plot` and `trainbudget report --run` both read through `read_run`. Pure: json only, no torch
(the report works without it), no matplotlib.

- metrics.jsonl: one JSON object per logged step or event, a whole line written at a time while
  the run goes (`train.observe.metrics.MetricsWriter`); metrics.after-step-NNNNNNNN.jsonl: the
  records a resume moved out of it (those logged after the checkpoint it resumed from);
- run.lock: the lock of the run that owns the folder (`train.launch.run_lock`);
- summary.json: predicted vs measured, written when the run ends (`train.loop.train`);
- config.json: the run's settings, written when it starts;
- comm.json: one step's collectives measured beside the core's, written with summary.json
  (train.observe.comm_report).

Reading metrics.jsonl: every line is a JSON object with an integer step >= 0 ending with a
newline; a line that is not (a torn last line after a crash or a full disk, lines glued
together) is skipped, the records around it read, and what was skipped is said in
`RunLog.skipped` and the notes (train.spec.metrics_scan; only a file without one record is an
error). A step record
(one without an "event" key) holds "loss"; a value the reader knows must have its type (a
number or null; an object for eval, memory_bytes, phases_seconds, per_source,
train_loss_by_source), otherwise the error names file:line, the key and the value. Null (a
non-finite value) and absent keys read as None, unknown keys are ignored. The LAST record of
a step wins (a resumed run or a rollback logs some steps again); records with an "event" key
(checkpoint, rollback, skipped step, interruption) are markers, not points. summary.json is
written once at the end, so a missing, half-written or odd one reads as absent: the run is
still going.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.train.spec.metrics_scan import scan_metrics

METRICS_FILE = "metrics.jsonl"  # its lines: train.spec.metrics_scan
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.json"
COMM_FILE = "comm.json"
"""One step's collectives, measured beside predicted (train.observe.comm_report)."""
TENSORBOARD_DIR = "tensorboard"
METRICS_ASIDE_PREFIX = "metrics.after-step-"
"""metrics.after-step-NNNNNNNN.jsonl: the records a resume moved out of metrics.jsonl."""

RunArg = str | os.PathLike


@dataclass(frozen=True, kw_only=True)
class RunPoint:
    """One logged step; None where the record lacks the value (or holds null)."""

    step: int
    loss: float | None
    lr: float | None
    grad_norm: float | None
    tokens_per_second: float | None
    step_seconds: float | None
    predicted_step_seconds: float | None
    predicted_tokens_per_second: float | None
    """tokens_per_step / predicted_step_seconds."""
    mfu: float | None
    predicted_mfu: float | None
    """The MFU the predicted step time would give: mfu x predicted / measured tokens per second."""
    predicted_peak_bytes: float | None
    measured_peak_bytes: float | None
    phases_seconds: dict[str, float]
    val_loss: float | None
    val_loss_by_source: dict[str, float]
    train_loss_by_source: dict[str, float]
    """The step's training loss of each source it drew from (train.observe.source_loss)."""


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    step: int
    event: str
    detail: str
    """The record's other scalar fields, `key=value, ...`."""


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """summary.json's predicted-vs-measured figures (see train.summary)."""

    steps: int | None
    tokens_per_step: int | None
    loss_first_logged: float | None
    loss_final: float | None
    unigram_entropy_nats: float | None
    step_seconds_measured_median: float | None
    step_seconds_predicted: float | None
    step_seconds_error: float | None
    tokens_per_second: float | None
    """Measured: tokens_per_step / the median step time."""
    predicted_tokens_per_second: float | None
    """tokens_per_step / the predicted step time."""
    mfu_measured: float | None
    memory_predicted_peak_bytes: float | None
    memory_measured_peak_bytes: float | None
    """From the CUDA allocator, or else from torch's MemTracker on fake tensors."""
    memory_measured_by: str | None
    memory_error: float | None
    device: str | None
    world_size: int | None
    reliability: dict[str, float]
    """What the run survived: skipped steps, rollbacks, checkpoints written, ..."""
    notes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CommRow:
    """One row of comm.json (train.observe.comm_report): one mesh axis's op in the counted step."""

    axis: str
    op: str
    measured_bytes: float | None
    predicted_bytes: float | None
    count: float | None
    predicted_count: float | None
    equal: bool
    explained: bool
    """Measured = predicted plus the named differences."""
    difference: str


@dataclass(frozen=True, kw_only=True)
class RunComm:
    """comm.json: one step's collectives measured beside the core's (train.observe.comm_report)."""

    counted: str | None
    """Which step was counted, in words; None: none was."""
    rows: tuple[CommRow, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RunLog:
    """Everything a run folder says: its logged steps, events, summary and config."""

    name: str
    run_dir: str
    metrics: str
    """The metrics.jsonl it was read from."""
    points: tuple[RunPoint, ...]
    """Sorted by step, one per step."""
    events: tuple[RunEvent, ...]
    replaced_records: int
    """Records replaced by a later record of the same step."""
    skipped: str | None
    """What was not read of metrics.jsonl -- its first damaged line (a torn last line, a line
    that is not a record) and every line after it -- in words; None: every line was read."""
    tokens_per_step: int | None
    summary: RunSummary | None
    config: dict
    notes: tuple[str, ...]
    comm: RunComm | None = None
    """comm.json, when the run wrote one."""


# ---- metrics.jsonl ----------------------------------------------------------------------------


def metrics_path(run: RunArg) -> Path:
    """A run directory's metrics.jsonl, or the file itself."""
    path = Path(run)
    if path.is_dir():
        path = path / METRICS_FILE
        if not path.is_file():
            raise SpecError(
                "run", str(run), f"is not a run directory (no {METRICS_FILE}; see `train --out`)"
            )
        return path
    if not path.exists():
        raise SpecError("run", str(run), "no such directory or file")
    return path


def read_metrics(path: RunArg) -> tuple[list[tuple[str, dict]], str | None]:
    """(`file:line`, record) for each whole record of a metrics.jsonl, and what was skipped
    (None: nothing). A file that holds no record is a SpecError (naming file:line of its first
    damaged line, if any)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as err:
        raise SpecError("metrics", str(path), f"cannot be read ({err})") from None
    scan = scan_metrics(text, path)
    if not scan.records and scan.damage is not None:
        raise scan.damage
    if not scan.records:
        raise SpecError("metrics", str(path), "holds no records (did the run log a step?)")
    records = [(f"{path}:{number}", record) for number, _, record in scan.records]
    if scan.damage is None:
        return records, None
    lines = len(scan.rest)
    skipped = (
        f"{scan.damage}; skipped {lines} line{'s' if lines > 1 else ''}, read the "
        f"{len(records)} records around {'them' if lines > 1 else 'it'}"
    )
    return records, skipped


def _finite(value: object) -> float | None:
    """A JSON number as a float; None for anything else, or a non-finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _number(obj: dict, key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SpecError(f"{where}: {key}", value, "must be a number or null")
    return _finite(value)


def _object(obj: dict, key: str, where: str) -> dict:
    value = obj.get(key)
    if value is not None and not isinstance(value, dict):
        raise SpecError(f"{where}: {key}", value, "must be an object")
    return value or {}


def _numbers(obj: dict, key: str, where: str) -> dict[str, float]:
    """An object of numbers; nulls left out."""
    table = _object(obj, key, where)
    values = {str(k): _number(table, k, f"{where}: {key}") for k in table}
    return {k: v for k, v in values.items() if v is not None}


def _point(where: str, record: dict, tokens_per_step: int | None) -> RunPoint:
    if "loss" not in record:
        raise SpecError(f"{where}: loss", None, "is missing (every logged step has a loss)")
    memory, ev = _object(record, "memory_bytes", where), _object(record, "eval", where)
    tps = _number(record, "tokens_per_second", where)
    predicted = _number(record, "predicted_step_seconds", where)
    predicted_tps = tokens_per_step / predicted if tokens_per_step and predicted else None
    mfu = _number(record, "mfu", where)
    return RunPoint(
        step=record["step"],
        loss=_number(record, "loss", where),
        lr=_number(record, "lr", where),
        grad_norm=_number(record, "grad_norm", where),
        tokens_per_second=tps,
        step_seconds=_number(record, "step_seconds", where),
        predicted_step_seconds=predicted,
        predicted_tokens_per_second=predicted_tps,
        mfu=mfu,
        predicted_mfu=mfu * predicted_tps / tps
        if mfu is not None and predicted_tps and tps
        else None,
        predicted_peak_bytes=_number(memory, "predicted_peak", f"{where}: memory_bytes"),
        measured_peak_bytes=_number(memory, "measured_peak", f"{where}: memory_bytes"),
        phases_seconds=_numbers(record, "phases_seconds", where),
        val_loss=_number(ev, "val_loss", f"{where}: eval"),
        val_loss_by_source=_numbers(ev, "per_source", f"{where}: eval"),
        train_loss_by_source=_numbers(record, "train_loss_by_source", where),
    )


def _short(value: object) -> str:
    """A value for an event's detail: floats to 4 significant digits, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value)


def _event(record: dict) -> RunEvent:
    scalars = [
        f"{k}={_short(v)}"
        for k, v in record.items()
        if k not in ("step", "event") and not isinstance(v, dict)
    ]
    detail = ", ".join(scalars)
    return RunEvent(
        step=record["step"],
        event=str(record["event"]),
        detail=detail if len(detail) <= 200 else detail[:197] + "...",
    )


def _tokens_per_step(summary: dict, records: list[tuple[str, dict]]) -> int | None:
    """summary.json's figure; while the run goes, a record's tokens/s x its step seconds (the
    loop logs tokens_per_second = tokens_per_step / step_seconds)."""
    value = summary.get("tokens_per_step")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    for _, r in records:
        tps, seconds = _finite(r.get("tokens_per_second")), _finite(r.get("step_seconds"))
        if tps and seconds:
            return round(tps * seconds)
    return None


# ---- summary.json and config.json -------------------------------------------------------------


def _read_json(path: Path) -> dict | None:
    """A JSON object from `path`; None when absent or unreadable (a page is still drawn)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def has_summary(run_dir: RunArg) -> bool:
    """Whether the run's end was written: summary.json and comm.json, each a whole JSON object
    (a run killed after its last checkpoint, or while writing them, lacks one)."""
    folder = Path(run_dir)
    return all(_read_json(folder / name) is not None for name in (SUMMARY_FILE, COMM_FILE))


def _sub(doc: dict, key: str) -> dict:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _table(value: object) -> dict[str, float]:
    """A JSON object's finite numbers; anything else is dropped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in ((k, _finite(v)) for k, v in value.items()) if v is not None}


def _summary(doc: dict) -> RunSummary:
    step_s, memory, mfu = _sub(doc, "step_seconds"), _sub(doc, "memory_bytes"), _sub(doc, "mfu")
    measured, by = _finite(memory.get("measured_peak")), "CUDA allocator"
    if measured is None:
        measured = _finite(memory.get("measured_peak_fake_tensors"))
        by = "torch MemTracker on fake tensors" if measured is not None else None
    device = _sub(doc, "device")
    steps, world = doc.get("steps"), doc.get("world_size")
    notes = doc.get("notes")
    tokens_per_step = _tokens_per_step(doc, [])
    predicted = _finite(step_s.get("predicted"))
    return RunSummary(
        steps=steps if isinstance(steps, int) else None,
        tokens_per_step=tokens_per_step,
        loss_first_logged=_finite(doc.get("loss_first_logged")),
        loss_final=_finite(doc.get("loss_final")),
        unigram_entropy_nats=_finite(doc.get("unigram_entropy_nats")),
        step_seconds_measured_median=_finite(step_s.get("measured_median")),
        step_seconds_predicted=predicted,
        step_seconds_error=_finite(step_s.get("error")),
        tokens_per_second=_finite(doc.get("tokens_per_second")),
        predicted_tokens_per_second=tokens_per_step / predicted
        if tokens_per_step and predicted
        else None,
        mfu_measured=_finite(mfu.get("measured")),
        memory_predicted_peak_bytes=_finite(memory.get("predicted_peak")),
        memory_measured_peak_bytes=measured,
        memory_measured_by=by,
        memory_error=_finite(memory.get("error")),
        device=str(device["name"]) if "name" in device else None,
        world_size=world if isinstance(world, int) else None,
        reliability=_table(doc.get("reliability")),
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
    )


def _comm(doc: dict) -> RunComm:
    """comm.json's rows; a value of the wrong type reads as None (or as not equal)."""
    rows = []
    for r in doc.get("rows") if isinstance(doc.get("rows"), list) else []:
        if not isinstance(r, dict):
            continue
        rows.append(
            CommRow(
                axis=str(r.get("axis")),
                op=str(r.get("op")),
                measured_bytes=_finite(r.get("measured_bytes")),
                predicted_bytes=_finite(r.get("predicted_bytes")),
                count=_finite(r.get("count")),
                predicted_count=_finite(r.get("predicted_count")),
                equal=r.get("equal") is True,
                explained=r.get("explained") is True,
                difference=str(r.get("difference") or ""),
            )
        )
    notes = doc.get("notes")
    counted = doc.get("counted")
    return RunComm(
        counted=counted if isinstance(counted, str) else None,
        rows=tuple(rows),
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
    )


# ---- the run folder ---------------------------------------------------------------------------


def read_run(run: RunArg, name: str | None = None) -> RunLog:
    """A run directory (or its metrics.jsonl), named `name` or else by its folder."""
    path = metrics_path(run)
    run_dir = path.parent
    records, skipped = read_metrics(path)
    summary_doc = _read_json(run_dir / SUMMARY_FILE)
    tokens_per_step = _tokens_per_step(summary_doc or {}, records)
    by_step: dict[int, RunPoint] = {}
    events: list[RunEvent] = []
    replaced = 0
    for where, record in records:
        if "event" in record:
            events.append(_event(record))
            continue
        replaced += record["step"] in by_step
        by_step[record["step"]] = _point(where, record, tokens_per_step)
    notes = [skipped] if skipped else []
    if summary_doc is None:
        notes.append(f"no {SUMMARY_FILE}: the run is still going (or stopped before its end)")
    if replaced:
        notes.append(
            f"{replaced} logged steps were logged again (a resumed run): the last record wins"
        )
    return RunLog(
        name=name or _run_name(path),
        run_dir=str(run_dir),
        metrics=str(path),
        points=tuple(by_step[s] for s in sorted(by_step)),
        events=tuple(sorted(events, key=lambda e: e.step)),
        replaced_records=replaced,
        skipped=skipped,
        tokens_per_step=tokens_per_step,
        summary=_summary(summary_doc) if summary_doc is not None else None,
        config=_read_json(run_dir / CONFIG_FILE) or {},
        notes=tuple(notes),
        comm=_comm(comm_doc) if (comm_doc := _read_json(run_dir / COMM_FILE)) else None,
    )


def read_runs(runs: Sequence[RunArg]) -> list[RunLog]:
    """Several runs, named by their folder (by the path given where two folders share a name)."""
    if not runs:
        raise SpecError("run", None, "give at least one run directory")
    paths = [metrics_path(r) for r in runs]
    names = [_run_name(p) for p in paths]
    if len(set(names)) < len(names):
        names = [str(r) for r in runs]
    return [read_run(p, n) for p, n in zip(paths, names, strict=True)]


def _run_name(metrics: Path) -> str:
    parent = metrics.resolve().parent
    return parent.name or str(parent)
