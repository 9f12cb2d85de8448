"""Memory per GPU of a plan: the peak of `gpu_peak`'s phase model on each pipeline stage, the
heaviest stage's being the plan's. The one answer `estimate`, `plan`, `report`, the planner's
`fits` (`peak_bytes` on the grid) and the trainer (`rank_memory`, one rank at a time) give.

`PlanMemory` is that answer for one plan: the peak phase's parts (what is alive then), the
model state at rest, what is offloaded, and every phase's total; one total, `total_bytes`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import PlanNumbers, as_numbers, in_chunks
from trainbudget.core.parallel.memory.gpu_peak import GpuPeak, stage_peaks
from trainbudget.core.parallel.memory.parallel_memory import ModelState
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.peak_memory import PhaseMemory
from trainbudget.core.spec.engines import get_engine
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


@dataclass(frozen=True, kw_only=True)
class PlanMemory(PhaseMemory):
    """The peak of one GPU of a plan: its peak phase (`phase`) with the parts alive then --
    temporaries: the loss backward's fp32 gradients, a block's backward gradients or the
    update's scratch; buffers: the engine's buckets or gathered parameters, the pipeline's
    receive buffers, the framework's runtime overhead -- and where and what else."""

    stage: str
    """The pipeline stage whose GPU needs the most: 'first', 'middle' or 'last' ('only' when
    pp = 1)."""
    state: ModelState
    """Weights, gradients, fp32 masters and optimizer state at rest (sharded, on the GPU)."""
    host_bytes: float
    """Offloaded to CPU or NVMe (not on the GPU)."""
    phases_bytes: tuple[tuple[str, float], ...]
    """Every phase's total on that GPU (phases that do not occur for the plan are left out)."""


def _answer(peak: GpuPeak) -> PlanMemory:
    p = peak.peak
    return PlanMemory(
        stage=peak.stage,
        phase=p.phase,
        params_bytes=p.params_bytes,
        grads_bytes=p.grads_bytes,
        optimizer_bytes=p.optimizer_bytes,
        activations_bytes=p.activations_bytes,
        temporaries_bytes=p.temporaries_bytes,
        buffers_bytes=p.buffers_bytes,
        state=peak.state,
        host_bytes=peak.host_bytes,
        phases_bytes=_distinct(peak),
    )


def _distinct(peak: GpuPeak) -> tuple[tuple[str, float], ...]:
    """Each phase that occurs with its total; of the backward starts that hold the same
    bytes (one stage, one micro-batch: they differ only in gradients), the first."""
    out, starts = [], set()
    for ph in peak.phases:
        total = ph.total_bytes
        if not total:
            continue
        if ph.phase.startswith("backward start"):
            if total in starts:
                continue
            starts.add(total)
        out.append((ph.phase, total))
    return tuple(out)


def stage_names(pp: int) -> tuple[str, ...]:
    """The stages whose peaks are told apart: 'only' (pp = 1), or 'first', 'middle' (pp > 2:
    the second stage's schedule with the largest middle stage's layers) and 'last'."""
    if pp == 1:
        return ("only",)
    return ("first", "middle", "last") if pp > 2 else ("first", "last")


def stage_memories(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
) -> dict[str, PlanMemory]:
    """Each pipeline stage's peak on one of its GPUs (`stage_names`)."""
    share = optimizer_share(spec, plan, framework)
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    names = stage_names(plan.pp)
    stages = stage_peaks(spec, PlanNumbers.of(plan), stages=names, optimizer_share=share, **kw)
    return {name: _answer(peak) for name, peak in stages.items()}


def plan_memory(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
) -> PlanMemory:
    """The peak of the most loaded GPU of `plan` (the first of the heaviest stages)."""
    stages = stage_memories(
        spec, plan, seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework
    )
    return max(stages.values(), key=lambda m: m.total_bytes)


