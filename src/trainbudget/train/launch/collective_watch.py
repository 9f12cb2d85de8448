"""Which ranks a waiting rank waits for. Before each phase of the run that holds collectives
(start-up, each step's forward and backward, its loss all-reduce, evaluation, checkpoint,
shut-down) every rank leaves a mark in the rendezvous store: `at/RANK` = "SEQ<TAB>LABEL", SEQ
counting the phases (alike on every rank: they pass the same phases in the same order). A rank
whose collective times out (gloo enforces --collective-timeout-seconds on every collective)
reads the others' marks: those with a smaller SEQ never reached this phase -- the missing ranks,
named with the phase each last reached.

The signal watcher: SIGTERM/SIGINT set a flag the loop reads at the end of its step, but a rank
blocked in a collective does not run Python until the collective returns (Python handlers run
between bytecodes). Python's C-level handler also writes the signal number to a wake-up pipe
(signal.set_wakeup_fd); a thread reads it and, when the main thread waits in a phase that
ranks have not reached, ends the process with one line: no checkpoint can be consistent while
peers are gone. A second signal ends it at once, blocked or not.

Pure Python (no torch): the store is passed in (a torch.distributed.Store).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import threading
import time
from collections.abc import Iterator

from trainbudget.train.exits import RanksLost, abandon, ranks_text

STALL_SECONDS = 1.0
"""After a signal, a phase the main thread has been in this long (a step's collectives take
milliseconds) is checked for missing ranks."""
STORE_ANSWER_SECONDS = 3.0
"""How long a query of the store may take before the store counts as gone with its host:
TCPStore's `check` and `get` wait without a bound when the host is stopped (SIGSTOP)."""
SHOWN_PHASES = 4
"""At most this many distinct 'last reached' phases are named in a message."""


def mark_key(rank: int) -> str:
    return f"at/{rank}"


class Watch:
    """This rank's marks and the reading of everyone's, over the run's store."""

    def __init__(self, store, *, rank: int, world_size: int, timeout_seconds: float, host: str):
        self.store = store
        self.rank, self.world_size = rank, world_size
        self.timeout_seconds = timeout_seconds
        self.host = host
        """Who hosts the store, in words ('rank 0', "torchrun's agent")."""
        self.seq = 0
        self.label = "rendezvous"
        self.since = time.monotonic()

    def arrive(self, label: str) -> None:
        """This rank enters phase `label` (every rank calls it at the same points)."""
        self.seq += 1
        self.label, self.since = label, time.monotonic()
        self.store.set(mark_key(self.rank), f"{self.seq}\t{label}")

    def missing(self) -> dict[int, str] | None:
        """{rank: the phase it last reached} for the ranks behind this one; None when the store
        did not answer within STORE_ANSWER_SECONDS."""
        return _answer_within(STORE_ANSWER_SECONDS, self._read_marks)

    def _read_marks(self) -> dict[int, str]:
        behind = {}
        for rank in range(self.world_size):
            seq, _, label = self.store.get(mark_key(rank)).decode().partition("\t")
            if int(seq) < self.seq:
                behind[rank] = label
        return behind

    def who_is_missing(self, missing: dict[int, str] | None) -> str:
        """`missing()`'s answer in words."""
        if missing is None:
            return (
                f"the store did not answer within {STORE_ANSWER_SECONDS:g} s either: "
                f"{self.host}, which hosts it, is stopped or gone"
            )
        if not missing:
            return "every rank reached it: one stalled inside it"
        by_label: dict[str, list[int]] = {}
        for rank, label in missing.items():
            by_label.setdefault(label, []).append(rank)
        shown = [f"{ranks_text(r)} (last reached {label})" for label, r in by_label.items()]
        more = f", and {len(shown) - SHOWN_PHASES} more phases" if len(shown) > SHOWN_PHASES else ""
        return "not arrived: " + "; ".join(shown[:SHOWN_PHASES]) + more

    def lost(self, err: BaseException) -> RanksLost:
        """The one-line error for a collective of the current phase that failed with `err`."""
        text = str(err)
        if "timed out" in text.lower() or "timeout" in text.lower():
            what = f"timed out after {self.timeout_seconds:g} s (--collective-timeout-seconds)"
        else:
            what = f"failed ({_reason(text)})"
        who = self.who_is_missing(self.missing())
        return RanksLost(
            f"rank {self.rank}: {self.label} {what}; {who}. Exit code 3: torchrun "
            "--max-restarts restarts the job, --resume continues from the newest checkpoint"
        )


