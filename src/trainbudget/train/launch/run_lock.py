"""One owner per run folder: `trainbudget train` holds an exclusive `flock` on <out>/run.lock for
the run's whole life, so a second run into the same folder (fresh, or a `--resume` with another
learning rate) stops with one line naming the holder instead of deleting the first one's
checkpoint in progress or mixing its records into metrics.jsonl.

- The kernel releases an flock when its process ends, however it ends (kill -9 included), so a
  dead run never leaves a stale lock; the file itself stays (deleting it would let two processes
  lock two different files of the same name).
- The holder writes its PID, host, start time and a random token into the file once it holds the
  lock; a process that fails to take it reads them back for its message.
- A fresh run (no --resume) never takes over an earlier run's files: a folder holding
  checkpoints or metrics is refused, or cleared first with --overwrite (`make_room`), under
  the lock like everything else the run writes.
- Under torchrun one lock is held per run, by rank 0; rank 0 shares its token and every other
  rank reads the lock file of its own --out: a rank that finds another token (or none) is
  writing somewhere else (a node without the shared file system, a different relative path),
  and every rank stops with the list of those that differ.

Pure: no torch here; the collectives are passed in (`train.loop` gives torch.distributed's).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.train.checkpointing.manifest import CHECKPOINTS_DIR, list_checkpoints
from trainbudget.train.spec.run_files import (
    METRICS_ASIDE_PREFIX,
    METRICS_FILE,
    SUMMARY_FILE,
    TENSORBOARD_DIR,
)

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

LOCK_FILE = "run.lock"


@dataclass(frozen=True, kw_only=True)
class Holder:
    """What the owner of a run folder wrote into its lock file."""

    pid: int | None
    host: str
    started: str
    """UTC, ISO 8601."""
    token: str
    """Random, one per run: the other ranks compare it with rank 0's."""

    def describe(self) -> str:
        pid = "an unknown PID" if self.pid is None else f"PID {self.pid}"
        since = f" since {self.started}" if self.started else ""
        return f"{pid} on {self.host or 'an unknown host'}{since}"


class RunLock:
    """An exclusive flock on a run folder's lock file, held until `release()` or the process
    ends."""

    def __init__(self, fd: int, path: Path, holder: Holder) -> None:
        self._fd: int | None = fd
        self.path = path
        self.holder = holder

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


def _require_flock(out: str) -> None:
    if fcntl is None:
        raise SpecError(
            "out",
            out,
            "cannot be locked on this platform (no fcntl.flock); trainbudget train needs Linux "
            "or macOS to keep two runs out of one folder",
        )


def read_holder(path: Path) -> Holder:
    """The lock file's owner as written; fields it lacks read as unknown (an empty file: the
    owner is between taking the lock and writing it)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, UnicodeDecodeError, ValueError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    pid = doc.get("pid")
    return Holder(
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        host=str(doc.get("host", "")),
        started=str(doc.get("started", "")),
        token=str(doc.get("token", "")),
    )


def _busy(out: str, path: Path) -> SpecError:
    return SpecError(
        "out",
        out,
        f"is in use by another run ({read_holder(path).describe()} holds {path}); wait for it "
        "to end, stop it, or choose another --out",
    )


def lock_run_folder(run_dir: Path, out: str) -> RunLock:
    """Take `run_dir`'s lock (creating the folder and the file, nothing else) or raise a
    SpecError naming the process that holds it. `out`: the folder as the user gave it."""
    _require_flock(out)
    path = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # no O_TRUNC: the file is the holder's until the flock is ours
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # read-only folder or file system, a folder named run.lock
        raise _unwritable(out, path, err) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _busy(out, path) from None
    except OSError as err:  # ENOLCK, EOPNOTSUPP: a file system without locks
        os.close(fd)
        raise SpecError(
            "out", out, f"cannot be locked ({err.strerror}): choose an --out on a local disk"
        ) from None
    holder = Holder(
        pid=os.getpid(),
        host=socket.gethostname(),
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        token=secrets.token_hex(16),
    )
    text = json.dumps(
        {"pid": holder.pid, "host": holder.host, "started": holder.started, "token": holder.token}
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, (text + "\n").encode(), 0)
    os.fsync(fd)  # a shared file system: the other ranks read it from another node
    return RunLock(fd, path, holder)


def _unwritable(out: str, path: Path, err: OSError) -> SpecError:
    """The error for a lock file that cannot be created or opened for writing."""
    if isinstance(err, IsADirectoryError):
        return SpecError(
            "out",
            out,
            f"{path} is a folder; the run's lock must be a file there: remove it or choose "
            "another --out",
        )
    return SpecError(
        "out",
        out,
        f"cannot be written ({err.strerror}: {path}); choose a writable --out",
    )


def refuse_if_locked(run_dir: Path, out: str) -> None:
    """A quick look before the slow start (importing torch): raise the same error as
    `lock_run_folder` when another process holds the folder. Creates nothing, holds nothing."""
    _require_flock(out)
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds the folder (or it cannot be read: the start says)
    try:
        # shared: enough to meet a holder's exclusive lock, and allowed on a read-only file
        # (NFS turns flock into POSIX locks, whose exclusive kind needs write access)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(out, path) from None
    except OSError:
        return  # a file system without locks: the start says so
    finally:
        os.close(fd)


Share = Callable[[object], object]
"""Rank 0's value, on every rank (a broadcast)."""
Gather = Callable[[object], list]
"""Every rank's value, in rank order, on every rank (an all-gather)."""


