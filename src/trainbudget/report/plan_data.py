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

from trainbudget.core.cluster import Cluster
from trainbudget.core.errors import SpecError
from trainbudget.core.memory import checkpoint_bytes
from trainbudget.core.model_spec import ModelSpec
from trainbudget.core.params import count_params
from trainbudget.core.planner import PlannerResult, Policy, RankedPlan, why_best
from trainbudget.core.planner_fast import search_fast
from trainbudget.core.precision import Optimizer, Precision
from trainbudget.core.reliability import DEFAULT_RESTART_SECONDS
from trainbudget.core.step_time import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.training_time import TrainingTime, training_time
from trainbudget.report.plan_assumptions import plan_assumptions
from trainbudget.report.roofline_data import MeasuredRoofline, Roofline, roofline
from trainbudget.report.failures_data import Failures, failures

MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "buffers")
STEP_PARTS = ("compute", "exposed_comm", "pipeline_bubble", "optimizer", "offload")
SCALING_POWERS = range(-4, 5)
"""Default scaling curve: the asked GPU count times 2**k for these k."""


@dataclass(frozen=True, kw_only=True)
class PlanQuestion:
    """Train `model` on `tokens` tokens on `cluster`: how long, at what cost, in which layout."""

    model: ModelSpec
    cluster: Cluster
    tokens: float
    global_batch: int
    """Sequences per optimizer step."""
    seq_len: int
    precision: Precision
    optimizer: Optimizer
    policy: Policy = Policy()
    efficiency: Efficiency = DEFAULT_EFFICIENCY
    efficiency_source: str = "the defaults of core.step_time.Efficiency"
    top: int = 5
    """Candidate layouts shown (the `top` fastest that fit)."""
    price_per_gpu_hour: float | None = None
    gpu_failure_rate_per_day: float
    checkpoint_write_bytes_per_second: float
    restart_seconds: float = DEFAULT_RESTART_SECONDS
    scaling_gpus: tuple[int, ...] = ()
    """GPU counts of the scaling curve; empty: the asked count x 2**k, k in SCALING_POWERS."""
    measured: MeasuredRoofline | None = None
    """The device's measured roofline (a calibration file), drawn beside the datasheet one."""
    notes: tuple[str, ...] = ()
    """Assumptions the caller made (defaults it filled in); listed with the core's."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One ranked layout: memory on its most loaded GPU and its step time, by part."""

    rank: int
    plan: str
    fits: bool
    memory_bytes: dict[str, float]
    """MEMORY_PARTS on the peak stage; they sum to total_memory_bytes."""
    total_memory_bytes: float
    peak_stage: str
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
class ScalingPoint:
    """The fastest fitting layout at one GPU count, same model, tokens and global batch."""

    n_gpus: int
    plan: str
    step_seconds: float
    tokens_per_second: float
    mfu: float
    train_days: float
    gpu_hours: float
    cost: float | None
    step_seconds_by_part: dict[str, float]
    scaling_efficiency: float
    """GPU-hours at the smallest count shown / GPU-hours here: 1 = a linear speed-up."""


@dataclass(frozen=True, kw_only=True)
class PlanReport:
    model: str
    n_params: int
    tokens: float
    n_gpus: int
    gpu: str
    gpu_description: str
    gpu_memory_bytes: float
    memory_headroom: float
    global_batch: int
    seq_len: int
    precision: str
    optimizer: str
    price_per_gpu_hour: float | None
    answer: Answer
    candidates: tuple[Candidate, ...]
    scaling: tuple[ScalingPoint, ...]
    scaling_skipped: tuple[str, ...]
    """GPU counts of the curve with no fitting layout, and why."""
    roofline: Roofline
    failures: Failures
    assumptions: tuple[str, ...]


def _search(q: PlanQuestion, cluster: Cluster, top: int) -> PlannerResult:
    return search_fast(
        q.model,
        cluster,
        global_batch=q.global_batch,
        seq_len=q.seq_len,
        precision=q.precision,
        optimizer=q.optimizer,
        policy=q.policy,
        top=top,
        efficiency=q.efficiency,
    )


def _step_parts(r: RankedPlan) -> tuple[dict[str, float], dict[str, float]]:
    """(STEP_PARTS, exposed communication per axis) of a plan's step-time breakdown."""
    b = r.time.breakdown_seconds
    comm = {k: v for k, v in b.items() if k.endswith("_comm")}
    parts = {
        "compute": b.get("compute", 0.0),
        "exposed_comm": sum(comm.values()),
        "pipeline_bubble": b.get("pipeline_bubble", 0.0),
        "optimizer": b.get("optimizer", 0.0),
        "offload": b.get("offload", 0.0),
    }
    return parts, comm


