"""The numbers behind a run report: a `trainbudget train --out DIR` directory's metrics.jsonl,
summary.json (absent while the run is going) and config.json. Pure: no matplotlib, no torch.

metrics.jsonl is read and checked by `train.plot.read_metrics` (one JSON object per line with
an integer step). Then, as `train.plot.load_run` reads it: the LAST record of a step wins (a
resumed run or a rollback logs some steps again) and records with an "event" key (checkpoint,
rollback, skipped step, interruption) are markers, not points. Unknown keys are ignored and a
value of the wrong type reads as missing, so a page is drawn for any run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from trainbudget.train.plot import SUMMARY_FILE, metrics_path, read_metrics

CONFIG_FILE = "config.json"


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


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    step: int
    event: str
    detail: str
    """The record's other scalar fields, `key=value, ...`."""


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """summary.json's predicted-vs-measured figures (see train.loop._summary)."""

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
class RunReport:
    name: str
    run_dir: str
    points: tuple[RunPoint, ...]
    """Sorted by step, one per step."""
    events: tuple[RunEvent, ...]
    replaced_records: int
    """Records replaced by a later record of the same step."""
    tokens_per_step: int | None
    summary: RunSummary | None
    config: dict
    notes: tuple[str, ...]


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _table(value: object) -> dict[str, float]:
    """A JSON object's finite numbers; anything else is dropped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in ((k, _num(v)) for k, v in value.items()) if v is not None}


def _sub(record: dict, key: str) -> dict:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _point(record: dict, tokens_per_step: int | None) -> RunPoint:
    memory, ev = _sub(record, "memory_bytes"), _sub(record, "eval")
    tps, predicted = (
        _num(record.get("tokens_per_second")),
        _num(record.get("predicted_step_seconds")),
    )
    predicted_tps = tokens_per_step / predicted if tokens_per_step and predicted else None
    mfu = _num(record.get("mfu"))
    return RunPoint(
        step=record["step"],
        loss=_num(record.get("loss")),
        lr=_num(record.get("lr")),
        grad_norm=_num(record.get("grad_norm")),
        tokens_per_second=tps,
        step_seconds=_num(record.get("step_seconds")),
        predicted_step_seconds=predicted,
        predicted_tokens_per_second=predicted_tps,
        mfu=mfu,
        predicted_mfu=mfu * predicted_tps / tps
        if mfu is not None and predicted_tps and tps
        else None,
        predicted_peak_bytes=_num(memory.get("predicted_peak")),
        measured_peak_bytes=_num(memory.get("measured_peak")),
        phases_seconds=_table(record.get("phases_seconds")),
        val_loss=_num(ev.get("val_loss")),
        val_loss_by_source=_table(ev.get("per_source")),
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


def _tokens_per_step(summary: dict, records: list[dict]) -> int | None:
    """summary.json's figure; while the run goes, a record's tokens/s x its step seconds (the
    loop logs tokens_per_second = tokens_per_step / step_seconds)."""
    value = summary.get("tokens_per_step")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    for r in records:
        tps, seconds = _num(r.get("tokens_per_second")), _num(r.get("step_seconds"))
        if tps and seconds:
            return round(tps * seconds)
    return None


def _read_json(path: Path) -> dict | None:
    """A JSON object from `path`; None when absent or unreadable (a page is still drawn)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _summary(doc: dict) -> RunSummary:
    step_s, memory, mfu = _sub(doc, "step_seconds"), _sub(doc, "memory_bytes"), _sub(doc, "mfu")
    measured, by = _num(memory.get("measured_peak")), "CUDA allocator"
    if measured is None:
        measured = _num(memory.get("measured_peak_fake_tensors"))
        by = "torch MemTracker on fake tensors" if measured is not None else None
    device = _sub(doc, "device")
    steps, world = doc.get("steps"), doc.get("world_size")
    notes = doc.get("notes")
    tokens_per_step = _tokens_per_step(doc, [])
    predicted = _num(step_s.get("predicted"))
    return RunSummary(
        steps=steps if isinstance(steps, int) else None,
        tokens_per_step=tokens_per_step,
        loss_first_logged=_num(doc.get("loss_first_logged")),
        loss_final=_num(doc.get("loss_final")),
        unigram_entropy_nats=_num(doc.get("unigram_entropy_nats")),
        step_seconds_measured_median=_num(step_s.get("measured_median")),
        step_seconds_predicted=predicted,
        step_seconds_error=_num(step_s.get("error")),
        tokens_per_second=_num(doc.get("tokens_per_second")),
        predicted_tokens_per_second=tokens_per_step / predicted
        if tokens_per_step and predicted
        else None,
        mfu_measured=_num(mfu.get("measured")),
        memory_predicted_peak_bytes=_num(memory.get("predicted_peak")),
        memory_measured_peak_bytes=measured,
        memory_measured_by=by,
        memory_error=_num(memory.get("error")),
        device=str(device["name"]) if "name" in device else None,
        world_size=world if isinstance(world, int) else None,
        reliability=_table(doc.get("reliability")),
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
    )


def load_run_report(run: str | Path) -> RunReport:
    """A run directory (or its metrics.jsonl) as a report; bad metrics lines are SpecErrors."""
    path = metrics_path(run)
    run_dir = path.parent
    records = read_metrics(path)
    summary_doc = _read_json(run_dir / SUMMARY_FILE)
    tokens_per_step = _tokens_per_step(summary_doc or {}, records)
    by_step: dict[int, RunPoint] = {}
    events: list[RunEvent] = []
    replaced = 0
    for record in records:
        if "event" in record:
            events.append(_event(record))
            continue
        replaced += record["step"] in by_step
        by_step[record["step"]] = _point(record, tokens_per_step)
    notes = []
    if summary_doc is None:
        notes.append(f"no {SUMMARY_FILE}: the run is still going (or stopped before its end)")
    if replaced:
        notes.append(
            f"{replaced} logged steps were logged again (a resumed run): the last record wins"
        )
    config = _read_json(run_dir / CONFIG_FILE)
    return RunReport(
        name=run_dir.resolve().name,
        run_dir=str(run_dir),
        points=tuple(by_step[s] for s in sorted(by_step)),
        events=tuple(sorted(events, key=lambda e: e.step)),
        replaced_records=replaced,
        tokens_per_step=tokens_per_step,
        summary=_summary(summary_doc) if summary_doc is not None else None,
        config=config or {},
        notes=tuple(notes),
    )
