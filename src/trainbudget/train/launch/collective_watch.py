"""Which ranks a waiting rank waits for. Before each phase of the run that holds collectives
(start-up, each step's forward and backward, its loss all-reduce, evaluation, checkpoint,
shut-down) every rank leaves a mark in the rendezvous store: `at/RANK` =
"SEQ<TAB>LABEL<TAB>PROCESS", SEQ counting the phases (alike on every rank: they pass the same
phases in the same order). A rank whose collective times out (gloo enforces
--collective-timeout-seconds on every collective) or fails (a peer's connection closed) reads
the others' marks: those with a smaller SEQ never reached this phase -- the missing ranks,
named with the phase each last reached.

A rank killed or stopped inside the phase left a mark like everyone's. PROCESS (the machine:
its boot and PID namespace; the PID and the process's start time) says which process left it,
so a rank on the same machine can look it up in /proc: gone (killed, crashed, exited; a PID
reused since counts as gone) or stopped (SIGSTOP, a debugger) -- and the message names it.
Ranks on other machines cannot be looked up: "one stalled inside it" is all that is known then.

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
import functools
import os
import re
import select
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from trainbudget.train.launch.exits import RanksLost, abandon, ranks_text

STALL_SECONDS = 1.0
"""After a signal, a phase the main thread has been in this long (a step's collectives take
milliseconds) is checked for missing ranks."""
STORE_ANSWER_SECONDS = 3.0
"""How long a query of the store may take before the store counts as gone with its host:
TCPStore's `check` and `get` wait without a bound when the host is stopped (SIGSTOP)."""
SHOWN_PHASES = 4
EXIT_SETTLE_SECONDS = 1.0
"""How long a rank whose collective failed with every rank present looks for a process that is
gone: a killed peer's sockets close while it exits, a moment before /proc shows it dead."""
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
        self.store.set(mark_key(self.rank), f"{self.seq}\t{label}\t{this_process()}")

    def missing(self) -> dict[int, str] | None:
        """{rank: the phase it last reached} for the ranks behind this one; None when the store
        did not answer within STORE_ANSWER_SECONDS."""
        return _answer_within(STORE_ANSWER_SECONDS, self._read_marks)

    def _read_marks(self) -> dict[int, str]:
        behind = {}
        for rank in range(self.world_size):
            seq, label, _ = _parse_mark(self.store.get(mark_key(rank)))
            if seq < self.seq:
                behind[rank] = label
        return behind

    def not_running(self, settle_seconds: float = 0.0) -> dict[int, str]:
        """{rank: what became of its process} for the other ranks whose process on this
        machine no longer runs ('pid N is gone', 'pid N is stopped'), asked again for up to
        `settle_seconds` while there is none; {} when the store does not answer within
        STORE_ANSWER_SECONDS (the caller says so already)."""
        deadline = time.monotonic() + settle_seconds
        while True:
            found = _answer_within(STORE_ANSWER_SECONDS, self._read_processes)
            if found or found is None or time.monotonic() >= deadline:
                return found or {}
            time.sleep(0.05)

    def _read_processes(self) -> dict[int, str]:
        found = {}
        for rank in range(self.world_size):
            if rank != self.rank:
                state = process_state(_parse_mark(self.store.get(mark_key(rank)))[2])
                if state is not None:
                    found[rank] = state
        return found

    def who_is_missing(self, missing: dict[int, str] | None, settle_seconds: float = 0.0) -> str:
        """`missing()`'s answer in words, with what became of the processes on this machine
        that no longer run (looked for up to `settle_seconds` when every rank reached it)."""
        if missing is None:
            return (
                f"the store did not answer within {STORE_ANSWER_SECONDS:g} s either: "
                f"{self.host}, which hosts it, is stopped or gone"
            )
        gone = self.not_running(settle_seconds if missing == {} else 0.0)
        fates = "; ".join(f"rank {r}: {what}" for r, what in sorted(gone.items()))
        if not missing:
            if not fates:
                return "every rank reached it: one stalled inside it"
            return f"every rank reached it; inside it, {fates}"
        by_label: dict[str, list[int]] = {}
        for rank, label in missing.items():
            by_label.setdefault(label, []).append(rank)
        shown = [f"{ranks_text(r)} (last reached {label})" for label, r in by_label.items()]
        more = f", and {len(shown) - SHOWN_PHASES} more phases" if len(shown) > SHOWN_PHASES else ""
        return "not arrived: " + "; ".join(shown[:SHOWN_PHASES]) + more + (fates and f"; {fates}")

    def lost(self, err: BaseException) -> RanksLost:
        """The one-line error for a collective of the current phase that failed with `err`."""
        text = str(err)
        if "timed out" in text.lower() or "timeout" in text.lower():
            what = f"timed out after {self.timeout_seconds:g} s (--collective-timeout-seconds)"
        else:
            what = f"failed ({_reason(text)})"
        who = self.who_is_missing(self.missing(), EXIT_SETTLE_SECONDS)
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


