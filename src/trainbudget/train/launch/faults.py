"""Fault injection for the reliability tests: NaN losses and gradients, loss spikes and worker
deaths at chosen steps, so that every recovery path runs under pytest exactly as it would in a
real incident.

Off unless asked for: `train(cfg, faults=Faults(...))` in-process, or the environment variable
TRAINBUDGET_FAULTS holding the same fields as JSON for subprocesses and torchrun workers, e.g.
    TRAINBUDGET_FAULTS='{"kill_step": 7, "kill_rank": 1}'
Disk faults are tied to the metrics record of a step: half of its line is written, then the
write fails with ENOSPC (a full disk) or the process is killed (a crash inside the write). A hold
keeps the run after a step until a file appears, so a test can act while the run is known to be
alive (a second run into the same folder, say) without racing it.
Numerical faults are tied to batches -- batch N is the N-th global batch of the stream, the
batch of step N until a rollback skips some -- since a bad batch is what a skip or a rollback
must get past; the kill is tied to the step (step N = the N-th iteration, as logged).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from trainbudget.core.errors import SpecError

ENV = "TRAINBUDGET_FAULTS"
HOLD_LIMIT_SECONDS = 120.0  # a hold whose test died does not keep the run forever


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
    hold_step: int = 0
    """After step N's update (and its metrics record), wait until the file hold_file exists
    (0: never)."""
    hold_file: str = ""
    metrics_enospc_step: int = 0
    """A metrics record of step N (the first: the run stops there): half of its line is
    written, then the write fails with ENOSPC, as on a full disk (0: never)."""
    metrics_torn_step: int = 0
    """A metrics record of step N (the first: the run dies there): half of its line is
    written, then SIGKILL (0: never)."""
    term_step: int = 0
    """Send SIGTERM to this process (every rank) right after step N's update (0: never): what a
    scheduler does before preempting a job."""
    full_disk_step: int = 0
    """The checkpoint of step N is written into /dev/full (0: never): every write fails with
    ENOSPC, as on a disk that filled up (Linux only)."""
    stop_step: int = 0
    """SIGSTOP this process right after step N's update (0: never), on stop_rank only: a rank
    that hangs (its peers wait in the next collective)."""
    stop_rank: int = 0
    interrupt_twice_step: int = 0
    """Send SIGINT twice to this process (every rank) right after step N's update (0: never):
    Ctrl-C pressed twice."""
    term_twice_in_save_step: int = 0
    """Send SIGTERM twice to this process while step N's checkpoint is written, after its first
    file (0: never): a second signal in the middle of a save."""

    def save_fault(self, step: int) -> Callable[[str], None] | None:
        """The `fault` hook of train.checkpointing.checkpoint.save_checkpoint for `step`."""
        if self.term_twice_in_save_step != step:
            return None

        def fault(point: str) -> None:
            if point.startswith("file-written:"):
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)

        return fault

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

    def metrics_write(self, step: int, fd: int, line: bytes) -> None:
        """Before a metrics record of `step` is written to `fd`: the disk faults, if due (then
        half of `line` is written and this raises or never returns)."""
        if step == 0 or step not in (self.metrics_enospc_step, self.metrics_torn_step):
            return
        os.write(fd, line[: len(line) // 2])
        if step == self.metrics_torn_step:
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def maybe_hold(self, step: int) -> None:
        if self.hold_step == 0 or step != self.hold_step:
            return
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while not Path(self.hold_file).exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # polls a condition; nothing depends on how long it takes

    def maybe_kill(self, step: int, rank: int) -> None:
        self.maybe_hold(step)
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
