"""The question a plan report answers, and the core calls every part of the report shares:
the layout search, the step-time parts and the training time of a ranked plan. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.reliability import DEFAULT_RESTART_SECONDS
from trainbudget.core.parallel.search.plan_space import PlannerResult, Policy, RankedPlan
from trainbudget.core.parallel.search.planner_fast import DEFAULT_POLICY, search_fast
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.single.training_time import TrainingTime, training_time
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision
from trainbudget.report.roofline_data import MeasuredRoofline

MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "temporaries", "buffers")
"""The parts alive at the peak phase of the heaviest GPU (core.parallel.memory.gpu_peak)."""
STEP_PARTS = ("compute", "exposed_comm", "pipeline_bubble", "optimizer", "offload")


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
    framework: Framework = GENERIC
    """The training stack's gradient dtypes, reduction timing and buckets."""
    policy: Policy = DEFAULT_POLICY
    efficiency: Efficiency = DEFAULT_EFFICIENCY
    efficiency_source: str = "the defaults of core.step_time.Efficiency"
    causal: bool = True
    """The attention mask the step is timed with (a decoder's causal mask by default)."""
    count_causal: bool = False
    """Model FLOPs and MFU count only the unmasked query-key pairs (default: every pair)."""
    top: int = 5
    """Candidate layouts shown (the `top` fastest that fit)."""
    price_per_gpu_hour: float | None = None
    gpu_failure_rate_per_day: float
    checkpoint_write_bytes_per_second: float
    restart_seconds: float = DEFAULT_RESTART_SECONDS
    scaling_gpus: tuple[int, ...] = ()
    """GPU counts of the scaling curve; empty: the asked count x 2**k (scaling_data)."""
    measured: MeasuredRoofline | None = None
    """The device's measured roofline (a calibration file), drawn beside the datasheet one."""
    notes: tuple[str, ...] = ()
    """Assumptions the caller made (defaults it filled in); listed with the core's."""


def search(q: PlanQuestion, cluster: Cluster, top: int) -> PlannerResult:
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
        causal=q.causal,
        count_causal=q.count_causal,
        framework=q.framework,
    )


def step_parts(r: RankedPlan) -> tuple[dict[str, float], dict[str, float]]:
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
