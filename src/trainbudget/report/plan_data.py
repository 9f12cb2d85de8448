"""The numbers behind a plan report, gathered from the core. Pure: no matplotlib, no torch.

Every figure comes from a core function: the ranked layouts from `planner_fast.search_fast`
(whose top plans are re-evaluated by the scalar `planner.evaluate`, so memory and step-time
breakdowns are the reference ones), training time and cost from `training_time`, failures from
`reliability`, the roofline from `roofline_data`. This module only groups: exposed
communication is the sum of the per-axis exposed terms `step_time` returns.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.fits import allocated_limit_bytes, n_communicators, rule_for
from trainbudget.core.parallel.search.planner import PlannerResult, RankedPlan, why_best
from trainbudget.core.single.memory import checkpoint_bytes
from trainbudget.core.single.params import count_params
from trainbudget.core.single.training_time import TrainingTime
from trainbudget.report.failures_data import Failures, failures
from trainbudget.report.plan_assumptions import plan_assumptions
from trainbudget.report.plan_question import (
    MEMORY_PARTS,
    STEP_PARTS,
    PlanQuestion,
    search,
    step_parts,
    train_time,
)
from trainbudget.report.roofline_data import Roofline, roofline
from trainbudget.report.scaling_data import ScalingPoint, scaling

__all__ = ["MEMORY_PARTS", "STEP_PARTS", "PlanQuestion", "PlanReport", "as_json", "plan_report"]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One ranked layout: memory on its most loaded GPU and its step time, by part."""

    rank: int
    plan: str
    fits: bool
    memory_bytes: dict[str, float]
    """MEMORY_PARTS on the peak stage at its peak phase; they sum to total_memory_bytes."""
    total_memory_bytes: float
    peak_stage: str
    peak_phase: str
    stage_memory_bytes: dict[str, float]
    """Each pipeline stage's peak (the heaviest is total_memory_bytes)."""
    stage_peak_phases: dict[str, str]
    """The phase at which each stage's GPU peaks."""
    step_seconds: float
    step_seconds_by_part: dict[str, float]
    """STEP_PARTS; they sum to step_seconds."""
    exposed_comm_seconds: dict[str, float]
    """Exposed communication per axis (tp_comm, dp_comm, ...)."""
    tokens_per_second: float
    mfu: float
    hfu: float


@dataclass(frozen=True, kw_only=True)
class Answer:
    """The fastest layout that fits, and what training the tokens on it takes."""

    plan: str
    fits: bool
    step_seconds: float
    tokens_per_second: float
    mfu: float
    train_seconds: float
    """Failure-free; Failures.wall_clock_days adds restarts and checkpoints."""
    train_days: float
    gpu_hours: float
    cost: float | None
    """gpu_hours x price_per_gpu_hour; None without a price."""
    why: str
    evaluated: int
    n_fitting: int


@dataclass(frozen=True, kw_only=True)
class PlanReport:
    model: str
    n_params: int
    tokens: float
    n_gpus: int
    gpu: str
    gpu_description: str
    gpu_memory_bytes: float
    """The datasheet's memory, the GPU's nominal size."""
    device_memory_bytes: float
    """What the device gives the process (Hardware.usable_memory_bytes): the fits capacity."""
    memory_limit_bytes: float
    """The largest allocated peak the fits rule lets the best plan have."""
    fits_rule: str
    """The fits rule in words (core.parallel.fits.FitsRule.describe)."""
    global_batch: int
    seq_len: int
    precision: str
    optimizer: str
    framework: str
    price_per_gpu_hour: float | None
    answer: Answer
    candidates: tuple[Candidate, ...]
    scaling: tuple[ScalingPoint, ...]
    scaling_skipped: tuple[str, ...]
    """GPU counts of the curve with no fitting layout, and why."""
    roofline: Roofline
    failures: Failures | None
    failures_problem: str
    """Why `failures` is None (failures so frequent the job never finishes); else ''."""
    assumptions: tuple[str, ...]