def is_comm_error(err: BaseException) -> bool:
    """A failure of the process group's communication (gloo: a timeout, a closed pair), not a
    bug of the step."""
    if type(err).__name__ in ("DistError", "DistBackendError", "DistNetworkError"):
        return True
    text = str(err)
    markers = ("gloo", "Timed out", "pair closure", "Connection closed by peer", "Connection reset")
    return isinstance(err, RuntimeError) and any(m in text for m in markers)


@contextlib.contextmanager
def ranks_lost_named(watch: Watch | None) -> Iterator[None]:
    """Turn a failed collective into RanksLost naming the phase and the missing ranks."""
    try:
        yield
    except RuntimeError as err:
        if watch is None or isinstance(err, RanksLost) or not is_comm_error(err):
            raise
        raise watch.lost(err) from None


def _reason(text: str) -> str:
    """gloo's message without its source location ('[.../pair.cc:123] ...')."""
    lines = text.strip().splitlines() or [""]
    return re.sub(r"^\[[^\]]*\]\s*", "", lines[0])[:200]


def _answer_within(seconds: float, ask):
    """ask()'s result, or None when it raised or took longer than `seconds` (left running in a
    daemon thread: the process is about to end)."""
    box: list = []

    def run() -> None:
        with contextlib.suppress(Exception):
            box.append(ask())

    thread = threading.Thread(target=run, daemon=True, name="trainbudget-store-query")
    thread.start()
    thread.join(seconds)
    return box[0] if box else None


# ---- the signal watcher ---------------------------------------------------------------------


@contextlib.contextmanager
def signal_watch(watch: Watch | None) -> Iterator[None]:
    """Watch SIGTERM/SIGINT from a thread while the block runs (see the module's docstring).
    Python handlers for both must be installed (the C-level handler writes the wake-up pipe
    only for them). A no-op alone or off the main thread."""
    if watch is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # set_wakeup_fd's rule: a handler must never block
    old = signal.set_wakeup_fd(write_fd)
    done = threading.Event()
    thread = threading.Thread(
        target=_watch_signals, args=(watch, read_fd, done), daemon=True, name="trainbudget-signals"
    )
    thread.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old)
        done.set()
        os.close(write_fd)
        thread.join()
        os.close(read_fd)


def _watch_signals(watch: Watch, fd: int, done: threading.Event) -> None:
    received: list[int] = []
    while not done.is_set():
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 64)
            if not data:
                return
            received += [s for s in data if s in (signal.SIGTERM, signal.SIGINT)]
        if len(received) >= 2:
            name = signal.Signals(received[-1]).name
            abandon(
                f"trainbudget train: rank {watch.rank}: second {name} during {watch.label}: "
                "stopped at once, without a checkpoint (the newest one is kept; continue with "
                "--resume)",
                128 + received[-1],
            )
        if received and time.monotonic() - watch.since >= STALL_SECONDS:
            _end_if_peers_gone(watch, received[0])


def _end_if_peers_gone(watch: Watch, signum: int) -> None:
    """After a signal: end the process when the phase it waits in lacks ranks."""
    missing = watch.missing()
    if missing is not None and not missing:
        return  # every rank is in this phase: the step ends and the run saves as usual
    name, who = signal.Signals(signum).name, watch.who_is_missing(missing)
    abandon(
        f"trainbudget train: rank {watch.rank}: {name} while waiting in {watch.label}; {who}. "
        "Stopped without a checkpoint: a consistent one needs every rank (the newest one is "
        "kept; continue with --resume)",
        128 + signum,
    )
