"""RUN_DIR/comm.json: the collectives counted on the real run (train.observe.comm_count) beside
those the core's step model charges for the same plan (core.parallel.timing.comm_volume, from the
budget), per mesh axis and op, with a named reason wherever they differ. Pure: no torch.

Rows: axis, op, measured_bytes, predicted_bytes, count (calls measured), predicted_count (the
calls the core charges), explained_bytes (predicted plus the named differences), equal
(measured == predicted, to the byte), explained (measured == explained_bytes), difference (the
reasons, empty when bytes and calls agree). Bytes in the core's convention
(core.parallel.timing.comm).

The named differences (what PyTorch's engines do beyond the core's ZeRO model, each computed
from the plan and the model, never from the measurement) are `comm_differences`'.

To add an axis: map the core's category to the mesh axis in `comm_differences._AXES` (tp, pp
and ep are there already, under those names), and, where its engine moves other bytes or calls
than the core charges, add the rule to `comm_differences.differences` / `_CALLS` with its
reason. One category
on two groups -- MoE's expert gradients, "dp_grad_reduce" on the dp / ep expert-data-parallel
group beside the dense weights' dp group -- is told apart by `PlannedCollective.group_size` in
`predicted_rows`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trainbudget.core.parallel.timing.comm_volume import PlannedCollective
from trainbudget.train.observe.comm_differences import (
    RunFacts,
    differences,
    mesh_axis,
)
from trainbudget.train.spec.strategy import get_strategy

TRAINER_AXIS = "trainer"  # train.observe.comm_count's name for the trainer's own collectives
EP_REPLICAS = "ep_replicas"  # train.observe.comm_count's name for the expert weights' replica group
BYTE = 0.5
"""Measured bytes are whole; the core's per-rank shares (bytes / group) may not be: equal means
within half a byte."""

TRAINER = "the trainer's own (loss-and-flags packet, gradient norm): not in the core's step"


@dataclass(frozen=True, kw_only=True)
class CommRow:
    axis: str
    op: str
    measured_bytes: int | None
    """None: nothing was counted (the run did not reach the counted step)."""
    predicted_bytes: float
    count: int | None
    predicted_count: float
    explained_bytes: float
    difference: str

    @property
    def equal(self) -> bool:
        return (
            self.measured_bytes is not None
            and abs(self.measured_bytes - self.predicted_bytes) < BYTE
        )

    @property
    def explained(self) -> bool:
        return (
            self.measured_bytes is not None
            and abs(self.measured_bytes - self.explained_bytes) < BYTE
        )

    def as_dict(self) -> dict:
        out = {**asdict(self), "equal": self.equal, "explained": self.explained}
        for key in ("predicted_bytes", "predicted_count", "explained_bytes"):
            out[key] = round(out[key], 3)  # the core's shares; 0.001 byte is far inside BYTE
        return out


def predicted_rows(
    planned: tuple[PlannedCollective, ...], mesh: dict[str, int]
) -> dict[tuple[str, str], tuple[float, float]]:
    """(axis, op) -> (bytes, calls) the core charges per step."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for c in planned:
        axis = mesh_axis(c.category, mesh)
        if axis == "dp" and c.group_size < mesh.get("dp", 1):  # experts: dp / ep replicas
            axis = EP_REPLICAS
        key = (axis, c.kind)
        n_bytes, count = out.get(key, (0.0, 0.0))
        out[key] = (n_bytes + c.total_bytes, count + c.count)
    return out


_CALLS = {
    ("ddp", "all_reduce"): "DDP's gradient buckets",
    ("zero1", "all_reduce"): "DDP's gradient buckets",
    ("zero1", "broadcast"): "one broadcast per parameter, from the rank that updated it",
    ("fsdp2", "all_gather"): "FSDP2 gathers per fully_shard unit (each block, the root)",
    ("fsdp2", "reduce_scatter"): "FSDP2 reduces per fully_shard unit",
    ("fsdp2", "all_reduce"): "FSDP2 reduces per fully_shard unit",
}
"""Why an engine makes more calls than the core charges (the same bytes)."""


