"""What `trainbudget.estimate` and `trainbudget.plan` return: frozen dataclasses around the
core's own objects (the Plan, its PlanMemory, its StepTime), whose `to_json()` is the very
document `trainbudget estimate --json` / `plan --json` prints for the same question.

The JSON is built once, by the function the CLI calls too, and kept as text: a returned object
cannot drift from what the terminal shows, and `to_json()` hands out a fresh copy each time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from trainbudget.core.errors import SpecError

if TYPE_CHECKING:  # annotations only: a one-GPU answer loads no step-time or planner module
    from trainbudget.core.parallel.cluster import Cluster
    from trainbudget.core.parallel.fits import FitsRule
    from trainbudget.core.parallel.plan import Plan
    from trainbudget.core.parallel.search.plan_space import RankedPlan
    from trainbudget.core.parallel.timing.step_time import StepTime
    from trainbudget.core.single.estimate import Estimate as SingleEstimate
    from trainbudget.core.spec.defaults import Chosen
    from trainbudget.core.spec.frameworks import Framework
    from trainbudget.core.spec.model_spec import ModelSpec
    from trainbudget.emit.job import Job


@dataclass(frozen=True, kw_only=True)
class Memory:
    """Memory per GPU of the answer: the most loaded GPU's peak against the GPU's capacity.

    `breakdown` is the core's object the figures come from: a PlanMemory (a planned or given
    layout, at its peak phase) or the one-device MemoryBreakdown."""

    peak_bytes: float
    capacity_bytes: float
    """The memory the device gives the process (Hardware.usable_memory_bytes), the capacity
    the fits rule compares against; the datasheet's figure is the hardware row's."""
    rule: FitsRule
    """The fits rule: a plan fits when peak_bytes <= usable_bytes (core.parallel.fits)."""
    communicators: int
    """NCCL communicators a rank holds: their buffers count against the device rule."""
    parts_bytes: dict[str, float]
    """The peak's parts by name (params, grads, optimizer, activations, ...): they sum to it."""
    stages_bytes: dict[str, float]
    """Peak bytes of each pipeline stage's GPU ('only' when there is one stage); {} one-GPU."""
    phase: str | None
    """The phase of the step at which the peak occurs (None for a sum of parts)."""
    fits: bool
    breakdown: object = field(repr=False)

    @property
    def usable_bytes(self) -> float:
        from trainbudget.core.parallel.fits import allocated_limit_bytes  # answers only

        return allocated_limit_bytes(self.capacity_bytes, self.rule, self.communicators)

    def verdict_text(self) -> str:
        from trainbudget.core.parallel.fits import verdict_text  # answers only

        return verdict_text(self.fits, self.capacity_bytes, self.rule, self.communicators)


