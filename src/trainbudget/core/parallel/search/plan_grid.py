"""Every plan the planner searches, enumerated straight onto the product of its axes.

The validation's rules are masks over one grid: the (tp, pp, cp) rows that divide the cluster
and the batch, times micro-batch x vpp x ep x zero x recompute x sp x offload (offload varies
fastest); every ZeRO plan comes once more per HSDP shard size (`plan_space.hsdp_shards`). That
order is the plans' order, the ranking's last tie-break.

The kept cells are then laid on the product the term functions evaluate
(`product_grid.ProductGrid`: the six AXES, then rows of (pp, dp, tp, cp, HSDP shard, vpp)),
from what the enumeration already knows -- each cell's row and its index along every axis --
instead of re-deriving the product from one array per field (`product_grid.product_grid`, which
gives the same grid from the flat plans: a test holds the two equal). The flat plans
(`enumerate_plan_arrays`) are read back from the product, for the few that need them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import (
    INTERLEAVED,
    ON_GPU,
    ONE_F_ONE_B,
    RECOMPUTE_CODES,
    STAGE_LAYER_FIELDS,
    PlanNumbers,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.plan_space import (
    Policy,
    axis_candidates,
    divisors,
    hsdp_shards,
)
from trainbudget.core.parallel.search.product_grid import AXES, ProductGrid
from trainbudget.core.single import op_checkpoint
from trainbudget.core.spec.model_spec import ModelSpec

DEFAULT_POLICY = Policy()
ROW_FIELDS = ("pp", "dp", "tp", "cp", "zero_shard", "vpp")
"""A product row's fields, in the order its rows are sorted (the pipeline degree first, so that
the memory model's parts by pipeline degree are slices: `gpu_memory.peak_bytes`)."""


def enumerate_plan_grid(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    policy: Policy = DEFAULT_POLICY,
) -> ProductGrid:
    """Every plan the validation accepts under `policy`, on the product of its axes; plan i
    (`ProductGrid.at[i]`) in enumeration order (the module docstring)."""
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
    # each plan's row group (its grid row) and combination of the other axes' values, in the
    # grid's order (C order: no division of flat indices)
    group, combo = np.nonzero(keep.reshape(len(keep), math.prod(keep.shape[1:])))
    groups = {"row": np.arange(len(tp)), "zero_shard": np.zeros(len(tp), dtype=np.int64)}
    if policy.hsdp:
        sharded = keep & _along(axes["zero"] > 0, 4)  # the ZeRO plans
        extra, block, block_row, block_shard = _hsdp_cells(sharded, rows, cluster.gpus_per_node)
        combo = np.concatenate((combo, extra))
        group = np.concatenate((group, len(tp) + block))  # an HSDP block: a row group of its own
        groups = {
            "row": np.concatenate((groups["row"], block_row)),
            "zero_shard": np.concatenate((groups["zero_shard"], block_shard)),
        }
    return _on_product(keep, combo, group, groups, rows, axes, global_batch, policy)


def _recompute_code(kind: str, spec: ModelSpec) -> int:
    if kind not in RECOMPUTE_CODES:
        raise SpecError("recompute", kind, "must be one of " + ", ".join(RECOMPUTE_CODES))
    if kind == "selective-op" and op_checkpoint.unsupported(spec):
        raise SpecError("recompute", kind, op_checkpoint.unsupported(spec))
    return RECOMPUTE_CODES.index(kind)