def peak_bytes(
    spec: ModelSpec,
    plans: Plan | PlanNumbers,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
    xp: Ops = SCALAR,
) -> Any:
    """`plan_memory(...).total_bytes` of one plan or of every plan of a grid (`xp`): the same
    phases, the largest over the stages. A grid is taken in three parts -- its plans without
    a pipeline ('only'), the first and last stages of the others, the middle stages of those
    with more than two -- so that each part's stage is a number and no stage is computed for a
    plan that has none."""
    L = as_numbers(plans)
    share = optimizer_share(spec, L, framework, xp)
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    if not xp.is_array:
        names = stage_names(L.pp)
        stages = stage_peaks(spec, L, stages=names, optimizer_share=share, **kw)
        return max(peak.total_bytes for peak in stages.values())
    import numpy as np

    if np.ndim(L.dp) > 1:
        return _product_peak_bytes(spec, L, share, kw, xp)
    out = np.zeros(len(L))
    share = np.broadcast_to(share, out.shape)

    def part(rows, names):
        def most(sub, sub_share):
            peaks = stage_peaks(spec, sub, stages=names, optimizer_share=sub_share, xp=xp, **kw)
            totals = [np.broadcast_to(p.total_bytes, (len(sub),)) for p in peaks.values()]
            return functools.reduce(np.maximum, totals)

        out[rows] = np.maximum(out[rows], in_chunks(most, L.take(rows), share[rows]))

    for rows, names in (
        (np.flatnonzero(L.pp == 1), ("only",)),
        (np.flatnonzero(L.pp > 1), ("first", "last")),
        (np.flatnonzero(L.pp > 2), ("middle",)),
    ):
        if len(rows):
            part(rows, names)
    return out


def _product_peak_bytes(spec, L, share, kw, xp):
    """`peak_bytes` of a product grid (`search.product_grid`): the pipeline degree is a field
    of its rows (the last axis), so the grid is taken in three disjoint sets of rows -- no
    pipeline, two stages, more -- each with its stages, and each a slice where the rows are in
    pipeline order, as the product lays them."""
    import numpy as np

    shape = np.broadcast_shapes(*(np.shape(v) for v in vars(L).values()))
    out = np.empty(shape)
    pp = np.ravel(np.broadcast_to(L.pp, (1,) * (len(shape) - 1) + shape[-1:]))
    for rows, names in (
        (_rows(pp == 1), ("only",)),
        (_rows(pp == 2), ("first", "last")),
        (_rows(pp > 2), ("first", "middle", "last")),
    ):
        if rows is None:
            continue
        part_share = share[..., rows] if np.ndim(share) and share.shape[-1] > 1 else share
        part = L.take_rows(rows)
        peaks = stage_peaks(spec, part, stages=names, optimizer_share=part_share, xp=xp, **kw)
        out[..., rows] = functools.reduce(np.maximum, [p.total_bytes for p in peaks.values()])
    return out


def _rows(mask):
    """The rows where `mask` holds: a slice where they are contiguous, else their indices;
    None where there are none."""
    import numpy as np

    rows = np.flatnonzero(mask)
    if not len(rows):
        return None
    if rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def optimizer_share(
    spec: ModelSpec, plan: Plan | PlanNumbers, framework: Framework, xp: Ops = SCALAR
) -> Any:
    """The heaviest rank's optimizer state as a multiple of the even share, where the
    framework's engine shards it by whole tensors (`Engine.whole_tensor_shards`); 1 elsewhere.
    Numbers, or an array over a grid's plans."""
    if not any(get_engine(name).whole_tensor_shards for name in framework.engines):
        return 1.0
    from trainbudget.core.parallel.memory.rank_peak import heaviest_share

    L = as_numbers(plan)
    if not xp.is_array:
        return heaviest_share(spec, L.tp, L.shard_dp * L.cp)
    import numpy as np

    tp, shard = np.broadcast_arrays(L.tp, L.shard_dp * L.cp)  # a list or a product grid
    out = np.ones(tp.shape)
    for t, s in set(zip(tp.ravel().tolist(), shard.ravel().tolist(), strict=True)):
        out[(tp == t) & (shard == s)] = heaviest_share(spec, t, s)
    return out