@dataclass(frozen=True, kw_only=True, eq=False)  # an answer is itself: hashable, by identity
class Estimate:
    """One training run's answer (`trainbudget estimate`): counts, memory per GPU, step time
    and the days, GPU-hours and cost when tokens were given.

    `kind` says which answer it is, as the CLI's "answer" line does: 'one-gpu', 'mfu' (6ND at
    an assumed MFU), 'bare' (a parameter count only), 'layout' (the layout given) or 'planner'
    (the fastest layout that fits, found by the same search as `plan`)."""

    kind: str
    single: SingleEstimate = field(repr=False)
    """The core's one-device estimate at the answer's settings: counts, FLOPs, derivation."""
    plan: Plan | None
    """The layout of a planned or given-layout answer; None for one GPU, --mfu, dense:N."""
    ranked: RankedPlan | None = field(repr=False)
    cluster: Cluster | None = field(repr=False)
    framework: Framework = field(repr=False)
    seq_len: Chosen | None = field(repr=False)
    memory: Memory
    step: StepTime | None = field(repr=False)
    """The plan's step time and its breakdown; None without a plan."""
    error_range: dict | None = field(default=None, repr=False)
    """The plan's step-time range from the model's error on similar published runs."""
    sensitivity: list[dict] | None = field(default=None, repr=False)
    """Each unstated assumption's alternative and how much it moves time and memory."""
    reliability: dict | None = field(default=None, repr=False)
    search: Any = field(default=None, repr=False)
    """The planner's search (api.inputs.question.Search) of a 'planner' answer, else None."""
    _json_text: str = field(repr=False, compare=False)

    def to_json(self) -> dict:
        """The document `trainbudget estimate --json` prints for the same question (a fresh
        copy: changing it changes nothing here)."""
        return json.loads(self._json_text)

    def json_text(self) -> str:
        """to_json() as the CLI prints it (indented; the text it was built as, so the command
        does not parse and write it again)."""
        return self._json_text

    @cached_property
    def _doc(self) -> dict:
        """The document, read once for the figures below (never handed out)."""
        return json.loads(self._json_text)

    @property
    def time_seconds(self) -> float | None:
        return self._doc.get("time_seconds")

    @property
    def time_days(self) -> float | None:
        """Training days for the tokens given (None without tokens)."""
        return self._doc.get("time_days")

    @property
    def gpu_hours(self) -> float | None:
        return self._doc.get("gpu_hours")

    @property
    def cost(self) -> float | None:
        """GPU-hours times price_per_gpu_hour (None without a price)."""
        return self._doc.get("cost")

    @property
    def mfu(self) -> float | None:
        """The plan's predicted MFU, or the MFU assumed without a plan."""
        return self._doc.get("mfu")

    def job(self, engine: str) -> Job:
        """What `emit` hands `engine`: the plan (given or planned) of the architecture. Refused
        without a layout of an architecture, or when the plan does not fit: an engine would run
        out of memory on it."""
        from trainbudget.api.returned.engine_config import check_engine, engine_job
        from trainbudget.core.spec.model_spec import ModelSpec

        check_engine(engine)
        request = self.single.request
        if self.plan is None or not isinstance(request.model, ModelSpec):
            why = f"a {self.kind} estimate has no layout of an architecture to emit"
            raise SpecError("--emit", engine, why)
        if not self.memory.fits:
            raise SpecError("--emit", engine, "the plan does not fit in memory: nothing to emit")
        return engine_job(
            request.model,
            self.plan,
            seq_len=self.single.seq_len,
            tokens=request.tokens,
            precision=request.precision,
            optimizer=request.optimizer,
        )

    def emit(self, engine: str) -> str:
        """The plan as `engine`'s config (torchtitan, megatron, deepspeed): the text
        `trainbudget plan --emit ENGINE` writes (a method, not `trainbudget.emit`, which is
        the emitters' package)."""
        from trainbudget.api.returned.engine_config import emit

        return emit(self, engine)

    def __repr__(self) -> str:
        from trainbudget.api.returned.display import estimate_repr

        return estimate_repr(self)

    def _repr_html_(self) -> str:
        from trainbudget.api.returned.display import estimate_html

        return estimate_html(self)