def own_run_folder(
    run_dir: Path,
    out: str,
    *,
    rank: int = 0,
    world_size: int = 1,
    share: Share | None = None,
    gather: Gather | None = None,
) -> RunLock | None:
    """Rank 0 takes the run folder's lock; under several ranks it shares the outcome, and every
    rank checks that its own folder's lock file holds rank 0's token. Every rank raises the same
    error when any of this fails. Returns rank 0's lock (None on the other ranks)."""
    if world_size == 1:
        return lock_run_folder(run_dir, out)
    if share is None or gather is None:
        share, gather = _torch_collectives(world_size)
    lock, failure = None, None
    if rank == 0:
        try:
            lock = lock_run_folder(run_dir, out)
        except SpecError as err:
            failure = (err.field, err.value, err.rule)
    token, failure = share((lock.holder.token if lock else None, failure))
    if failure is not None:
        raise SpecError(*failure)
    seen = read_holder(run_dir / LOCK_FILE).token if rank else token
    differ = [r for r, t in enumerate(gather(seen)) if t != token]
    if differ:
        if lock is not None:
            lock.release()
        raise SpecError(
            "out",
            out,
            f"ranks {differ} do not see the folder rank 0 locked (its {LOCK_FILE} holds another "
            "token or none): every rank must write into the same folder (one node, or a file "
            "system shared by the nodes, and an absolute --out)",
        )
    return lock


def _torch_collectives(world_size: int) -> tuple[Share, Gather]:
    """torch.distributed's object collectives, over the process group torchrun started."""
    import torch.distributed as dist

    def share(value: object) -> object:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(value: object) -> list:
        values = [None] * world_size
        dist.all_gather_object(values, value)
        return values

    return share, gather


# ---- an earlier run in the folder ----------------------------------------------------------


def earlier_run(run_dir: Path) -> list[str]:
    """What an earlier run left in `run_dir` that a fresh run would overwrite or mix its own
    with, in words (empty: nothing)."""
    found = []
    if list_checkpoints(run_dir / CHECKPOINTS_DIR):
        found.append(f"checkpoints ({run_dir / CHECKPOINTS_DIR})")
    metrics = run_dir / METRICS_FILE
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append(f"metrics ({metrics})")
    return found


def clear_earlier_run(run_dir: Path) -> list[Path]:
    """Delete an earlier run's checkpoints, metrics (those moved aside by a resume included),
    summary and TensorBoard files; its prepared data and anything else stay. Returns what was
    deleted."""
    targets = [
        run_dir / CHECKPOINTS_DIR,
        run_dir / METRICS_FILE,
        *sorted(run_dir.glob(f"{METRICS_ASIDE_PREFIX}*.jsonl")),
        run_dir / SUMMARY_FILE,
        run_dir / TENSORBOARD_DIR,
    ]
    deleted = []
    for path in targets:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        deleted.append(path)
    return deleted


def make_room(run_dir: Path, out: str, *, overwrite: bool, main: bool) -> list[Path]:
    """A fresh run's look at its folder: an earlier run's checkpoints or metrics are refused,
    or with `overwrite` deleted (by the `main` rank). Returns what was deleted."""
    if not overwrite:
        if earlier := earlier_run(run_dir):
            raise SpecError(
                "out",
                out,
                f"holds {' and '.join(earlier)} of an earlier run; pass --resume to continue it, "
                "--overwrite to delete them and start afresh, or choose another --out",
            )
        return []
    return clear_earlier_run(run_dir) if main else []