def _calls_reason(strategy: str, op: str, count: int, predicted: float) -> str:
    engine = "fsdp2" if get_strategy(strategy).fsdp2 else strategy
    why = _CALLS.get((engine, op), "the engine's own split")
    return f"calls: {why}: the same bytes in {count} calls, the core charges {predicted:g}"


def compare(
    measured: dict[tuple[str, str], tuple[int, int]] | None,
    planned: tuple[PlannedCollective, ...],
    facts: RunFacts,
) -> list[CommRow]:
    """One row per (axis, op) measured or predicted. `measured`: (axis, op) -> (bytes, calls)
    of the counted step (train.observe.comm_count.tally); None when no step was counted."""
    predicted = predicted_rows(planned, facts.mesh)
    adjustments = differences(predicted, facts)
    keys = sorted(set(predicted) | set(measured or {}) | {(a.axis, a.op) for a in adjustments})
    rows = []
    for axis, op in keys:
        p_bytes, p_count = predicted.get((axis, op), (0.0, 0.0))
        mine = [a for a in adjustments if (a.axis, a.op) == (axis, op)]
        explained = p_bytes + sum(a.n_bytes for a in mine)
        reasons = list(dict.fromkeys(a.reason for a in mine))
        m_bytes, m_count = (measured or {}).get((axis, op), (0, 0))
        if axis == TRAINER_AXIS:
            reasons.append(TRAINER)
        elif measured is not None and m_count and p_count and m_count != p_count:
            reasons.append(_calls_reason(facts.strategy, op, m_count, p_count))
        rows.append(
            CommRow(
                axis=axis,
                op=op,
                measured_bytes=None if measured is None else m_bytes,
                predicted_bytes=p_bytes,
                count=None if measured is None else m_count,
                predicted_count=p_count,
                explained_bytes=explained,
                difference="; ".join(reasons),
            )
        )
    return rows


def comm_summary(rows: list[CommRow]) -> dict:
    """summary.json's part: bytes per axis, measured and predicted, and the verdicts."""
    per_axis: dict[str, dict[str, float | None]] = {}
    for r in rows:
        entry = per_axis.setdefault(r.axis, {"measured": 0, "predicted": 0.0})
        entry["predicted"] += r.predicted_bytes
        if r.measured_bytes is None:
            entry["measured"] = None
        elif entry["measured"] is not None:
            entry["measured"] += r.measured_bytes
    model = [r for r in rows if r.axis != TRAINER_AXIS]
    counted = bool(rows) and all(r.measured_bytes is not None for r in rows)
    return {
        "bytes_per_axis": per_axis,
        "all_equal": counted and all(r.equal for r in model) if rows else None,
        "all_explained": counted and all(r.explained for r in model) if rows else None,
    }


COUNTED = (
    "the collectives of step {step} of this process (its first two hold start-up work), "
    "counted whole on rank 0"
)


def comm_document(
    measured: dict[tuple[str, str], tuple[int, int]] | None,
    planned: tuple[PlannedCollective, ...],
    facts: RunFacts,
    *,
    plan: str,
    counted_step: int | None,
    same_on_every_rank: bool,
) -> dict:
    """comm.json: the rows (`compare`), their summary and what was counted. Alone (no mesh):
    no rows -- one process has no collectives."""
    rows = compare(measured if facts.mesh else None, planned, facts) if facts.mesh else []
    notes = [] if facts.mesh else ["one process: no collectives, no rows"]
    if facts.mesh and measured is None:
        notes.append(
            "not measured: the run did not reach the counted step, or ran under torch.compile "
            "(the counting dispatch mode would break its graph)"
        )
    if not same_on_every_rank:
        notes.append("the ranks counted different collectives: rank 0's are shown")
    return {
        "plan": plan,
        "strategy": facts.strategy,
        "mesh": facts.mesh,
        "counted": COUNTED.format(step=counted_step) if measured is not None else None,
        "same_on_every_rank": same_on_every_rank,
        "rows": [r.as_dict() for r in rows],
        "summary": comm_summary(rows),
        "notes": notes,
    }
