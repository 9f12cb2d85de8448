"""A plan handed to a training engine: the one way `plan --emit ENGINE`, the planner page's
download and a result's `.emit(engine)` build the engine's job and its config file (the
emitters themselves are the trainbudget.emit package's)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trainbudget.api.results import Estimate, PlanResult
from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.model_spec import ModelSpec

if TYPE_CHECKING:  # the emitters load on first use: `import trainbudget.api` stays small
    from trainbudget.core.parallel.plan import Plan
    from trainbudget.emit.job import Emitted, Job


def engine_job(
    model: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    tokens: float | None,
    precision: str,
    optimizer: str,
) -> Job:
    """The emitters' input; train_steps = ceil(tokens / (global batch x seq_len)), the steps
    that cover the token budget (None without one)."""
    from trainbudget.emit.job import Job

    steps = math.ceil(tokens / (plan.global_batch * seq_len)) if tokens else None
    return Job(
        model=model,
        plan=plan,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        train_steps=steps,
    )


def result_job(result: PlanResult | Estimate, engine: str) -> Job:
    """The job of a plan answer's best plan, or of an estimate's plan (given or planned). A
    plan that does not fit is refused: an engine would run out of memory on it."""
    from trainbudget.emit.engines import ENGINES

    if engine not in ENGINES:  # first: an unknown name is the error, whatever the plan
        raise unknown_key("--emit", engine, list(ENGINES))
    if isinstance(result, PlanResult):
        if result.best is None or not result.best.fits or result.model is None:
            raise SpecError("--emit", engine, "no plan fits in memory: nothing to emit")
        return engine_job(
            result.model,
            result.best.plan,
            seq_len=result.seq_len.value,
            tokens=result.tokens,
            precision=result.precision,
            optimizer=result.optimizer,
        )
    request = result.single.request
    if result.plan is None or not isinstance(request.model, ModelSpec):
        raise SpecError(
            "--emit", engine, f"a {result.kind} estimate has no layout of an architecture to emit"
        )
    if not result.memory.fits:
        raise SpecError("--emit", engine, "the plan does not fit in memory: nothing to emit")
    return engine_job(
        request.model,
        result.plan,
        seq_len=result.single.seq_len,
        tokens=request.tokens,
        precision=request.precision,
        optimizer=request.optimizer,
    )


def emitted(result: PlanResult | Estimate, engine: str) -> Emitted:
    """The engine's file for the result's plan, and the notes of what it cannot carry; a
    SpecError names a plan feature the engine has no equivalent for."""
    from trainbudget.emit.engines import emit as emit_job

    return emit_job(engine, result_job(result, engine))


def emit(result: PlanResult | Estimate, engine: str) -> str:
    """The config text `trainbudget plan --emit ENGINE` writes for the same question: a
    torchtitan TOML, Megatron arguments or a DeepSpeed JSON (`emitted` adds the notes)."""
    return emitted(result, engine).text
