"""The planner's search, over numpy arrays: every plan the validation accepts, one array
element per plan, evaluated by the very term functions `step_time` and `plan_memory` use for one
plan (`step_terms`, `stage_memory` with `xp = numpy_ops()`): one formula, two kinds of numbers.
The search takes every plan's memory, then the step time of those that fit (the only ones it
ranks by time); the top plans are then re-evaluated one by one for their full breakdowns."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.core.ops import numpy_ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import (
    INTERLEAVED,
    ON_GPU,
    ONE_F_ONE_B,
    RECOMPUTE_CODES,
    STAGE_LAYER_FIELDS,
    PlanNumbers,
    in_chunks,
)
from trainbudget.core.parallel.memory.gpu_memory import peak_bytes
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.search.plan_space import (
    TIE_TOLERANCE,
    PlannerResult,
    Policy,
    axis_candidates,
    divisors,
    hsdp_shards,
    model_parallel_degree,
    parallel_axes,
)
from trainbudget.core.parallel.search.planner import evaluate
from trainbudget.core.parallel.search.product_grid import (
    ProductGrid,
    per_distinct_rows,
    product_grid,
)
from trainbudget.core.parallel.timing.compute_time import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.parallel.timing.step_time import (
    COMPUTE_FIELDS,
    micro_batch_terms,
    step_terms,
)
from trainbudget.core.single import op_checkpoint
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision

DEFAULT_POLICY = Policy()
PlanArrays = PlanNumbers  # a grid of plans: one array per field


def _recompute_code(kind: str, spec: ModelSpec) -> int:
    if kind not in RECOMPUTE_CODES:
        raise SpecError("recompute", kind, "must be one of " + ", ".join(RECOMPUTE_CODES))
    if kind == "selective-op" and op_checkpoint.unsupported(spec):
        raise SpecError("recompute", kind, op_checkpoint.unsupported(spec))
    return RECOMPUTE_CODES.index(kind)


def enumerate_plan_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    policy: Policy = DEFAULT_POLICY,
) -> PlanNumbers:
    """Every plan the validation accepts under `policy`: one grid over (tp, pp, cp) x
    micro-batch x vpp x ep x zero x recompute x sp x offload, in that order (offload varies
    fastest), cut by the rules as masks (the micro-batch, vpp and ep axes hold supersets that
    the masks cut down to each (tp, pp, cp)'s own lists), then every ZeRO plan once more per
    HSDP shard size (`plan_space.hsdp_shards`). Each rule is tested on the short lists of the
    axes it involves, broadcast into one boolean grid; each field is gathered once, at the
    end, for the kept cells only."""
    n = cluster.n_gpus
    tps, pps, cps = axis_candidates(spec, cluster, seq_len=seq_len, policy=policy)
    tpc = np.array(list(itertools.product(tps, pps, cps)), dtype=np.int64).reshape(-1, 3)
    tpc = tpc[n % tpc.prod(axis=1) == 0]
    tpc = tpc[global_batch % (n // tpc.prod(axis=1)) == 0]
    tp, pp, cp = (np.ascontiguousarray(c) for c in tpc.T)
    rows = dict(tp=tp, pp=pp, cp=cp, dp=n // (tp * pp * cp))  # one element per grid row
    axes = {
        "micro_batch": [d for d in divisors(global_batch) if d <= policy.max_micro_batch],
        "vpp": [v for v in divisors(spec.n_layers) if v <= policy.max_vpp],
        "ep": divisors(spec.n_experts) if spec.is_moe else [1],
        "zero": list(policy.zero_stages),
        "recompute": [_recompute_code(r, spec) for r in policy.recompute],
        "sp": [False, True],
        "offload_optimizer": [0, 1] if policy.allow_offload else [0],
    }
    axes = {name: np.asarray(values) for name, values in axes.items()}
    keep = _valid_cells(rows, axes, global_batch, spec.n_layers, policy.flash_attention)
    cells = np.flatnonzero(keep)  # ascending: the grid's order
    zero_shard = np.zeros(len(cells), dtype=np.int64)
    if policy.hsdp:
        sharded = keep & _along(axes["zero"] > 0, 4)  # the ZeRO plans
        extra, shards = _hsdp_cells(sharded, rows, cluster.gpus_per_node)
        cells, zero_shard = np.concatenate((cells, extra)), np.concatenate((zero_shard, shards))
    columns = _fields_at(cells, rows, axes, global_batch)
    return PlanNumbers(
        **columns,
        zero_shard=zero_shard,
        schedule=np.where(columns["vpp"] > 1, INTERLEAVED, ONE_F_ONE_B),
        # the fields every plan of the grid shares, held as one number (PlanNumbers)
        offload_params=ON_GPU,
        recompute_every=1,
        flash=policy.flash_attention,
        **dict.fromkeys(STAGE_LAYER_FIELDS, 0),  # even splits
    )


def _along(values: np.ndarray, axis: int) -> np.ndarray:
    """`values` laid along axis `axis` of the 8-axis grid (length 1 on the others)."""
    return values.reshape((1,) * axis + (-1,) + (1,) * (7 - axis))


def _valid_cells(
    rows: dict[str, np.ndarray],
    axes: dict[str, np.ndarray],
    global_batch: int,
    n_layers: int,
    flash: bool,
) -> np.ndarray:
    """The validation's rules over the grid: a boolean array of shape (rows, *axes' lengths),
    each rule computed on the few axes it reads and broadcast."""
    tp, pp, cp, dp = (_along(rows[k], 0) for k in ("tp", "pp", "cp", "dp"))
    mb, vpp, ep, zero, rec, sp, off = (_along(a, k) for k, a in enumerate(axes.values(), 1))
    per_rank = global_batch // dp
    m = per_rank // mb
    return (
        (per_rank % mb == 0)
        & np.where(pp > 1, (n_layers // pp) % vpp == 0, vpp == 1)
        & ~((vpp > 1) & (m % pp != 0))
        & ((dp * cp) % ep == 0)
        & ~((zero > 0) & (dp * cp == 1))  # nothing to shard over
        & ~((rec == 1) & flash)  # FlashAttention keeps no s x s matrix
        & ~(sp & (tp == 1))
        & ~((off != 0) & (zero == 0))
    )


def _hsdp_cells(
    sharded: np.ndarray, rows: dict[str, np.ndarray], gpus_per_node: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ZeRO plans (`sharded`, a boolean grid) again for every HSDP shard size of their
    (dp, tp, cp): as grid cells, with their shard sizes. The rows in ascending (dp, tp, cp)
    order, each row's plans once per shard size (ascending), in enumeration order. A row's
    cells are contiguous in the grid (the row is its first axis), so each (row, size) block is
    one slice of the sorted ZeRO cells."""
    per_row = sharded.reshape(len(sharded), math.prod(sharded.shape[1:]))
    cells = np.flatnonzero(per_row)  # row by row
    counts = np.count_nonzero(per_row, axis=1)
    starts = np.cumsum(counts) - counts  # where each row's cells begin in `cells`
    dp, tp, cp = (rows[k].tolist() for k in ("dp", "tp", "cp"))
    blocks = [
        (r, s)
        for r in sorted(range(len(dp)), key=lambda r: (dp[r], tp[r], cp[r]))
        if counts[r]
        for s in hsdp_shards(dp[r], tp[r], cp[r], gpus_per_node)
    ]
    block_row = np.array([r for r, _ in blocks], dtype=np.int64)
    block_shard = np.array([s for _, s in blocks], dtype=np.int64)
    lengths = counts[block_row]
    # position k of block b is cells[starts[row of b] + k]; k counts from the block's start
    shift = np.repeat(starts[block_row] - (np.cumsum(lengths) - lengths), lengths)
    return cells[np.arange(len(shift)) + shift], np.repeat(block_shard, lengths)


