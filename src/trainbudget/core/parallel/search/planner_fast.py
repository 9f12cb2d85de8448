"""The planner's search, over numpy arrays: every plan the validation accepts, one array
element per plan, evaluated by the very term functions `step_time` and `plan_memory` use for one
plan (`step_terms`, `stage_memory` with `xp = numpy_ops()`): one formula, two kinds of numbers.
The search enumerates its plans straight onto the product of their axes (`plan_grid`), takes
every plan's memory, then the step time of those that fit (the only ones it ranks by time); the
top plans are then re-evaluated one by one for their full breakdowns."""

from __future__ import annotations

import time

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.core.ops import numpy_ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import fits, n_communicators, rule_for
from trainbudget.core.parallel.layout import PlanNumbers, in_chunks
from trainbudget.core.parallel.memory.gpu_memory import peak_bytes
from trainbudget.core.parallel.plan import validate_plan
from trainbudget.core.parallel.search.plan_grid import DEFAULT_POLICY, enumerate_plan_grid
from trainbudget.core.parallel.search.plan_space import (
    TIE_TOLERANCE,
    PlannerResult,
    Policy,
    model_parallel_degree,
    parallel_axes,
)
from trainbudget.core.parallel.search.planner import evaluate
from trainbudget.core.parallel.search.product_grid import (
    ProductGrid,
    per_distinct_rows,
    product_grid,
)
from trainbudget.core.parallel.timing.compute_time import COMPUTE_FIELDS, micro_batch_terms
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.parallel.timing.step_time import step_terms
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision

PlanArrays = PlanNumbers  # a grid of plans: one array per field


def evaluate_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    a: PlanNumbers,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    framework: Framework = GENERIC,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step_seconds, memory total_bytes, tokens_per_step) of every plan in `a`."""
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    step = step_arrays(spec, cluster, a, efficiency=efficiency, causal=causal, **kw)
    return step, memory_arrays(spec, a, **kw), tokens_per_step(a, seq_len)


def tokens_per_step(a: PlanNumbers, seq_len: int) -> np.ndarray:
    """Tokens one optimizer step of each plan trains on."""
    return a.micro_batch * a.grad_accum * a.dp * seq_len


def step_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    a: PlanNumbers | None,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    framework: Framework = GENERIC,
    grid: ProductGrid | None = None,
) -> np.ndarray:
    """Step seconds of every plan in `a` (`step_terms` on arrays); `grid`: `a`'s product grid
    where the caller has it (`a` may then be None)."""
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)

    kw.update(efficiency=efficiency, causal=causal, xp=numpy_ops())

    def step(plans: PlanNumbers) -> np.ndarray:
        return step_terms(spec, plans, cluster, **kw).step_seconds

    def on_product(plans: PlanNumbers) -> np.ndarray:
        # one micro-batch's compute depends on the model-parallel layout, not on dp or ZeRO:
        # computed once per distinct layout of the product's rows
        def compute(seen: PlanNumbers):
            return micro_batch_terms(spec, seen, cluster, **_without(kw, "optimizer"))

        mb = per_distinct_rows(compute, plans, COMPUTE_FIELDS)
        return step_terms(spec, plans, cluster, micro_batch=mb, **kw).step_seconds

    return _on_product(on_product, a, grid, lambda: in_chunks(step, a))


def memory_arrays(
    spec: ModelSpec,
    a: PlanNumbers | None,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
    grid: ProductGrid | None = None,
) -> np.ndarray:
    """Peak bytes on the most loaded GPU of every plan in `a`: `gpu_memory.peak_bytes` on
    arrays, the very phases `plan_memory` takes for one plan; `grid`: `a`'s product grid where
    the caller has it (`a` may then be None)."""
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)

    def peak(plans: PlanNumbers) -> np.ndarray:
        return peak_bytes(spec, plans, xp=numpy_ops(), **kw)

    return _on_product(peak, a, grid, lambda: peak(a))


def _without(kw: dict, *names: str) -> dict:
    return {k: v for k, v in kw.items() if k not in names}


def _on_product(fn, a: PlanNumbers | None, grid: ProductGrid | None, otherwise) -> np.ndarray:
    """fn (a term function over plans) on the product grid of `a` (`product_grid`), one element
    per plan of `a` taken from it; otherwise() where `a` is no near-product. The product's
    cells that hold no plan may divide by zero: they are never read, so numpy is not to warn."""
    grid = grid if grid is not None else product_grid(a)
    if grid is None:
        return otherwise()
    with np.errstate(divide="ignore", invalid="ignore"):
        return grid.gather(fn(grid.numbers))


def _rank_fitting(fitting, fit: PlanNumbers | ProductGrid, seconds_per_token, memory, top: int):
    """The `top` best of the plans `fitting` (grid indices; `fit` their plans, with their
    seconds per token and memory): by seconds per token, then less memory. The plans within
    TIE_TOLERANCE of the fastest come first, reordered: fewer parallel axes first, then a
    smaller model-parallel group (the simpler layout to run and debug), then less memory, then
    time. Full ties keep enumeration order. Only the plans that can be among the `top` are
    sorted (the tied ones, and the slower ones at most as slow as the top-th), not all of a
    grid's tens of thousands."""
    spt, mem = seconds_per_token, memory
    tied = spt <= spt.min() * (1 + TIE_TOLERANCE)
    head = np.flatnonzero(tied)  # enumeration order, which the stable sort keeps for full ties
    plans = fit.take(head)
    keys = (spt[head], mem[head], model_parallel_degree(plans), parallel_axes(plans))
    head = head[np.lexsort(keys)]  # by the last key first
    rest, need = np.flatnonzero(~tied), top - len(head)
    if need <= 0:
        return fitting[head[:top]]
    if need < len(rest):  # the need-th fastest of the rest, and every plan as fast
        cut = np.partition(spt[rest], need - 1)[need - 1]
        rest = rest[spt[rest] <= cut]
    rest = rest[np.lexsort((mem[rest], spt[rest]))]
    return fitting[np.concatenate((head, rest))[:top]]


