"""Learning-rate schedules: linear warmup, then cosine, linear, constant or warmup-stable-decay.

`step` is the number of optimizer steps already taken (0 for the first update); a run of
`total_steps` steps uses steps 0 .. total_steps - 1. With W = warmup_steps, T = total_steps,
lr0 = base_lr, lr_min = base_lr * min_lr_ratio:

- warmup, step < W: lr0 * (step + 1) / (W + 1) -- the first step already moves (lr0 / (W + 1)),
  the rate rises linearly and reaches lr0 at step W (nanoGPT's convention).
- after warmup, with progress q = (step - W) / (T - W) in [0, 1]:
  - "cosine": lr_min + (lr0 - lr_min) * (1 + cos(pi * q)) / 2
  - "linear": lr_min + (lr0 - lr_min) * (1 - q)
  - "constant": lr0 (min_lr_ratio unused)
  - "wsd" (warmup-stable-decay; Hu et al. 2024, "MiniCPM", arXiv 2404.06395, Sec. 4): lr0
    until the decay starts at D = max(W, T - decay_fraction * T), then linearly to lr_min:
    lr_min + (lr0 - lr_min) * (1 - (step - D) / (T - D)). MiniCPM decays exponentially in
    the last ~10 % of training; the decay here is linear.
- step >= T: the end value (lr_min; lr0 for "constant"), also when W == T.

Plain arithmetic: importing this module does not import torch.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import SpecError, unknown_key

__all__ = ["SCHEDULES", "Schedule", "apply_lr", "lr_at"]

SCHEDULES = ("constant", "cosine", "linear", "wsd")


def _non_negative_int(field: str, value: object) -> int:
    if isinstance(value, bool):
        raise SpecError(field, value, "must be a non-negative integer")
    try:
        n = operator.index(value)
    except TypeError:
        raise SpecError(field, value, "must be a non-negative integer") from None
    if n < 0:
        raise SpecError(field, value, "must be a non-negative integer")
    return n


def _in_unit_interval(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(field, value, "must be in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A learning-rate schedule, validated on construction (SpecError naming the field: the
    kind's field is reported as "schedule", the name the run config uses)."""

    kind: str
    """One of SCHEDULES: "constant", "cosine", "linear", "wsd"."""
    base_lr: float
    """The peak rate, reached at the end of warmup."""
    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.1
    """The final rate as a fraction of base_lr (cosine, linear, wsd)."""
    decay_fraction: float = 0.2
    """wsd only: the fraction of total_steps over which the rate decays at the end."""

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise unknown_key("schedule", self.kind, SCHEDULES)
        lr_ok = isinstance(self.base_lr, (int, float)) and not isinstance(self.base_lr, bool)
        if not (lr_ok and math.isfinite(self.base_lr) and self.base_lr >= 0):
            raise SpecError("base_lr", self.base_lr, "must be a finite number >= 0")
        warmup = _non_negative_int("warmup_steps", self.warmup_steps)
        total = _non_negative_int("total_steps", self.total_steps)
        if total == 0:
            raise SpecError("total_steps", self.total_steps, "must be a positive integer")
        if warmup > total:
            raise SpecError(
                "warmup_steps", self.warmup_steps, f"must not exceed total_steps ({total})"
            )
        _in_unit_interval("min_lr_ratio", self.min_lr_ratio)
        _in_unit_interval("decay_fraction", self.decay_fraction)

    @property
    def min_lr(self) -> float:
        return self.base_lr * self.min_lr_ratio

    @property
    def decay_start(self) -> float:
        """The step at which the rate starts to fall: warmup_steps, or for "wsd" the start of
        the final decay (never before the end of warmup)."""
        if self.kind == "wsd":
            return max(self.warmup_steps, self.total_steps - self.decay_fraction * self.total_steps)
        return self.warmup_steps

    def lr_at(self, step: int) -> float:
        """The learning rate for optimizer step `step` (0-based); see the module docstring."""
        step = _non_negative_int("step", step)
        lr0, lr_min = self.base_lr, self.min_lr
        if step < self.warmup_steps:
            return lr0 * (step + 1) / (self.warmup_steps + 1)
        if self.kind == "constant":
            return lr0
        if step >= self.total_steps:
            return lr_min
        start = self.decay_start
        if step <= start:
            return lr0  # only "wsd" has a stable phase; elsewhere start == warmup_steps
        q = (step - start) / (self.total_steps - start)
        if self.kind == "cosine":
            return lr_min + (lr0 - lr_min) * 0.5 * (1.0 + math.cos(math.pi * q))
        return lr_min + (lr0 - lr_min) * (1.0 - q)  # "linear" and the decay of "wsd"

    __call__ = lr_at


def lr_at(
    step: int,
    *,
    schedule: str,
    base_lr: float,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.1,
    decay_fraction: float = 0.2,
) -> float:
    """`Schedule(kind=schedule, ...).lr_at(step)`: arguments validated the same way."""
    return Schedule(
        kind=schedule,
        base_lr=base_lr,
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        min_lr_ratio=min_lr_ratio,
        decay_fraction=decay_fraction,
    ).lr_at(step)


def apply_lr(optimizer: Any, lr: float) -> None:
    """Set every param group's "lr" to `lr` (a tensor-valued lr is filled in place, keeping
    the tensor a compiled or capturable step holds). An optimizer that wraps another as
    `.inner` (model.optim.MasterWeightOptimizer) has the inner one's groups set too, since
    those are the ones its step reads."""
    for group in optimizer.param_groups:
        current = group.get("lr")
        if hasattr(current, "fill_"):
            current.fill_(lr)
        else:
            group["lr"] = lr
    inner = getattr(optimizer, "inner", None)
    if inner is not None and hasattr(inner, "param_groups"):
        apply_lr(inner, lr)