def _fields_at(
    cells: np.ndarray,
    rows: dict[str, np.ndarray],
    axes: dict[str, np.ndarray],
    global_batch: int,
) -> dict[str, np.ndarray]:
    """The plan fields of grid cells (flat indices): a cell's row holds its tp, pp, cp and dp;
    the rest of the index picks one combination of the other axes."""
    combos = math.prod(len(a) for a in axes.values())
    row, combo = np.divmod(cells, max(combos, 1))
    grids = np.meshgrid(*axes.values(), indexing="ij")  # every combination, the grid's order
    fields = {name: g.ravel()[combo] for name, g in zip(axes, grids, strict=True)}
    fields |= {name: degree[row] for name, degree in rows.items()}
    fields["grad_accum"] = (global_batch // fields["dp"]) // fields["micro_batch"]
    return fields


def enumerate_plans(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    policy: Policy = DEFAULT_POLICY,
) -> Iterator[Plan]:
    """Every plan the validation accepts under `policy` (the grid's plans, one by one)."""
    arrays = enumerate_plan_arrays(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    for i in range(len(arrays)):
        yield arrays.plan(i)


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
    a: PlanNumbers,
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
    where the caller has it."""
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
    a: PlanNumbers,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework = GENERIC,
    grid: ProductGrid | None = None,
) -> np.ndarray:
    """Peak bytes on the most loaded GPU of every plan in `a`: `gpu_memory.peak_bytes` on
    arrays, the very phases `plan_memory` takes for one plan; `grid`: `a`'s product grid where
    the caller has it."""
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)

    def peak(plans: PlanNumbers) -> np.ndarray:
        return peak_bytes(spec, plans, xp=numpy_ops(), **kw)

    return _on_product(peak, a, grid, lambda: peak(a))


def _without(kw: dict, *names: str) -> dict:
    return {k: v for k, v in kw.items() if k not in names}


def _on_product(fn, a: PlanNumbers, grid: ProductGrid | None, otherwise) -> np.ndarray:
    """fn (a term function over plans) on the product grid of `a` (`product_grid`), one element
    per plan of `a` taken from it; otherwise() where `a` is no near-product. The product's
    cells that hold no plan may divide by zero: they are never read, so numpy is not to warn."""
    grid = grid or product_grid(a)
    if grid is None:
        return otherwise()
    with np.errstate(divide="ignore", invalid="ignore"):
        return grid.gather(fn(grid.numbers))


def _rank_fitting(fitting, fit: PlanNumbers, seconds_per_token, memory, top: int):
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
    arrays = enumerate_plan_arrays(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    if len(arrays) == 0:
        raise SpecError(
            "gpus",
            cluster.n_gpus,
            f"no valid layout of {spec.name} at global batch {global_batch} on "
            f"{cluster.n_gpus} GPUs: the batch must be divisible by some data-"
            "parallel degree and the heads/layers by TP/PP",
        )
    # planner.search validates every plan; the one rule enumeration does not guarantee (a
    # policy listing a ZeRO stage outside 0-3) raises validate_plan's error for the first one
    bad = (arrays.zero < 0) | (arrays.zero > 3)
    for i in np.flatnonzero(bad)[:1]:
        plan = arrays.plan(int(i))
        validate_plan(plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch)
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, framework=framework)
    grid = product_grid(arrays)
    memory = memory_arrays(spec, arrays, grid=grid, **kw)
    fitting = np.flatnonzero(memory <= policy.memory_headroom * cluster.hardware.memory_bytes)
    if len(fitting):  # only the plans that fit are ranked by time: only theirs is evaluated
        fit = arrays.take(fitting)
        fit_grid = grid.subset(fitting) if grid else None
        step = step_arrays(
            spec, cluster, fit, efficiency=efficiency, causal=causal, grid=fit_grid, **kw
        )
        spt = step / tokens_per_step(fit, seq_len)
        mem = memory[fitting]
        order = _rank_fitting(fitting, fit, spt, mem, top)
    else:
        order = np.argsort(memory, kind="stable")[:top]
    kw.update(efficiency=efficiency, causal=causal, count_causal=count_causal)
    ranked = []
    for i in order:
        plan = arrays.plan(int(i))
        validate_plan(plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch)
        ranked.append(evaluate(spec, plan, cluster, headroom=policy.memory_headroom, **kw))
    return PlannerResult(
        plans=tuple(ranked),
        evaluated=len(arrays),
        n_fitting=len(fitting),
        search_seconds=time.perf_counter() - start,
    )