def search_fast(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    policy: Policy = DEFAULT_POLICY,
    top: int = 5,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    count_causal: bool = False,
    framework: Framework = GENERIC,
) -> PlannerResult:
    """planner.search over arrays; the `top` plans returned are re-evaluated by the scalar
    `planner.evaluate`, so their memory and time breakdowns are the reference ones."""
    start = time.perf_counter()
    grid = enumerate_plan_grid(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    if len(grid) == 0:
        raise SpecError(
            "gpus",
            cluster.n_gpus,
            f"no valid layout of {spec.name} at global batch {global_batch} on "
            f"{cluster.n_gpus} GPUs: the batch must be divisible by some data-"
            "parallel degree and the heads/layers by TP/PP",
        )
    # planner.search validates every plan; the one rule enumeration does not guarantee (a
    # policy listing a ZeRO stage outside 0-3) raises validate_plan's error for the first one
    if any(z < 0 or z > 3 for z in policy.zero_stages):
        zero = grid.gather(grid.numbers.zero)
        for plan in grid.take(np.flatnonzero((zero < 0) | (zero > 3))[:1]).plans():
            validate_plan(
                plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch
            )
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    memory = memory_arrays(spec, None, grid=grid, **kw)
    rule = rule_for(policy.memory_headroom, framework.name)
    L = grid.numbers
    comms = grid.gather(n_communicators(L.dp, L.tp, L.pp, L.cp))  # a field of the rows
    fitting = np.flatnonzero(fits(memory, cluster.hardware.usable_memory_bytes, rule, comms))
    if len(fitting):  # only the plans that fit are ranked by time: only theirs is evaluated
        fit = grid.subset(fitting)
        step = step_arrays(
            spec, cluster, None, efficiency=efficiency, causal=causal, grid=fit, **kw
        )
        spt = step / fit.gather(tokens_per_step(fit.numbers, seq_len))
        order = _rank_fitting(fitting, fit, spt, memory[fitting], top)
    else:
        order = np.argsort(memory, kind="stable")[:top]
    best = grid.take(order)
    kw.update(efficiency=efficiency, causal=causal, count_causal=count_causal)
    ranked = []
    for i in range(len(order)):
        plan = best.plan(i)
        validate_plan(plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch)
        ranked.append(evaluate(spec, plan, cluster, headroom=policy.memory_headroom, **kw))
    return PlannerResult(
        plans=tuple(ranked),
        evaluated=len(grid),
        n_fitting=len(fitting),
        search_seconds=time.perf_counter() - start,
    )