def _along(values: np.ndarray, axis: int, ndim: int = 8) -> np.ndarray:
    """`values` laid along axis `axis` of `ndim` (length 1 on the others)."""
    return values.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ZeRO plans (`sharded`, a boolean grid) again for every HSDP shard size of their
    (dp, tp, cp): (each one's combination of the axes after the rows, each one's block, each
    block's grid row and shard size).
    A block is one (row, size): the rows in ascending (dp, tp, cp) order, each row's sizes
    ascending, each block's plans in enumeration order. A row's cells are contiguous in the
    grid (the row is its first axis), so each block is one slice of the sorted ZeRO cells."""
    per_row = sharded.reshape(len(sharded), math.prod(sharded.shape[1:]))
    _, cells = np.nonzero(per_row)  # row by row
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
    block = np.repeat(np.arange(len(blocks)), lengths)
    return cells[np.arange(len(shift)) + shift], block, block_row, block_shard


def _on_product(keep, combo, group, groups, rows, axes, global_batch, policy) -> ProductGrid:
    """The plans of `keep` (each a combination `combo` of the values of the axes after the
    grid's rows, in row group `group`: a grid row, or an HSDP block of one, whose grid row and
    shard size `groups` holds) on the product: AXES, then one row per
    (row group, vpp) that holds a plan, the rows sorted by ROW_FIELDS. Each axis keeps only the
    values some plan takes, ascending."""
    seen = keep.any(axis=0)  # (micro-batch, vpp, ep, zero, recompute, sp, offload)
    values, offset, mb_code = _axes_kept(seen, axes)
    fields, row_of = _rows_kept(keep, groups, rows, axes)
    vpp_index = np.broadcast_to(_along(np.arange(len(axes["vpp"])), 1, seen.ndim), seen.shape)
    row = row_of.ravel()[group * len(axes["vpp"]) + vpp_index.ravel()[combo]]
    n_rows = len(fields["pp"])
    at = offset.ravel()[combo] * n_rows + row
    shape = (*(len(values[f]) for f in AXES), n_rows)
    numbers = {f: _along(values[f], k, len(shape)) for k, f in enumerate(AXES)}
    numbers |= {f: _along(fields[f], len(AXES), len(shape)) for f in ROW_FIELDS}
    numbers["schedule"] = np.where(numbers["vpp"] > 1, INTERLEAVED, ONE_F_ONE_B)
    held = mb_code.ravel()[combo] * n_rows + row  # each plan's (micro-batch, row)
    numbers["grad_accum"] = _grad_accum(held, numbers, global_batch, shape)
    return ProductGrid(
        numbers=PlanNumbers(
            **numbers,
            # the fields every plan of the grid shares, held as one number (PlanNumbers)
            offload_params=ON_GPU,
            recompute_every=1,
            flash=policy.flash_attention,
            **dict.fromkeys(STAGE_LAYER_FIELDS, 0),  # even splits
        ),
        at=at,
        shape=shape,
        row=row,
    )


def _axes_kept(seen: np.ndarray, axes: dict[str, np.ndarray]):
    """(each of AXES' values that some plan takes, ascending; each combination of the grid's
    axes' values -> its cell among AXES, C order, and its micro-batch's index among those
    kept). `seen`: whether any row holds a plan with that combination."""
    names = list(axes)  # the grid's axes after its rows: micro_batch, vpp, ep, ...
    values, codes, offset = {}, {}, np.zeros(seen.shape, dtype=np.intp)
    for f in AXES:
        k = names.index(f)
        present = seen.any(axis=tuple(j for j in range(seen.ndim) if j != k))
        values[f] = axes[f][present]
        code = np.cumsum(present) - 1  # index among the values kept (-1: a value no plan has)
        offset = offset * len(values[f]) + _along(code, k, seen.ndim)
        codes[f] = _along(code, k, seen.ndim)
    return values, offset, np.broadcast_to(codes["micro_batch"], seen.shape)


def _rows_kept(keep, groups, rows, axes):
    """(the product's row fields, ROW_FIELDS, one element per row, sorted by them; a table
    (row group, vpp index) -> the product's row, -1 where none). A row is a (row group, vpp)
    that holds a plan: an HSDP block holds its grid row's ZeRO plans only."""
    by_zero = keep.any(axis=(1, 3, 5, 6, 7))  # (grid rows, vpp, zero)
    per_vpp, sharded = by_zero.any(axis=2), by_zero[..., axes["zero"] > 0].any(axis=2)
    hsdp = _along(groups["zero_shard"] > 0, 0, 2)
    held = np.where(hsdp, sharded[groups["row"]], per_vpp[groups["row"]])
    g, v = np.nonzero(held)
    fields = {f: rows[f][groups["row"][g]] for f in ("pp", "dp", "tp", "cp")}
    fields |= {"zero_shard": groups["zero_shard"][g], "vpp": axes["vpp"][v]}
    order = np.lexsort([fields[f] for f in reversed(ROW_FIELDS)])
    row_of = np.full(held.shape, -1, dtype=np.intp)
    row_of[g[order], v[order]] = np.arange(len(order))
    return {f: values[order] for f, values in fields.items()}, row_of


def _grad_accum(held, numbers, global_batch, shape) -> np.ndarray:
    """Micro-batches per step over (micro-batches, rows), the product's last two axes: 1 in
    the cells no plan occupies (read by no plan, and no division by zero there). `held`: the
    (micro-batch, row) cells the plans occupy, flat."""
    per_rank = global_batch // numbers["dp"].reshape(1, -1)
    accum = per_rank // numbers["micro_batch"].reshape(-1, 1)
    occupied = np.zeros(accum.size, dtype=bool)
    occupied[held] = True
    out = np.where(occupied.reshape(accum.shape), accum, 1)
    return out.reshape((1,) * (len(shape) - 2) + shape[-2:])


def enumerate_plan_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    policy: Policy = DEFAULT_POLICY,
) -> PlanNumbers:
    """Every plan the validation accepts under `policy`, in enumeration order: one array per
    field (a field every plan shares, one number)."""
    grid = enumerate_plan_grid(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    return grid.take(np.arange(len(grid)))


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
