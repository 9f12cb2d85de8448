"""The engines a plan can be emitted for, by the name `plan --emit` takes."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from trainbudget.core.errors import unknown_key
from trainbudget.emit import deepspeed, megatron, torchtitan
from trainbudget.emit.job import Emitted, Job

ENGINES: MappingProxyType[str, Callable[[Job], Emitted]] = MappingProxyType(
    {
        torchtitan.ENGINE: torchtitan.emit,
        megatron.ENGINE: megatron.emit,
        deepspeed.ENGINE: deepspeed.emit,
    }
)
VERSIONS = MappingProxyType(
    {
        torchtitan.ENGINE: f"torchtitan {torchtitan.VERSION}",
        megatron.ENGINE: megatron.VERSION,
        deepspeed.ENGINE: f"deepspeed {deepspeed.VERSION}",
    }
)


def emit(engine: str, job: Job) -> Emitted:
    """The engine's file for the job, or a SpecError naming the feature it cannot carry."""
    if engine not in ENGINES:
        raise unknown_key("--emit", engine, list(ENGINES))
    return ENGINES[engine](job)
