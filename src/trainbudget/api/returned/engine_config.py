"""A plan handed to a training engine: the one way `plan --emit ENGINE`, the planner page's
download and a result's `.emit(engine)` build the engine's job and its config file (the
emitters themselves are the trainbudget.emit package's)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from trainbudget.core.errors import unknown_key

if TYPE_CHECKING:  # the emitters load on first use: `import trainbudget.api` stays small
    from trainbudget.core.parallel.plan import Plan
    from trainbudget.core.spec.model_spec import ModelSpec
    from trainbudget.emit.job import Emitted, Job


class Planned(Protocol):
    """An answer with a plan to hand over (api.returned.results' Estimate and PlanResult): it
    builds its job itself, so this module reads no result type and results.py can import it."""

    def job(self, engine: str) -> Job: ...


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


def check_engine(engine: str) -> None:
    """Refuse an engine name the emitters do not know, listing the ones they do; a result's
    `job` calls it first, so an unknown name is the error whatever the plan."""
    from trainbudget.emit.engines import ENGINES

    if engine not in ENGINES:
        raise unknown_key("--emit", engine, list(ENGINES))


def emitted(result: Planned, engine: str) -> Emitted:
    """The engine's file for the result's plan, and the notes of what it cannot carry; a
    SpecError names a plan feature the engine has no equivalent for."""
    from trainbudget.emit.engines import emit as emit_job

    return emit_job(engine, result.job(engine))


def emit(result: Planned, engine: str) -> str:
    """The config text `trainbudget plan --emit ENGINE` writes for the same question: a
    torchtitan TOML, Megatron arguments or a DeepSpeed JSON (`emitted` adds the notes)."""
    return emitted(result, engine).text