def _candidate(rank: int, r: RankedPlan) -> Candidate:
    m = r.memory
    parts, comm = _step_parts(r)
    return Candidate(
        rank=rank,
        plan=r.plan.describe(),
        fits=r.fits,
        memory_bytes={
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes,
            "buffers": m.buffers_bytes,
        },
        total_memory_bytes=m.total_bytes,
        peak_stage=m.stage,
        step_seconds=r.time.step_seconds,
        step_seconds_by_part=parts,
        exposed_comm_seconds=comm,
        tokens_per_second=r.time.tokens_per_second,
        mfu=r.time.mfu,
        hfu=r.time.hfu,
    )


def train_time(r: RankedPlan, tokens: float, price: float | None) -> TrainingTime:
    """The core's FLOPs / (GPUs x peak x MFU) at the plan's predicted MFU: the same seconds as
    tokens / the plan's tokens per second (what `trainbudget plan` prints), with GPU-hours and
    cost from the same dataclass."""
    t = r.time
    return training_time(
        train_flops=tokens * t.model_flops_per_step / t.tokens_per_step,
        n_gpus=t.n_gpus,
        peak_flops_per_second=t.peak_flops_per_second,
        mfu=t.mfu,
        price_per_gpu_hour=price,
    )


def scaling_counts(q: PlanQuestion) -> tuple[int, ...]:
    if q.scaling_gpus:
        return tuple(sorted(set(q.scaling_gpus)))
    n, per_node = q.cluster.n_gpus, q.cluster.gpus_per_node
    counts = set()
    for k in SCALING_POWERS:
        c = n * 2**k
        # whole GPUs; beyond one node, whole nodes (the Cluster's rule)
        if c >= 1 and c == int(c) and (c <= per_node or c % per_node == 0):
            counts.add(int(c))
    return tuple(sorted(counts))


def _scaling(
    q: PlanQuestion, asked: PlannerResult
) -> tuple[tuple[ScalingPoint, ...], tuple[str, ...]]:
    rows: list[tuple[int, RankedPlan, TrainingTime]] = []
    skipped: list[str] = []
    for n in scaling_counts(q):
        if n == q.cluster.n_gpus:
            result = asked  # the same numbers as the headline
        else:
            try:
                cluster = dataclasses.replace(q.cluster, n_gpus=n)
                result = _search(q, cluster, top=1)
            except SpecError as err:
                skipped.append(f"{n} GPUs: {err.rule}")
                continue
        best = result.plans[0]
        if not best.fits:
            skipped.append(f"{n} GPUs: no layout fits in memory")
            continue
        rows.append((n, best, train_time(best, q.tokens, q.price_per_gpu_hour)))
    points = []
    for n, best, t in rows:
        parts, _ = _step_parts(best)
        points.append(
            ScalingPoint(
                n_gpus=n,
                plan=best.plan.describe(),
                step_seconds=best.time.step_seconds,
                tokens_per_second=best.time.tokens_per_second,
                mfu=best.time.mfu,
                train_days=t.days,
                gpu_hours=t.gpu_hours,
                cost=t.cost,
                step_seconds_by_part=parts,
                scaling_efficiency=rows[0][2].gpu_hours / t.gpu_hours,
            )
        )
    return tuple(points), tuple(skipped)


def plan_report(q: PlanQuestion) -> PlanReport:
    """Search the layouts, answer the question, and gather every section's numbers."""
    if q.tokens <= 0:
        raise SpecError("tokens", q.tokens, "must be positive: the report answers how long")
    result = _search(q, q.cluster, top=q.top)
    best = result.plans[0]
    t = train_time(best, q.tokens, q.price_per_gpu_hour)
    answer = Answer(
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
    scaling, skipped = _scaling(q, result)
    hw = q.cluster.hardware
    return PlanReport(
        model=q.model.name,
        n_params=count_params(q.model).total,
        tokens=q.tokens,
        n_gpus=q.cluster.n_gpus,
        gpu=hw.name,
        gpu_description=hw.description,
        gpu_memory_bytes=hw.memory_bytes,
        memory_headroom=q.policy.memory_headroom,
        global_batch=q.global_batch,
        seq_len=q.seq_len,
        precision=q.precision.name,
        optimizer=q.optimizer.name,
        price_per_gpu_hour=q.price_per_gpu_hour,
        answer=answer,
        candidates=tuple(_candidate(i, r) for i, r in enumerate(result.plans, 1)),
        scaling=scaling,
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
        failures=failures(
            n_gpus=q.cluster.n_gpus,
            gpu_failure_rate_per_day=q.gpu_failure_rate_per_day,
            checkpoint_bytes=checkpoint_bytes(
                q.model, precision=q.precision.name, optimizer=q.optimizer.name
            ),
            write_bytes_per_second=q.checkpoint_write_bytes_per_second,
            restart_seconds=q.restart_seconds,
            useful_seconds=t.seconds,
        ),
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
