"""What a run does when something goes wrong or is due: skip a non-finite step, roll back
after a loss spike, halt when it may not go on, and save a checkpoint every N steps, every T
minutes (or at the Young-Daly interval) and on a signal. The loop (train.loop) calls these at
the end of every iteration. With the loop, the only writer of the run's state (train.run):
`rollback` moves it back to a checkpoint's step, `maybe_save` records each checkpoint."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from trainbudget.core.parallel.reliability import mtbf_seconds, young_interval_seconds
from trainbudget.train.checkpointing.resume import find_checkpoint, log_main, restore_run, save_run
from trainbudget.train.checkpointing.space import NoSpaceError
from trainbudget.train.guard import Verdict

if TYPE_CHECKING:
    from trainbudget.train.observe.metrics import MetricsWriter
    from trainbudget.train.run import Run


class TrainingHalted(RuntimeError):
    """The run stopped itself (non-finite steps or spikes it may not get past); the last
    checkpoint is intact."""


class Interrupted(RuntimeError):
    """SIGTERM/SIGINT: a checkpoint was saved and the run stopped; `--resume` continues it."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


def skip_step(
    run: Run, writer: MetricsWriter, loss: float, grad_norm: float, verdict: Verdict
) -> None:
    step = run.state.step
    writer.write(
        {
            "step": step,
            "event": "skipped_nonfinite",
            "detail": verdict.detail,
            "loss": loss if math.isfinite(loss) else None,
            "grad_norm": grad_norm if math.isfinite(grad_norm) else None,
            **run.guard.counters(),
        }
    )
    log_main(run, f"step {step}: {verdict.detail}; update skipped")
    cfg = run.cfg
    if cfg.on_nonfinite == "halt":
        raise TrainingHalted(
            f"step {step}: {verdict.detail} (on_nonfinite = halt); the last checkpoint is "
            f"in {run.checkpoint_root}"
        )
    if run.guard.consecutive_skips >= cfg.max_consecutive_skips:
        raise TrainingHalted(
            f"{run.guard.consecutive_skips} steps in a row were not finite (max_consecutive_skips"
            f" = {cfg.max_consecutive_skips}); lower the learning rate and resume from "
            f"{run.checkpoint_root}"
        )


def rollback(run: Run, writer: MetricsWriter, loss: float, verdict: Verdict) -> None:
    """The article's remedy for a loss spike: back to the newest good checkpoint, and skip the
    batches since then (the bad batch among them). At most max_rollbacks times."""
    guard, cfg, state = run.guard, run.cfg, run.state
    bad_batch = run.batches.step - 1  # 0-based: the batch just drawn
    if guard.rollbacks >= cfg.max_rollbacks:
        raise TrainingHalted(
            f"loss spike at step {state.step + 1} ({verdict.detail}) after {guard.rollbacks} "
            f"rollbacks (max_rollbacks = {cfg.max_rollbacks})"
        )
    path = find_checkpoint(run)
    if path is None:  # nothing to go back to: drop the batch, keep the weights
        first_bad, target = bad_batch, "none (update skipped)"
        state.advance(None)
    else:
        saved = restore_run(run, path, rollback=True)
        first_bad, target = int(saved["data_step"]), path.name
        state.restored(int(saved["step"]), saved=False)
    guard.rolled_back(range(first_bad, bad_batch + 1))
    run.batches.seek(bad_batch + 1)
    event = {
        "step": state.step,
        "event": "rollback",
        "detail": verdict.detail,
        "loss": loss,
        "checkpoint": target,
        "skipped_batches": [first_bad + 1, bad_batch + 1],
        **guard.counters(),
    }
    writer.write(event)
    log_main(
        run,
        f"loss spike ({verdict.detail}): rolled back to {target}, skipping batches "
        f"{first_bad + 1}-{bad_batch + 1} (rollback {guard.rollbacks}/{cfg.max_rollbacks})",
    )


def _interval_seconds(run: Run) -> float | None:
    minutes, written = run.cfg.checkpoint_minutes, run.state.save_seconds
    if minutes == "auto":
        if written is None:
            return 0.0  # save once early to measure the write time
        mtbf = mtbf_seconds(run.info.world_size, run.cfg.gpu_failure_rate_per_day)
        # Young-Daly: sqrt(2 x write seconds x MTBF); a write of 0 s would mean "always"
        return young_interval_seconds(max(written, 1e-3), mtbf)
    return minutes * 60 if minutes else None


def time_due(run: Run) -> bool:
    interval = _interval_seconds(run)
    return interval is not None and time.monotonic() - run.state.last_save_time >= interval


def maybe_save(run: Run, writer: MetricsWriter, *, time_due: bool, force: bool) -> None:
    every, step = run.cfg.checkpoint_every, run.state.step
    due = force or time_due or step == run.cfg.steps or (every and step % every == 0)
    if not due or run.state.last_save_step == step:
        return
    t = time.perf_counter()
    with run.state.saving_checkpoint():  # a second signal meanwhile: once it is whole
        try:
            path = save_run(run)
        except NoSpaceError as err:  # the disk filled up: stop, the newest checkpoint is intact
            writer.write({"step": step, "event": "checkpoint_failed", "reason": "no space left"})
            raise TrainingHalted(str(err)) from None
        seconds = time.perf_counter() - t
        run.state.checkpoint_written(seconds)
        writer.write({"step": step, "event": "checkpoint", "path": str(path), "seconds": seconds})
