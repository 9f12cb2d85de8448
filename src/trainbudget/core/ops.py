"""Arithmetic that serves one plan and a grid of a million: every term of the step and memory
model is written once, over an `Ops` namespace, and called with plain numbers (`SCALAR`) for
`estimate` or with numpy arrays (`numpy_ops()`) for the planner's grid.

Term functions use `+ - * / // % **` and comparisons directly (both numbers and arrays support
them) and go through `xp` only for what Python spells differently for the two: a branch
(`where`), `maximum`/`minimum`, `not_` (Python's `not` and numpy's `~` disagree on bools),
`bit_length` and `ceil`. Both branches of `where` are evaluated, so neither may divide by zero.
Numpy is imported only when the grid asks for it, so the one-plan path starts without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ops:
    name: str
    where: Callable[[Any, Any, Any], Any]
    """where(condition, a, b): a where the condition holds, else b."""
    maximum: Callable[[Any, Any], Any]
    minimum: Callable[[Any, Any], Any]
    not_: Callable[[Any], Any]
    bit_length: Callable[[Any], Any]
    """int.bit_length of non-negative integers (for arrays: exact below 2**53)."""
    ceil: Callable[[Any], Any]
    """Ceiling, the value -(-x // 1) gives (a float for a float). On arrays numpy's ceil: the
    same values, and some 50 times faster than its floor division of floats."""
    is_array: bool


def _where(condition: Any, a: Any, b: Any) -> Any:
    return a if condition else b


SCALAR = Ops(
    name="scalar",
    where=_where,
    maximum=max,
    minimum=min,
    not_=lambda x: not x,
    bit_length=lambda x: int(x).bit_length(),
    ceil=lambda x: -(-x // 1),
    is_array=False,
)


_NUMPY: Ops | None = None


def numpy_ops() -> Ops:
    """The array namespace (imports numpy on first use)."""
    global _NUMPY
    if _NUMPY is None:
        import numpy as np

        def where(condition: Any, a: Any, b: Any) -> Any:
            # a condition that is one number (a column the plans agree on) picks a branch
            # without an element-wise pass
            if isinstance(condition, bool | np.bool_):
                return a if condition else b
            return np.where(condition, a, b)

        _NUMPY = Ops(
            name="numpy",
            where=where,
            maximum=np.maximum,
            minimum=np.minimum,
            not_=np.logical_not,
            bit_length=lambda x: np.frexp(np.asarray(x, dtype=np.float64))[1],
            ceil=np.ceil,
            is_array=True,
        )
    return _NUMPY
