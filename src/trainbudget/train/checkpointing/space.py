"""Room for checkpoints, found before step 1 rather than at the first save: the run folder and
its checkpoints/ created, a probe file written, fsynced and removed by every rank, and enough
free space for the checkpoints the run keeps; and a save that runs out of space anyway named
as such ("no space left on device", with the file), not torch's zip-writer traceback.

Without the probe, a read-only `checkpoints/`, a file or a dangling link in its place, or a
full disk surfaced at the first save, after all the training before it. Torch-free: the
checkpoint's size comes from the estimating core.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.core.single.memory import checkpoint_bytes
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_precision
from trainbudget.core.units import format_bytes
from trainbudget.train.checkpointing.manifest import (
    CHECKPOINTS_DIR,
    CheckpointError,
    list_checkpoints,
)

PROBE_PREFIX = ".probe-"  # hidden: never listed as a checkpoint, nor cleaned as a partial save
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk, a full quota
DEV_FULL = Path("/dev/full")  # Linux: every write fails with ENOSPC (fault injection)


class NoSpaceError(CheckpointError):
    """A save that ran out of disk space; `value` is the file being written."""


def predicted_checkpoint_bytes(spec: ModelSpec, *, precision: str, optimizer: str) -> float:
    """What one checkpoint of the trainer holds: the core's `checkpoint_bytes` (the weights at
    their highest precision and the optimizer state) plus, under mixed precision, the 16-bit
    model weights themselves: model.pt stores those, optimizer.pt the fp32 masters."""
    prec = get_precision(precision)
    size = checkpoint_bytes(spec, precision=precision, optimizer=optimizer)
    if prec.master_bytes:
        size += count_params(spec).total * prec.weight_bytes
    return size


def prepare_checkpoint_folder(
    run_dir: Path, *, rank: int, checkpoint_size_bytes: float, keep: int
) -> Path:
    """Create `run_dir/checkpoints` (every rank: mkdir is safe to race), write, fsync and
    remove a probe file there, and on rank 0 check the free space against `keep` + 1
    checkpoints of `checkpoint_size_bytes`; returns the folder. SpecError("out", path, ...)
    naming the problem. No collective: a rank that fails does not leave the others waiting."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    for folder in (Path(run_dir), root):
        make_folder(folder)
    probe_write(root, rank)
    if rank == 0:
        check_free_space(root, checkpoint_size_bytes, keep)
    return root


def make_folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SpecError(
            "out",
            str(path),
            "exists and is not a folder (a file, or a link to nowhere or to itself); the run "
            "needs a folder there",
        ) from None
    except OSError as err:
        raise SpecError("out", str(path), f"cannot be created ({err.strerror})") from None


def probe_write(folder: Path, rank: int) -> None:
    """Write a small file into `folder` as a checkpoint is written -- created exclusively,
    fsynced -- then remove it."""
    probe = folder / f"{PROBE_PREFIX}rank-{rank:05d}-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"trainbudget: can this rank write checkpoints here?\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as err:
        with contextlib.suppress(OSError):
            probe.unlink()
        what = "no space left on device" if err.errno in NO_SPACE_ERRNOS else err.strerror
        raise SpecError(
            "out",
            str(folder),
            f"cannot be written by rank {rank} ({what}); checkpoints go there: fix the "
            "folder or choose another --out",
        ) from None


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def check_free_space(root: Path, checkpoint_size_bytes: float, keep: int) -> None:
    """Free space for `keep` checkpoints plus the one being written (the oldest is pruned only
    after the new one is complete), less what the checkpoints already there take."""
    existing = sum(folder_bytes(p) for p in list_checkpoints(root))
    need = max(checkpoint_size_bytes, (keep + 1) * checkpoint_size_bytes - existing)
    free = free_bytes(root)
    if free < need:
        raise SpecError(
            "out",
            str(root),
            f"has {format_bytes(free)} free; the run needs {format_bytes(need)}: {keep + 1} "
            f"checkpoints of about {format_bytes(checkpoint_size_bytes)} each (--keep {keep} "
            "+ 1 being written)"
            + (f", less {format_bytes(existing)} already there" if existing else "")
            + "; free space, lower --keep or choose another --out",
        )


def is_no_space(err: BaseException) -> bool:
    """Whether `err` or an error it was raised from or while handling is ENOSPC/EDQUOT. torch's
    zip writer reports a failed write as RuntimeError("[enforce fail at inline_container.cc]
    ... unexpected pos ..."), raised while the OSError of the Python file's write is handled."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
            return True
        err = err.__cause__ or err.__context__
    return False


@contextlib.contextmanager
def no_space_named(path: Path, newest: str | None) -> Iterator[None]:
    """Turn a write that ran out of space into a NoSpaceError naming `path`, the free space
    left and `newest`, the checkpoint that stays intact."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if not is_no_space(err):
            raise
        try:
            free = f"{format_bytes(free_bytes(path.parent))} free"
        except OSError:
            free = "free space unknown"
        kept = f"{newest} is intact" if newest else "no earlier checkpoint"
        raise NoSpaceError(
            path,
            f"no space left on device while writing it ({free}); the save was abandoned and "
            f"{kept}: free space and continue with --resume",
        ) from None


def open_on_full_disk(path: Path):
    """Create `path` as a checkpoint file is created, and return a file whose writes fail with
    ENOSPC as on a full disk (/dev/full). For the fault injection of the tests only."""
    open(path, "xb").close()
    return open(DEV_FULL, "wb")
