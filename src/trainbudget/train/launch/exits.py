"""How a training process ends when it cannot finish its run: the two stops that are not an
orderly checkpoint-and-exit, their exit codes, and the one line each prints.

Pure Python (no torch): the CLI imports it even when Ctrl-C lands while torch is loading.

Exit codes (beside 0, 1 = halted by the guard, 2 = bad input):
- 3 (`RanksLost`): the ranks could not meet or lost each other -- a rendezvous or a collective
  outlived --collective-timeout-seconds, or a peer's connection closed. Non-zero, so that
  torchrun (--max-restarts) restarts the job; the newest checkpoint is intact.
- 128 + the signal (130 for SIGINT, 143 for SIGTERM), the shell's convention, for a stop by a
  signal that saved no checkpoint: a second signal, Ctrl-C outside the training loop, or a
  signal while this rank waits in a collective for ranks that are gone (a consistent
  checkpoint needs every rank).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

RANKS_LOST_EXIT_CODE = 3


class RanksLost(RuntimeError):
    """Ranks did not arrive in time (rendezvous or a collective), or a peer is gone; the
    message names the wait and the missing ranks."""

    exit_code = RANKS_LOST_EXIT_CODE


class SecondSignal(KeyboardInterrupt):
    """A second SIGTERM/SIGINT: the run stops at once, without a checkpoint (or, while one is
    written, once it is whole: train.run.RunState.saving_checkpoint). A KeyboardInterrupt, so
    that no `except Exception` on the way holds it up."""

    def __init__(self, signum: int, step: int, *, saved: bool = False) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        # `saved`: it came while a checkpoint was written, and was held until that was whole
        what = (
            f"stopped once the checkpoint of step {step} was whole"
            if saved
            else "stopped at once, without a checkpoint (the newest one is kept)"
        )
        super().__init__(f"second {name} at step {step}: {what}; continue with --resume")


def interrupted_line(err: KeyboardInterrupt) -> tuple[str, int]:
    """(the line to print, the exit code) for a KeyboardInterrupt that reached the CLI."""
    if isinstance(err, SecondSignal):
        return str(err), err.exit_code
    return (
        "interrupted by SIGINT outside the training loop (start-up or shut-down): stopped "
        "without a checkpoint",
        128 + signal.SIGINT,
    )


_EXITING = threading.Lock()


def abandon(line: str, code: int) -> int:
    """Print `line` on stderr and end with `code`. With a process group up, the process ends
    at once (os._exit): its peers are gone or stopped, so its gloo threads cannot be joined,
    and a normal interpreter exit with them alive can abort (train.launch.distributed.shutdown).
    Without one, `code` is returned for the CLI to exit with. The first caller wins: a second
    one (the signal watcher thread and the main thread at once) waits for the process to end."""
    _EXITING.acquire()
    sys.stdout.flush()
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        os._exit(code)
    _EXITING.release()
    return code


def ranks_text(ranks: list[int]) -> str:
    """'rank 2', 'ranks 1, 3', 'ranks 4-1023' (runs of 3 or more as a range)."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
            start = i
    return "ranks " + ", ".join(parts)
