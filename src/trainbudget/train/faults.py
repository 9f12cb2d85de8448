"""Fault injection for the reliability tests: NaN losses and gradients, loss spikes and worker
deaths at chosen steps, so that every recovery path runs under pytest exactly as it would in a
real incident.

Off unless asked for: `train(cfg, faults=Faults(...))` in-process, or the environment variable
TRAINBUDGET_FAULTS holding the same fields as JSON for subprocesses and torchrun workers, e.g.
    TRAINBUDGET_FAULTS='{"kill_step": 7, "kill_rank": 1}'
Numerical faults are tied to batches -- batch N is the N-th global batch of the stream, the
batch of step N until a rollback skips some -- since a bad batch is what a skip or a rollback
must get past; the kill is tied to the step (step N = the N-th iteration, as logged).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, fields

from trainbudget.core.errors import SpecError

ENV = "TRAINBUDGET_FAULTS"


@dataclass(frozen=True)
class Faults:
    nan_loss_batches: tuple[int, ...] = ()
    """The loss of these batches becomes NaN (so do the gradients)."""
    nan_grad_batches: tuple[int, ...] = ()
    """One gradient becomes NaN after the backward pass of these batches (the loss stays)."""
    spike_batches: tuple[int, ...] = ()
    """The loss of these batches is multiplied by spike_factor (a bad batch)."""
    spike_factor: float = 10.0
    kill_step: int = 0
    """SIGKILL this process right after step N's update (0: never)..."""
    kill_rank: int = 0
    """...on this rank only..."""
    kill_attempt: int = 0
    """...and only in this torchrun attempt (TORCHELASTIC_RESTART_COUNT), so a restarted worker
    runs through."""
    term_step: int = 0
    """Send SIGTERM to this process (every rank) right after step N's update (0: never): what a
    scheduler does before preempting a job."""
    stop_step: int = 0
    """SIGSTOP this process right after step N's update (0: never), on stop_rank only: a rank
    that hangs (its peers wait in the next collective)."""
    stop_rank: int = 0
    interrupt_twice_step: int = 0
    """Send SIGINT twice to this process (every rank) right after step N's update (0: never):
    Ctrl-C pressed twice."""

    @classmethod
    def from_env(cls) -> Faults:
        text = os.environ.get(ENV, "")
        if not text:
            return cls()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(ENV, text, f"is not JSON ({err.msg})") from None
        known = {f.name for f in fields(cls)}
        if not isinstance(doc, dict) or set(doc) - known:
            raise SpecError(ENV, text, "must be an object with keys " + ", ".join(sorted(known)))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})

    def loss_factor(self, batch: int) -> float | None:
        """What to multiply this batch's loss by (None: nothing)."""
        if batch in self.nan_loss_batches:
            return float("nan")
        if batch in self.spike_batches:
            return self.spike_factor
        return None

    def maybe_kill(self, step: int, rank: int) -> None:
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if self.kill_step == step and self.kill_rank == rank and self.kill_attempt == attempt:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.term_step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.stop_step == step and self.stop_rank == rank:
            os.kill(os.getpid(), signal.SIGSTOP)
        if self.interrupt_twice_step == step:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
