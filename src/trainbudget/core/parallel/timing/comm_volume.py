"""The collectives the step model charges for one step of a plan, one row per collective:
category, kind, bytes per call, calls and group. Read off the `Communication` that
`comm_time.communication` builds for the step time (through `step_time.step_terms`), so the
bytes compared with a measured run are the very ones the step time is computed from: no second
formula.

Bytes follow core.parallel.timing.comm's convention (all-reduce the per-rank input, all-gather the
gathered output, reduce-scatter the per-rank input, all-to-all what each rank sends in total,
broadcast and send/recv the message). A collective's "count" is how many times the model
charges that buffer: ZeRO's gradient reduction is one call on the whole model's gradients,
wherever an engine cuts it into buckets or per-layer units.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.timing.comm_time import Communication


@dataclass(frozen=True, kw_only=True)
class PlannedCollective:
    category: str
    """comm_time's name: tp, pp, cp, ep, dp_grad_reduce, dp_replica_all_reduce, dp_param_gather."""
    kind: str
    """core.parallel.timing.comm.KINDS: all_reduce, all_gather, reduce_scatter, ..."""
    n_bytes: float
    """One call's buffer (the module docstring's convention)."""
    count: float
    """Calls charged per step."""
    group_size: int

    @property
    def total_bytes(self) -> float:
        return self.n_bytes * self.count


def planned_collectives(comm: Communication) -> tuple[PlannedCollective, ...]:
    """The collectives of one plan's step that run (a group of more than one rank, a buffer and
    at least one call), in the step model's order. `comm`: of one plan, not the grid's arrays."""
    return tuple(
        PlannedCollective(
            category=category,
            kind=t.kind,
            n_bytes=float(t.n_bytes),
            count=float(t.count),
            group_size=int(t.group_size),
        )
        for category, t in comm.collectives
        if t.group_size > 1 and t.n_bytes > 0 and t.count > 0
    )