@dataclass(frozen=True, kw_only=True, eq=False)
class PlanResult:
    """`trainbudget plan`'s answer: the fastest layouts that fit, best first (when none fits,
    the least-memory ones, each with fits False), and the search's inputs."""

    plans: tuple[RankedPlan, ...]
    cluster: Cluster = field(repr=False)
    framework: Framework = field(repr=False)
    seq_len: Chosen
    global_batch: Chosen
    evaluated: int
    fitting: int
    search: Any = field(repr=False)
    """The search run (api.inputs.question.Search): its policy, cluster and result."""
    tokens: float | None = None
    reliability: dict | None = field(default=None, repr=False)
    model: ModelSpec | None = field(default=None, repr=False)
    """The architecture planned for (what `emit` writes into an engine's config)."""
    precision: str = field(default="bf16-mixed", repr=False)
    optimizer: str = field(default="adamw", repr=False)
    _json_text: str = field(repr=False, compare=False)

    @property
    def best(self) -> RankedPlan | None:
        """The first plan (check `.fits`: when nothing fits it is the least-memory one)."""
        return self.plans[0] if self.plans else None

    def to_json(self) -> dict:
        """The document `trainbudget plan --json` prints for the same question."""
        return json.loads(self._json_text)

    def json_text(self) -> str:
        """to_json() as the CLI prints it."""
        return self._json_text

    def job(self, engine: str) -> Job:
        """What `emit` hands `engine`: the best plan. Refused when no plan fits in memory."""
        from trainbudget.api.returned.engine_config import check_engine, engine_job

        check_engine(engine)
        best = self.best
        if best is None or not best.fits or self.model is None:
            raise SpecError("--emit", engine, "no plan fits in memory: nothing to emit")
        return engine_job(
            self.model,
            best.plan,
            seq_len=self.seq_len.value,
            tokens=self.tokens,
            precision=self.precision,
            optimizer=self.optimizer,
        )

    def emit(self, engine: str) -> str:
        """The plan as `engine`'s config (torchtitan, megatron, deepspeed): the text
        `trainbudget plan --emit ENGINE` writes (a method, not `trainbudget.emit`, which is
        the emitters' package)."""
        from trainbudget.api.returned.engine_config import emit

        return emit(self, engine)

    def __repr__(self) -> str:
        from trainbudget.api.returned.display import plan_repr

        return plan_repr(self)

    def _repr_html_(self) -> str:
        from trainbudget.api.returned.display import plan_html

        memory = None  # the best plan's, as `estimate` reports it; display takes it ready-made
        if self.best is not None:
            memory = plan_memory(self.best, self.cluster, self.search.rule)
        return plan_html(self, memory)


@dataclass(frozen=True, kw_only=True, eq=False)
class Quotes:
    """`trainbudget plan --within-days D`'s answer: each GPU type and count with its fastest
    plan, days and cost, best first as core.parallel.search.procurement ranks them: those that
    meet the deadline by cost, then the rest by days."""

    quotes: tuple[dict, ...]
    """One row per candidate: gpu, gpus, price_per_gpu_hour, plan, days, cost, meets_deadline
    (plan, days and cost None where no layout fits)."""
    framework: str
    _json_text: str = field(repr=False, compare=False)

    @property
    def best(self) -> dict:
        return self.quotes[0]

    def to_json(self) -> dict:
        """The document `trainbudget plan --within-days D --json` prints."""
        return json.loads(self._json_text)

    def json_text(self) -> str:
        return self._json_text


def plan_memory(r: RankedPlan, cluster: Cluster, rule: FitsRule) -> Memory:
    """A plan's memory: its most loaded GPU at its peak phase (core PlanMemory)."""
    from trainbudget.core.parallel.fits import n_communicators

    m, p = r.memory, r.plan
    return Memory(
        peak_bytes=m.total_bytes,
        capacity_bytes=cluster.hardware.usable_memory_bytes,
        rule=rule,
        communicators=n_communicators(p.dp, p.tp, p.pp, p.cp),
        parts_bytes={
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes,
            "temporaries": m.temporaries_bytes,
            "buffers": m.buffers_bytes,
        },
        stages_bytes=dict(r.stage_memory_bytes),
        phase=m.phase,
        fits=r.fits,
        breakdown=m,
    )


PARTS = ("params", "grads", "optimizer", "activations", "temporaries")
"""The parts of a one-device memory figure that sum to its total (master weights and optimizer
state are the optimizer's two halves)."""


def single_memory(e: SingleEstimate, rule: FitsRule, memory_json: dict) -> Memory:
    """Memory without a plan: one device holding the whole model, or, for dense:N under a
    layout, the model state per GPU (`memory_json`: the answer's memory_bytes)."""
    from trainbudget.core.parallel.fits import fits

    capacity = e.request.hardware.usable_memory_bytes
    peak = memory_json["total"]
    return Memory(
        peak_bytes=peak,
        capacity_bytes=capacity,
        rule=rule,
        communicators=0,
        parts_bytes={k: memory_json[k] for k in PARTS if k in memory_json},
        stages_bytes={},
        phase=e.memory.peak_phase,
        fits=bool(fits(peak, capacity, rule)),
        breakdown=e.memory,
    )