def _candidate(rank: int, r: RankedPlan) -> Candidate:
    m = r.memory
    parts, comm = step_parts(r)
    return Candidate(
        rank=rank,
        plan=r.plan.describe(),
        fits=r.fits,
        memory_bytes={
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes,
            "temporaries": m.temporaries_bytes,
            "buffers": m.buffers_bytes,
        },
        total_memory_bytes=m.total_bytes,
        peak_stage=m.stage,
        peak_phase=m.phase,
        stage_memory_bytes=dict(r.stage_memory_bytes),
        stage_peak_phases=dict(r.stage_peak_phases),
        step_seconds=r.time.step_seconds,
        step_seconds_by_part=parts,
        exposed_comm_seconds=comm,
        tokens_per_second=r.time.tokens_per_second,
        mfu=r.time.mfu,
        hfu=r.time.hfu,
    )


def _answer(result: PlannerResult, t: TrainingTime) -> Answer:
    best = result.plans[0]
    return Answer(
        plan=best.plan.describe(),
        fits=best.fits,
        step_seconds=best.time.step_seconds,
        tokens_per_second=best.time.tokens_per_second,
        mfu=best.time.mfu,
        train_seconds=t.seconds,
        train_days=t.days,
        gpu_hours=t.gpu_hours,
        cost=t.cost,
        why=why_best(result),
        evaluated=result.evaluated,
        n_fitting=result.n_fitting,
    )


def _failures(q: PlanQuestion, useful_seconds: float) -> tuple[Failures | None, str]:
    """(the job's failure figures, '') or (None, why not): the rest of the page still answers
    the question when failures are so frequent that the job never finishes."""
    try:
        job = failures(
            n_gpus=q.cluster.n_gpus,
            gpu_failure_rate_per_day=q.gpu_failure_rate_per_day,
            checkpoint_bytes=checkpoint_bytes(
                q.model, precision=q.precision.name, optimizer=q.optimizer.name
            ),
            write_bytes_per_second=q.checkpoint_write_bytes_per_second,
            restart_seconds=q.restart_seconds,
            useful_seconds=useful_seconds,
        )
    except SpecError as err:
        return None, str(err)
    return job, ""


def plan_report(q: PlanQuestion) -> PlanReport:
    """Search the layouts, answer the question, and gather every section's numbers."""
    if q.tokens <= 0:
        raise SpecError("tokens", q.tokens, "must be positive: the report answers how long")
    result = search(q, q.cluster, top=q.top)
    best = result.plans[0]
    t = train_time(best, q.tokens, q.price_per_gpu_hour)
    points, skipped = scaling(q, result)
    job_failures, problem = _failures(q, t.seconds)
    hw = q.cluster.hardware
    rule = rule_for(q.policy.memory_headroom, q.framework.name)
    comms = n_communicators(best.plan.dp, best.plan.tp, best.plan.pp, best.plan.cp)
    return PlanReport(
        model=q.model.name,
        n_params=count_params(q.model).total,
        tokens=q.tokens,
        n_gpus=q.cluster.n_gpus,
        gpu=hw.name,
        gpu_description=hw.description,
        gpu_memory_bytes=hw.memory_bytes,
        device_memory_bytes=hw.usable_memory_bytes,
        memory_limit_bytes=allocated_limit_bytes(hw.usable_memory_bytes, rule, comms),
        fits_rule=rule.describe(),
        global_batch=q.global_batch,
        seq_len=q.seq_len,
        precision=q.precision.name,
        optimizer=q.optimizer.name,
        framework=q.framework.name,
        price_per_gpu_hour=q.price_per_gpu_hour,
        answer=_answer(result, t),
        candidates=tuple(_candidate(i, r) for i, r in enumerate(result.plans, 1)),
        scaling=points,
        scaling_skipped=skipped,
        roofline=roofline(
            q.model,
            best.plan,
            hw,
            seq_len=q.seq_len,
            precision=q.precision,
            efficiency=q.efficiency,
            measured=q.measured,
        ),
        failures=job_failures,
        failures_problem=problem,
        assumptions=plan_assumptions(q, best),
    )


def as_json(obj: object) -> object:
    """A report dataclass as JSON-ready data; non-finite floats become None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: as_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): as_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
