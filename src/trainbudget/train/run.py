"""One training run as two objects: `Run`, what it is built from and keeps for its whole life
(frozen), and `RunState`, the little that changes as it goes. The loop (train.loop) and the
recovery module (train.checkpointing.recovery) are the only writers of the state, each change
through one of `RunState`'s methods; every other module only reads it.

The objects a `Run` holds keep their own state behind their own methods (the model's weights,
the optimizer's moments, the batch stream's position, the guard's counters, the scaler's
scale): checkpoints save and restore those (train.checkpointing.resume)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainbudget.train.launch.exits import SecondSignal

if TYPE_CHECKING:  # annotations only: importing these here would load torch and the trainer
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from trainbudget.core.spec.model_spec import ModelSpec
    from trainbudget.train.data import RunData, TrainBatches
    from trainbudget.train.guard import StepGuard
    from trainbudget.train.launch.distributed import DistInfo
    from trainbudget.train.launch.faults import Faults
    from trainbudget.train.observe.accounting import Budget
    from trainbudget.train.observe.comm_count import CommCounter
    from trainbudget.train.observe.rank_memory import PeakMeter
    from trainbudget.train.spec.config import TrainConfig
    from trainbudget.train.spec.schedule import Schedule


@dataclass(kw_only=True, eq=False)
class RunState:
    """What changes during a run, beside the objects that checkpoints save."""

    step: int = 0
    """Iterations done (skipped non-finite steps count; a rollback goes back)."""
    signal: int = 0
    """The first SIGTERM/SIGINT received (0: none): the run saves and stops after this step."""
    last_save_step: int = -1
    """The step of the newest checkpoint this process wrote or resumed from (-1: none)."""
    last_save_time: float = field(default_factory=time.monotonic)
    """time.monotonic() at that checkpoint (or at the start): the clock of --checkpoint-minutes."""
    save_seconds: float | None = None
    """How long the newest checkpoint took to write (None: none written yet)."""
    checkpoints_written: int = 0
    step_times: list[float] = field(default_factory=list)
    """Seconds of each step after the first of this process (which includes warm-up)."""
    step_cpu_seconds: float = 0.0
    """This process's CPU seconds (all its threads) over the steps of `step_times`."""
    first_loss: float | None = None
    """The first loss logged by this process."""
    last_loss: float | None = None
    """The newest loss logged."""
    saving: bool = False
    """A checkpoint is being written: a second signal is held until it is whole (torch.save
    turns an exception raised inside it into a RuntimeError, and the checkpoint is lost)."""
    held_signal: int = 0
    """A second signal that came while `saving` (0: none)."""

    def advance(self, seconds: float | None, cpu_seconds: float = 0.0) -> None:
        """One iteration done; `seconds`: its time, None to leave it out of the statistics;
        `cpu_seconds`: the process's CPU time meanwhile."""
        self.step += 1
        if seconds is not None:
            self.step_times.append(seconds)
            self.step_cpu_seconds += cpu_seconds

    def restored(self, step: int, *, saved: bool) -> None:
        """Back at `step` from a checkpoint: a resume (`saved`: that checkpoint is this run's
        newest, not to be written again) or a rollback (the next save is due as scheduled)."""
        self.step = step
        if saved:
            self.last_save_step = step

    def checkpoint_written(self, seconds: float) -> None:
        self.save_seconds = seconds
        self.last_save_step, self.last_save_time = self.step, time.monotonic()
        self.checkpoints_written += 1

    def logged(self, loss: float) -> None:
        if self.first_loss is None:
            self.first_loss = loss
        self.last_loss = loss

    def interrupted(self, signum: int) -> None:
        self.signal = signum

    @contextlib.contextmanager
    def saving_checkpoint(self):
        """Around a checkpoint's write: a second signal meanwhile is raised once it is whole."""
        self.saving = True
        try:
            yield
        finally:
            self.saving = False
        if self.held_signal:
            raise SecondSignal(self.held_signal, self.step, saved=True)


@dataclass(frozen=True, kw_only=True, eq=False)
class Run:
    """Everything the steps of one run share: built once (train.loop), never reassigned."""

    cfg: TrainConfig
    """The config with the plan file applied (preflight)."""
    info: DistInfo
    device: torch.device
    """This rank's device."""
    spec: ModelSpec
    data: RunData
    model: torch.nn.Module
    """The model itself (FSDP2 shards it in place): state dicts, evaluation, clipping."""
    net: torch.nn.Module
    """What the steps call: the model, or DDP around it, compiled when asked."""
    optimizer: torch.optim.Optimizer
    batches: TrainBatches
    schedule: Schedule
    budget: Budget
    """The predictions for the layout that runs (train.observe.accounting)."""
    guard: StepGuard
    scaler: torch.amp.GradScaler
    autocast: contextlib.AbstractContextManager
    """torch.autocast for the amp-* precisions, a no-op context otherwise."""
    faults: Faults
    checkpoint_root: Path
    tokens_per_step: int
    """Tokens of one optimizer step over all ranks (the global batch x seq_len)."""
    probes: tuple[tuple[str, str], ...] = ()
    """(prompt, target) pairs whose probability is logged."""
    mesh: DeviceMesh | None = None
    """The run's one device mesh (train.parallel.parallelize); None when running alone."""
    peak_meter: PeakMeter
    """This rank's peak memory (train.observe.rank_memory)."""
    comm_counter: CommCounter
    """This rank's collectives of one step, counted (train.observe.comm_count)."""
    state: RunState = field(default_factory=RunState)
    """The part that changes (see RunState for who changes it)."""
