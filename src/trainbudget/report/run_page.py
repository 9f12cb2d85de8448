"""The run report page: a one-line verdict, the summary's predicted vs measured table, then
loss, throughput, step time, memory and optimizer charts, one step's collectives (comm.json),
events, the config and the notes."""

from __future__ import annotations

import json

from trainbudget.core.units import format_bytes
from trainbudget.report.figures import Chart
from trainbudget.report.page import Raw, bullets, document, esc, figure, paragraph, table
from trainbudget.train.spec.run_files import RunLog, RunPoint


def _last(points: tuple[RunPoint, ...], attr: str) -> float | None:
    values = [getattr(p, attr) for p in points if getattr(p, attr) is not None]
    return values[-1] if values else None


def _first(points: tuple[RunPoint, ...], attr: str) -> float | None:
    values = [getattr(p, attr) for p in points if getattr(p, attr) is not None]
    return values[0] if values else None


def _error(measured: float | None, predicted: float | None) -> str:
    if measured is None or not predicted:
        return "-"
    return f"{measured / predicted - 1:+.1%}"


def run_headline(r: RunLog) -> str:
    """One line: loss from first to last, step time and memory, measured vs predicted."""
    pts, s = r.points, r.summary
    last_step = pts[-1].step if pts else 0
    state = "finished" if s is not None else "running"
    parts = [f"{r.name} ({state}; {len(pts)} logged steps up to step {last_step})"]
    first, last = _first(pts, "loss"), _last(pts, "loss")
    if first is not None and last is not None:
        parts.append(f"loss {first:.3f} -> {last:.3f}")
    val = _last(pts, "val_loss")
    if val is not None:
        parts.append(f"validation {val:.3f}")
    if s is not None and s.step_seconds_measured_median and s.step_seconds_predicted:
        measured, predicted = s.step_seconds_measured_median, s.step_seconds_predicted
        parts.append(
            f"step {measured:.4g} s measured vs {predicted:.4g} s predicted "
            f"({_error(measured, predicted)})"
        )
    if s is not None and s.tokens_per_second is not None:
        parts.append(f"{s.tokens_per_second:,.0f} tokens/s")
    return "; ".join(parts)


def _summary_table(r: RunLog) -> Raw:
    s, pts = r.summary, r.points
    if s is None:
        step_m, step_p = _last(pts, "step_seconds"), _last(pts, "predicted_step_seconds")
        tps_m, tps_p = _last(pts, "tokens_per_second"), _last(pts, "predicted_tokens_per_second")
        mem_m, mem_p, by = _last(pts, "measured_peak_bytes"), _last(pts, "predicted_peak_bytes"), ""
        where = "the last logged step (no summary.json yet)"
    else:
        step_m, step_p = s.step_seconds_measured_median, s.step_seconds_predicted
        tps_m, tps_p = s.tokens_per_second, s.predicted_tokens_per_second
        mem_m, mem_p = s.memory_measured_peak_bytes, s.memory_predicted_peak_bytes
        by = f" ({s.memory_measured_by})" if s.memory_measured_by else ""
        where = "summary.json: the median step after the first (warm-up) step"

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    def size(v: float | None) -> str:
        return "-" if v is None else format_bytes(v)

    mfu_m, mfu_p = _last(pts, "mfu"), _last(pts, "predicted_mfu")
    rows = [
        ("step time (s)", num(step_p, ".4g"), num(step_m, ".4g"), _error(step_m, step_p)),
        ("throughput (tokens/s)", num(tps_p, ",.0f"), num(tps_m, ",.0f"), _error(tps_m, tps_p)),
        ("MFU", num(mfu_p, ".1%"), num(mfu_m, ".1%"), _error(mfu_m, mfu_p)),
        ("peak memory" + by, size(mem_p), size(mem_m), _error(mem_m, mem_p)),
    ]
    if mfu_m is None and mfu_p is None:
        del rows[2]  # no catalog peak for the device (see the notes)
    return Raw(
        paragraph(f"Measured figures from {where}.", "muted")
        + table(("quantity", "predicted", "measured", "measured / predicted - 1"), rows)
    )


