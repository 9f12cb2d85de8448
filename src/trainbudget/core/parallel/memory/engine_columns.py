"""A framework row's columns for a plan: the engine's (`core.spec.engines`, the row's engine
for each plan's ZeRO stage) and the widths its optimizer keeps the model state in -- numbers
for one plan, arrays for a grid (`core.ops`), read by the per-GPU phase model (`gpu_terms`) and
the step model (`timing.comm_time`)."""

from __future__ import annotations

import functools
from collections import namedtuple
from dataclasses import replace
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.spec.engines import ENGINE_COLUMNS, get_engine
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.precision import Precision


def engine_columns(framework: Framework, zero: Any, alone: Any, xp: Ops = SCALAR) -> Any:
    """The engine row's columns for each plan: `framework.engines[0]` where no data-parallel
    wrapper runs (`alone`: one rank in the data-parallel group), else the row for its ZeRO
    stage (1 + zero). Numbers for one plan, arrays for a grid (a column the rows agree on
    stays one number)."""
    if not xp.is_array:
        return _one_plan_columns(framework, int(zero), bool(alone))
    return _columns(framework, zero, alone, xp)


@functools.lru_cache(maxsize=64)
def _one_plan_columns(framework: Framework, zero: int, alone: bool) -> Any:
    """`engine_columns` of one plan: a pure lookup of hashable keys, made once per key (a
    step's terms ask for it several times)."""
    return _columns(framework, zero, alone, SCALAR)


def _columns(framework: Framework, zero: Any, alone: Any, xp: Ops) -> Any:
    rows = [get_engine(name) for name in framework.engines]
    out = {}
    for column in ENGINE_COLUMNS:
        values = [getattr(r, column) for r in rows]
        value = values[4]
        if len(set(values[1:])) > 1:
            for stage in (2, 1, 0):
                value = xp.where(zero == stage, values[stage + 1], value)
        if len(set(values)) > 1:
            value = xp.where(alone, values[0], value)
        out[column] = value
    return EngineColumns(**out)


EngineColumns = namedtuple("EngineColumns", ENGINE_COLUMNS)
"""One value (or array over plans) per engine column; immutable, as the cache hands the same
one to every caller."""


def state_precision(prec: Precision, framework: Framework) -> Precision:
    """The widths the model state is kept in: the precision's, or, with bf16 weights, the
    framework row's master copy (where the precision keeps one) and optimizer moments
    (`Framework.master_bytes`, `state_bytes`: Apex DistributedFusedAdam's 16-bit remainders
    complete a bf16 weight only; NeMo keeps a full fp32 master beside fp16 or fp32 weights)."""
    master, state = framework.master_bytes, framework.state_bytes
    bf16_weights = prec.weight_bytes == 2 and prec.compute_dtype != "fp16"
    if not bf16_weights or (master is None and state is None):
        return prec
    return replace(
        prec,
        master_bytes=prec.master_bytes if master is None or not prec.master_bytes else master,
        state_bytes=prec.state_bytes if state is None else state,
    )
