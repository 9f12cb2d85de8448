"""A planner's plans laid on the product of their axes, so that each term is computed on the few
axes it depends on and broadcast only where terms combine.

A search's plans (one array element per plan, `layout.PlanNumbers`) are almost a product:
every valid row -- a (dp, tp, pp, cp, HSDP shard, vpp) combination -- with every optimizer
offload, ZeRO stage, ep, recompute policy, sp and micro-batch, less the combinations a rule
forbids. Laid on that product, each field an array of length 1 on the axes it does not vary
along (shape (1, 1, 1, 1, 1, 1, rows) for a row field, (1, 1, 1, 1, 1, micro-batches, 1) for
the micro-batch), the same term functions (written once over `core.ops`) compute a layer's
saved tensors once per (row, recompute, sp, micro-batch) instead of once per plan, and a model
state once per (row, ZeRO stage): numpy's broadcasting does the bookkeeping. Only the sums
of terms that vary along every axis (a phase's total, the step's) run on the whole product,
which holds 1.6-1.9 times as many cells as there are plans on the benchmark's searches (the
forbidden combinations, computed and never read).

The rows are the last axis, the one numpy's loops run along: an operation between arrays of a
few axes each then runs long inner loops over the rows, some ten times faster than with the
rows first (where the inner loops would run over the few ZeRO stages or recompute policies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainbudget.core.parallel.layout import PlanNumbers

AXES = ("offload_optimizer", "zero", "ep", "recompute", "sp", "micro_batch")
"""Fields laid along an axis of their own, in this order, before the rows' axis (the last);
every other field that varies between plans is one of the rows' (grad_accum, set by the
data-parallel degree and the micro-batch, spans the micro-batch's axis and the rows'). The
axes a layer's saved tensors vary along (recompute, sp, micro-batch) come last, next to the
rows, so that those arrays are whole blocks of the product (measured: 6 % faster searches than
with sp a row field and recompute first)."""
RENUMBER_AT = 1 << 14
"""Largest row key before the rows are numbered afresh (a table of that many entries: small
enough to stay in the processor's cache)."""
SMALL_VALUES = 1 << 8
"""A row field whose values reach this is keyed by its values' codes, not its values."""
MAX_CELLS_PER_PLAN = 3.0
"""A set of plans whose product would hold more cells than this many per plan is evaluated plan
by plan (a few scattered plans, not a search's grid): the product would cost more than it
saves."""


@dataclass(frozen=True)
class ProductGrid:
    numbers: PlanNumbers
    """Each field one number (shared by every plan) or an array over (*AXES, rows), of length
    1 on the axes it does not vary along."""
    at: np.ndarray
    """Plan i of the set is cell at[i] of the product (flattened, C order)."""
    shape: tuple[int, ...]
    row: np.ndarray
    """Plan i's row (at[i] % rows), kept: a remainder per plan is dearer than most terms (numpy
    divides by a number with a multiply, but takes each remainder by a hardware division: a
    quarter of a millisecond for 50,000 plans, measured)."""

    def __len__(self) -> int:
        return len(self.at)

    def gather(self, values: np.ndarray) -> np.ndarray:
        """One element per plan of the set, from `values` over the product (or broadcast to
        it): the cells the plans occupy. An array over the last axes alone (length 1 on the
        others) is read there, without being spread over the whole product first."""
        shape = np.shape(values)
        if shape == self.shape:
            return np.ravel(values)[self.at]
        lead = len(self.shape) - len(shape)
        trailing = next((k for k, s in enumerate(shape) if s != 1), len(shape))
        if shape[trailing:] == self.shape[lead + trailing :]:
            inner = math.prod(shape[trailing:])
            if inner == 1:
                return np.ravel(values)[np.zeros_like(self.at)]
            if inner == self.shape[-1]:  # over the rows alone
                return np.ravel(values)[self.row]
            return np.ravel(values)[self.at - (self.at // inner) * inner]  # at % inner, faster
        return np.ravel(np.broadcast_to(values, self.shape))[self.at]

    def take(self, index: np.ndarray) -> PlanNumbers:
        """Plans `index` of the set, one array element per plan (a field every plan shares
        stays one number)."""
        cell = np.unravel_index(self.at[index], self.shape)
        first = np.zeros_like(cell[0])  # an axis of length 1 (one array element per plan)

        def at(value):
            if not getattr(value, "ndim", 0):
                return value
            lead = len(self.shape) - value.ndim
            picks = (cell[lead + k] if s > 1 else first for k, s in enumerate(value.shape))
            return value[tuple(picks)]

        return PlanNumbers(**{f: at(v) for f, v in vars(self.numbers).items()})

    def subset(self, index: np.ndarray) -> ProductGrid:
        """The product grid of plans `index` of the set: the rows that hold any of them."""
        row = self.row[index]
        cell = (self.at[index] - row) // self.shape[-1]  # exact
        held = np.zeros(self.shape[-1], dtype=bool)
        held[row] = True
        n_rows = int(held.sum())
        row = (np.cumsum(held) - 1)[row]
        return ProductGrid(
            numbers=self.numbers.take_rows(np.flatnonzero(held)),
            at=cell * n_rows + row,
            shape=(*self.shape[:-1], n_rows),
            row=row,
        )


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """(the distinct values ascending, each element's index among them: 0 for all where
    there is one value). Small non-negative integers -- every plan field -- by a table (no
    sort)."""
    low, high = values.min(), values.max()
    if low == high:
        return values[:1], 0
    if values.dtype == bool:  # as 0 and 1 (a boolean index would be a mask)
        return np.array([False, True]), values.astype(np.intp)
    if values.dtype.kind not in "biu" or low < 0 or high >= 1 << 20:
        return np.unique(values, return_inverse=True)
    present = np.zeros(int(high) + 1, dtype=bool)
    present[values] = True
    code = np.cumsum(present, dtype=np.intp) - 1
    return np.flatnonzero(present).astype(values.dtype), code[values]


def _row_key(varying: dict[str, np.ndarray], fields: list[str]) -> np.ndarray:
    """Each plan's row, numbered from 0 in the order of the fields' values: a mixed-radix key
    of the fields' values (their codes, for a field of large values), renumbered (to at most
    one number per plan) before it would pass RENUMBER_AT, so that every table stays small."""
    key, radix = np.zeros(len(next(iter(varying.values()))), dtype=np.intp), 1
    for f in fields:
        values = varying[f]
        low, high = int(values.min()), int(values.max())
        if low == high:
            continue
        if low < 0 or high >= SMALL_VALUES:
            values = _codes(values)[1]
            high = int(values.max())
        if radix * (high + 1) > RENUMBER_AT:
            key = _codes(key)[1]
            radix = int(key.max()) + 1
        key = key * (high + 1) + values
        radix *= high + 1
    codes = _codes(key)[1]
    return codes if np.ndim(codes) else np.zeros_like(key)


def product_grid(plans: PlanNumbers) -> ProductGrid | None:
    """`plans` (one array element per plan) on the product of AXES and their rows; None where
    that product would exceed MAX_CELLS_PER_PLAN cells per plan, or where grad_accum is not one
    number per (micro-batch, row)."""
    n = len(plans)
    varying = {f: v for f, v in vars(plans).items() if getattr(v, "ndim", 0)}
    if n == 0 or any(v.shape != (n,) for v in varying.values()):
        return None
    axes = {f: _codes(varying[f]) for f in AXES if f in varying}
    # the pipeline degree first: the rows in pipeline order (`gpu_memory.peak_bytes` takes
    # them in parts by pipeline degree, slices of the rows so laid)
    row_fields = sorted(
        (f for f in varying if f not in AXES and f != "grad_accum"), key=lambda f: f != "pp"
    )
    row = _row_key(varying, row_fields)
    n_rows = int(row.max()) + 1
    shape = (*(len(axes[f][0]) if f in axes else 1 for f in AXES), n_rows)
    if np.prod(shape, dtype=np.float64) > MAX_CELLS_PER_PLAN * n:
        return None
    one = np.empty(n_rows, dtype=np.intp)
    one[row] = np.arange(n)  # a plan of each row (they agree on every row field)
    fields = {f: _along(varying[f][one], len(AXES), len(shape)) for f in row_fields}
    at = row
    stride = n_rows
    for k in reversed(range(len(AXES))):  # the flat index, C order: the rows vary fastest
        f = AXES[k]
        if f in axes:
            fields[f] = _along(axes[f][0], k, len(shape))
            if np.ndim(axes[f][1]):
                at = at + axes[f][1] * stride
        stride *= shape[k]
    if "grad_accum" in varying:
        micro_batch = axes["micro_batch"][1] if "micro_batch" in axes else 0
        accum = _per_micro_batch_and_row(plans.grad_accum, micro_batch, row, shape)
        if accum is None:
            return None
        fields["grad_accum"] = accum
    shared = {f: v for f, v in vars(plans).items() if f not in varying}
    return ProductGrid(numbers=PlanNumbers(**shared, **fields), at=at, shape=shape, row=row)


def per_distinct_rows(fn, numbers: PlanNumbers, fields: tuple[str, ...]):
    """fn(numbers) -- a term function over a product grid that reads only `fields` -- computed
    once per distinct combination of the rows' values of those fields, then laid on every row:
    fn's result (a dataclass of numbers and arrays) with each array taken along the rows. The
    fields fn is not to read are `_Hidden` in what it sees, so that reading one fails."""
    rows = {
        f: np.ravel(v)
        for f, v in vars(numbers).items()
        if f in fields and getattr(v, "ndim", 0) and v.shape[-1] > 1
    }
    n_rows = next((len(v) for v in rows.values()), 1)
    distinct = _row_key(rows, list(rows)) if rows else np.zeros(n_rows, dtype=np.intp)
    one = np.empty(int(distinct.max()) + 1, dtype=np.intp)
    one[distinct] = np.arange(n_rows)  # a row of each combination
    seen = PlanNumbers(
        **{
            f: (v[..., one] if f in rows else v) if f in fields else _HIDDEN
            for f, v in vars(numbers).items()
        }
    )
    out = fn(seen)
    return type(out)(**{k: _along_rows(v, distinct) for k, v in vars(out).items()})


def _along_rows(value, distinct: np.ndarray):
    """`value` (over the distinct combinations, on the last axis) on every row."""
    if getattr(value, "ndim", 0) and value.shape[-1] > 1:
        return value[..., distinct]
    return value


class _Hidden:
    """A plan field a term function is not to read: any use of it raises."""

    def _refuse(self, *args, **kwargs):
        raise AttributeError("a term function read a plan field outside its declared fields")

    __array__ = __bool__ = __index__ = __float__ = __int__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __invert__ = __neg__ = __pow__ = _refuse
    __hash__ = None


_HIDDEN = _Hidden()


def _per_micro_batch_and_row(accum, micro_batch, row, shape) -> np.ndarray | None:
    """grad_accum over (micro-batches, rows), the last two axes: 1 in the cells no plan
    occupies (read by no plan, and no division by zero there); None if two plans of one cell
    disagree."""
    out = np.ones(shape[-2:], dtype=accum.dtype)
    out[micro_batch, row] = accum
    if not np.array_equal(out[micro_batch, row], accum):
        return None
    return out.reshape((1,) * (len(shape) - 2) + shape[-2:])


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """`values` laid along axis `axis` of `ndim` (length 1 on the others)."""
    return values.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))