def _loss_table(r: RunLog) -> Raw:
    evals = [p for p in r.points if p.val_loss is not None]
    sources = sorted({k for p in evals for k in p.val_loss_by_source})
    rows = [
        (
            p.step,
            "-" if p.loss is None else f"{p.loss:.4f}",
            f"{p.val_loss:.4f}",
            *(
                f"{p.val_loss_by_source[k]:.4f}" if k in p.val_loss_by_source else "-"
                for k in sources
            ),
        )
        for p in evals
    ]
    if not rows:
        return paragraph("No validation point logged yet.", "muted")
    headers = ("step", "train loss", "validation loss", *(f"validation: {k}" for k in sources))
    return table(headers, rows)


def _comm_table(r: RunLog) -> Raw:
    """comm.json: the counted step's collectives per mesh axis and op, measured and predicted."""
    if r.comm is None:
        return paragraph("No comm.json in the run directory.", "muted")
    c = r.comm

    def num(v: float | None, fmt: str = ",.0f") -> str:
        return "-" if v is None else format(v, fmt)

    def verdict(row) -> str:
        if row.equal:
            return "equal"
        return "named difference" if row.explained else "differs"

    rows = [
        (
            row.axis,
            row.op,
            verdict(row) if row.axis != "trainer" else "not predicted",
            row.difference or "-",
            num(row.measured_bytes),
            num(row.predicted_bytes),
            num(row.count, "g"),
            num(row.predicted_count, "g"),
        )
        for row in c.rows
    ]
    where = f"Counted: {c.counted}." if c.counted else "Nothing was counted."
    headers = ("axis", "op", "verdict", "why they differ", "measured bytes", "predicted bytes")
    body = table((*headers, "calls", "predicted calls"), rows, numeric=4) if rows else ""
    notes = bullets(c.notes, "notes") if c.notes else ""
    return Raw(
        paragraph(where + " Bytes in the core's convention (core.parallel.timing.comm).", "muted")
        + body
        + notes
    )


def _config(r: RunLog) -> Raw:
    if not r.config:
        return paragraph("No config.json in the run directory.", "muted")
    rows = [(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in r.config.items()]
    return Raw(
        f"<details><summary>{len(rows)} fields of config.json</summary>"
        f"{table(('field', 'value'), rows, numeric=2)}</details>"
    )


def run_page(r: RunLog, charts: dict[str, Chart]) -> str:
    s = r.summary
    header = [
        Raw(f"<h1>Training run {esc(r.name)}</h1>"),
        Raw(f'<p class="question" id="question">{esc(r.run_dir)}</p>'),
        Raw(f'<p class="answer" id="answer">{esc(run_headline(r))}</p>'),
    ]
    events = (
        table(
            ("step", "event", "detail"), [(e.step, e.event, e.detail) for e in r.events], numeric=3
        )
        if r.events
        else paragraph("No events logged (rollbacks, skipped steps).", "muted")
    )
    if s is not None and s.reliability:
        survived = table(
            ("what the run survived", "count"), [(k, f"{v:g}") for k, v in s.reliability.items()]
        )
        events = Raw(events + survived)
    notes = [*r.notes, *(s.notes if s is not None else ())]
    sections = [
        ("summary", "Predicted vs measured", _summary_table(r)),
        (
            "loss",
            "Loss",
            figure(charts["loss"], "Validation points where the run evaluated.") + _loss_table(r),
        ),
        (
            "throughput",
            "Throughput",
            figure(
                charts["throughput"],
                "Predicted: tokens per step / the step time the core predicts for this device.",
            ),
        ),
        (
            "step-time",
            "Step time",
            figure(
                charts["step_time"],
                "Bars: the logged step's phases; lines: measured and predicted step.",
            ),
        ),
        (
            "memory",
            "Memory",
            figure(charts["memory"], "Predicted: the core's peak for one step of this model."),
        ),
        ("optimizer", "Optimizer", figure(charts["optimizer"], "As logged each step.")),
        ("comm", "Communication", _comm_table(r)),
        ("events", "Events", events),
        ("config", "Config", _config(r)),
        ("notes", "Notes", bullets(notes, "notes") if notes else paragraph("None.", "muted")),
    ]
    return document(f"trainbudget report: run {r.name}", header, sections)