def _parse_mark(value: bytes) -> tuple[int, str, str]:
    """(SEQ, LABEL, PROCESS) of a mark; PROCESS '' in the rendezvous's first mark."""
    seq, _, rest = value.decode().partition("\t")
    label, _, process = rest.partition("\t")
    return int(seq), label, process


@functools.cache
def _machine() -> str:
    """What makes PIDs comparable: the kernel's boot and the PID namespace ('' off Linux)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the 3rd (state) on (proc(5)); None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()  # the command name, in (), may hold spaces


def this_process() -> str:
    """This process as a mark names it: 'MACHINE PID START' (START: its start time in clock
    ticks since boot, so that a reused PID is not taken for it); '' off Linux."""
    fields = _proc_stat(os.getpid())
    if not _machine() or fields is None:
        return ""
    return f"{_machine()} {os.getpid()} {fields[19]}"


def process_state(process: str) -> str | None:
    """What became of the process a mark names, if it ran on this machine and no longer
    runs: 'pid N is gone (killed, crashed or exited)', 'pid N is stopped (SIGSTOP or a
    debugger)'; None when it runs, or is elsewhere, or unknown."""
    machine, _, rest = process.partition(" ")
    if not machine or machine != _machine():
        return None
    pid, _, start = rest.partition(" ")
    fields = _proc_stat(int(pid))
    # Z: a zombie (dead, not yet reaped); X: dead; another start time: the PID was reused
    if fields is None or fields[0] in ("Z", "X") or fields[19] != start:
        return f"pid {pid} is gone (killed, crashed or exited)"
    if fields[0] in ("T", "t"):
        return f"pid {pid} is stopped (SIGSTOP or a debugger)"
    return None


CALLBACK_PREFIX = re.compile(r"^Got the following error when running the callback: \w+: ")
SOURCE_LOCATION = re.compile(r"\[[^\]]*\.(cc|cpp|h):\d+\]\s*")


def _reason(text: str) -> str:
    """gloo's message, its first sentence, without its source locations ('[.../pair.cc:123]')
    or the wrapper DDP's communication hook puts around it ('Got the following error when
    running the callback: RuntimeError: ...')."""
    lines = text.strip().splitlines() or [""]
    line = SOURCE_LOCATION.sub("", CALLBACK_PREFIX.sub("", lines[0]))
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)
    return line.split(". ")[0][:200]


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
    """After a signal: end the process when the phase it waits in lacks ranks, or holds one
    whose process is gone or stopped."""
    missing = watch.missing()
    if missing is not None and not missing and not watch.not_running():
        return  # every rank is in this phase: the step ends and the run saves as usual
    name, who = signal.Signals(signum).name, watch.who_is_missing(missing)
    abandon(
        f"trainbudget train: rank {watch.rank}: {name} while waiting in {watch.label}; {who}. "
        "Stopped without a checkpoint: a consistent one needs every rank (the newest one is "
        "kept; continue with --resume)",
        128 + signum,
    )
