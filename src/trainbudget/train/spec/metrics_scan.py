"""metrics.jsonl split into its whole records and its damaged lines, wherever they are.
The one rule for what a complete record is, shared by the reader (`train.spec.run_files`, for plot
and report) and the resume that heals the file (`train.observe.metrics.resume_metrics`). Pure: json
only."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from trainbudget.core.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class MetricsScan:
    """A metrics.jsonl split into its whole records and its damaged lines."""

    records: tuple[tuple[int, str, dict], ...]
    """(line number, the line, its record) of every whole record, in file order: a garbage line
    in the middle costs that line only, not the records logged after it."""
    rest: tuple[str, ...]
    """Every damaged line, as it is (empty when nothing is damaged)."""
    damage: SpecError | None
    """What is wrong with the first damaged line (it names file:line), or None."""


def scan_metrics(text: str, path: str | os.PathLike) -> MetricsScan:
    """Split a metrics.jsonl's text into its records and its damaged lines: those that are not
    a JSON object with an integer step >= 0, and a last line without its newline (the writer
    ends every record with one, so a line without it is a write that did not finish, even
    where it happens to parse: a number cut short is still a number). Blank lines are
    skipped."""
    lines = text.split("\n")
    ended = lines[-1] == ""  # the text ends with a newline (or is empty)
    if ended:
        lines.pop()
    records, rest, damage = [], [], None
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        cut = not ended and index == len(lines) - 1
        found = _record(f"{path}:{index + 1}", line, cut=cut)
        if isinstance(found, SpecError):
            rest.append(line)
            damage = damage or found
        else:
            records.append((index + 1, line, found))
    return MetricsScan(records=tuple(records), rest=tuple(rest), damage=damage)


def _record(where: str, line: str, *, cut: bool) -> dict | SpecError:
    """The line's record, or the error that says why it is not one (`cut`: its newline is
    missing)."""
    if cut:
        return SpecError(
            where, _clip(line), "is cut short (no newline at its end: a write that did not finish)"
        )
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return SpecError(where, _clip(line), f"is not JSON ({err.msg}, column {err.colno})")
    if not isinstance(record, dict):
        return SpecError(where, _clip(line), "is not a JSON object")
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return SpecError(f"{where}: step", step, "must be a non-negative integer")
    return record


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
