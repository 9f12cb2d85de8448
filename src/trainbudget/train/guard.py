"""Numerical faults: a step whose loss or gradient norm is not finite never reaches the
optimizer, and a loss spike triggers the seed article's remedy (roll back to the last good
checkpoint and skip the batches that led to it; PaLM, Chowdhery et al. 2022, arXiv 2204.02311,
Sec. 5.1: "we re-started training from a checkpoint roughly 100 steps before the spike started,
and skipped roughly 200-500 data batches").

Pure Python (no torch): the loop hands in floats and acts on the verdicts. Everything here is
part of the checkpoint (`state_dict`), so a resumed run judges its steps exactly as the
uninterrupted one did.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826
"""sigma = 1.4826 x median absolute deviation for normally distributed values (Rousseeuw and
Croux 1993): a spread estimate that one outlier cannot inflate, unlike the standard deviation."""


@dataclass(frozen=True)
class Verdict:
    """What to do with one step: `reason` is None for a good step, else 'nonfinite' or 'spike'."""

    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


class SpikeDetector:
    """A loss is a spike when it exceeds the median of the recent window by more than
    `sigmas` robust standard deviations AND by `min_excess` x |median| (the second bound keeps a
    flat, noise-free curve -- MAD near 0 -- from flagging tiny wiggles).

    Only finite losses of accepted steps enter the window: a NaN or a spike never shifts the
    median, so a NaN step cannot stall later steps. Judging starts once half the window (at
    least 8 losses) is filled; before that every finite loss is accepted."""

    def __init__(self, window: int, sigmas: float, min_excess: float) -> None:
        self.window, self.sigmas, self.min_excess = window, sigmas, min_excess
        self.losses: deque[float] = deque(maxlen=max(window, 1))

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def threshold(self) -> float | None:
        """The loss above which a step is a spike (None while the window is too short)."""
        finite = [x for x in self.losses if math.isfinite(x)]
        if not self.enabled or len(finite) < max(8, self.window // 2):
            return None
        median = statistics.median(finite)
        mad = statistics.median(abs(x - median) for x in finite)
        return median + max(self.sigmas * MAD_TO_SIGMA * mad, self.min_excess * abs(median))

    def judge(self, loss: float) -> Verdict:
        limit = self.threshold()
        if limit is not None and loss > limit:
            return Verdict("spike", f"loss {loss:.4g} > {limit:.4g} (window median + bound)")
        return Verdict()

    def accept(self, loss: float) -> None:
        if self.enabled and math.isfinite(loss):
            self.losses.append(loss)

    def state_dict(self) -> dict:
        return {"losses": list(self.losses)}

    def load_state_dict(self, state: dict) -> None:
        self.losses.clear()
        self.losses.extend(float(x) for x in state["losses"])


class StepGuard:
    """Counts and judges steps: non-finite first (they skip the update), then spikes."""

    def __init__(self, *, window: int, sigmas: float, min_excess: float) -> None:
        self.spikes = SpikeDetector(window, sigmas, min_excess)
        self.skipped_nonfinite = 0
        self.consecutive_skips = 0
        self.rollbacks = 0
        self.skipped_data_steps: list[int] = []
        """Data steps (0-based positions of the batch stream) dropped by rollbacks."""

    def judge(self, loss: float, grad_norm: float) -> Verdict:
        if not math.isfinite(loss):
            return Verdict("nonfinite", f"loss is {loss}")
        if not math.isfinite(grad_norm):
            return Verdict("nonfinite", f"gradient norm is {grad_norm}")
        return self.spikes.judge(loss)

    def record(self, loss: float, verdict: Verdict) -> None:
        """After the step: accepted losses feed the window; skips are counted."""
        if verdict.reason == "nonfinite":
            self.skipped_nonfinite += 1
            self.consecutive_skips += 1
            return
        self.consecutive_skips = 0
        if verdict.ok:
            self.spikes.accept(loss)

    def rolled_back(self, data_steps: range) -> None:
        """A rollback happened, dropping these data steps (0-based batch stream positions)."""
        self.rollbacks += 1
        self.skipped_data_steps.extend(data_steps)

    def counters(self) -> dict:
        return {
            "skipped_nonfinite": self.skipped_nonfinite,
            "rollbacks": self.rollbacks,
            "skipped_data_steps": len(self.skipped_data_steps),
        }

    def state_dict(self) -> dict:
        return {
            "window": self.spikes.state_dict(),
            "skipped_nonfinite": self.skipped_nonfinite,
            "consecutive_skips": self.consecutive_skips,
            "rollbacks": self.rollbacks,
            "skipped_data_steps": list(self.skipped_data_steps),
        }

    def load_state_dict(self, state: dict, *, counters: bool = True) -> None:
        """Restore; `counters=False` (a rollback) takes the checkpoint's window but keeps this
        run's counts, so a rollback is never forgotten and retries stay bounded."""
        self.spikes.load_state_dict(state["window"])
        if counters:
            self.skipped_nonfinite = int(state["skipped_nonfinite"])
            self.consecutive_skips = int(state["consecutive_skips"])
            self.rollbacks = int(state["rollbacks"])
            self.skipped_data_steps = [int(s) for s in state["skipped_data_steps"]]
