"""Checkpoints that survive a kill at any moment and refuse a corrupt or malicious file.

`save_checkpoint` writes every file into a temporary folder beside the checkpoints, fsyncs them,
writes a manifest with each file's SHA-256 and size last, then renames the folder into place
and fsyncs the parent (the layout and the torch-free half: `manifest.py`). A `writer` may add a
dcp/ sub-folder (FSDP2's sharded state, `sharded.py`) that the manifest covers alike. Loading
goes through `load_file` only: JSON, or torch.load(weights_only=True), which unpickles tensors
and plain containers and refuses anything that would call code. nanoGPT overwrites its one
checkpoint in place and torch.load accepts a flipped bit silently; here a kill leaves the
previous checkpoint, and `verify_checkpoint` rejects a bad file by name so that resume falls
back to an older one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch

from trainbudget.core.errors import SpecError
from trainbudget.train.checkpointing.manifest import (
    CHECKPOINTS_DIR,
    DCP_DIR,
    MANIFEST,
    PLAIN_RULE,
    TMP_PREFIX,
    CheckpointError,
    checkpoint_name,
    checkpoint_step,
    clean_partial,
    fsync_dir,
    fsync_subfolders,
    latest_valid_checkpoint,
    list_checkpoints,
    load_json,
    plain_file_name,
    prune,
    publish,
    verify_checkpoint,
    write_manifest,
)
from trainbudget.train.checkpointing.space import NoSpaceError, no_space_named

__all__ = [
    "CHECKPOINTS_DIR",
    "MANIFEST",
    "CheckpointError",
    "checkpoint_name",
    "checkpoint_step",
    "clean_partial",
    "latest_valid_checkpoint",
    "list_checkpoints",
    "load_file",
    "save_checkpoint",
    "verify_checkpoint",
]


def _no_fault(_point: str) -> None:
    pass


def save_checkpoint(
    root: Path,
    step: int,
    *,
    files: dict[str, object],
    keep: int = 3,
    rank: int = 0,
    world_size: int = 1,
    barrier: Callable[[], None] = lambda: None,
    writer: Callable[[Path], None] | None = None,
    fault: Callable[[str], None] | None = None,
    create: Callable[[Path], IO[bytes]] | None = None,
) -> Path:
    """Write checkpoint `root/step-XXXXXXXX` atomically; returns its folder. A collective.

    Every rank calls it with its own `files` (name -> payload; names unique across ranks). A
    name ending in `.json` is written as JSON, anything else with torch.save (tensors, dicts,
    lists, numbers, str, None: what torch.load(weights_only=True) reads back). Rank 0 then lists
    the temporary folder to write the manifest, so every rank's files must be visible to it: a
    file system shared by the ranks is assumed. `barrier` synchronises the ranks (a no-op for
    one process). Rank 0 keeps the newest `keep` (>= 2) checkpoints and deletes older ones and
    the leftovers of killed saves; the one just written is never deleted. Saving a step that
    exists (after a rollback or a resume) replaces it atomically.

    `writer(tmp)`, when given, is called on every rank with the temporary folder, after the
    ranks' files are written and before the barrier that precedes the manifest (so it may be a
    collective, as DCP's save is); it writes into tmp/dcp/ only. Rank 0 fsyncs every file
    there, and the folder, before hashing them into the manifest.

    `fault(point)` is for tests: called at "tmp-created", "file-written:<name>",
    "writer-done", "before-manifest", "manifest-written", "before-rename", "renamed" and
    "pruned". `create(path)`, for tests too, opens each file instead of `open(path, "xb")`
    (`space.open_on_full_disk`: a full disk).

    A file system that fills up during the save raises `space.NoSpaceError` naming the file
    ("no space left on device"); rank 0 removes the partial folder, and the checkpoints
    already there are untouched. An error on one rank leaves the others waiting in `barrier`.
    """
    _check_arguments(step, files, keep, rank, world_size)
    fault = fault or _no_fault
    root = Path(root)
    final = root / checkpoint_name(step)
    tmp = root / (TMP_PREFIX + final.name)
    # JSON is encoded before anything is written: a NaN fails here, not half-way
    encoded = {n: _json_bytes(tmp / n, p) for n, p in files.items() if n.endswith(".json")}
    newest = next((p.name for p in list_checkpoints(root)), None)  # what a failure leaves
    try:
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)  # a killed save of the same step
            tmp.mkdir()
            fault("tmp-created")
        barrier()
        for name, payload in files.items():
            with no_space_named(tmp / name, newest):
                _write_file(tmp / name, payload, encoded.get(name), create or _create)
            fault(f"file-written:{name}")
        if writer is not None:
            with no_space_named(tmp / DCP_DIR, newest):
                writer(tmp)
            fault("writer-done")
        barrier()
        if rank == 0:
            fault("before-manifest")
            with no_space_named(tmp / MANIFEST, newest):
                fsync_subfolders(tmp)  # the writer's files; ours were fsynced as written
                write_manifest(tmp, step, world_size)
            fault("manifest-written")
            fsync_dir(tmp)
            fault("before-rename")
            publish(tmp, final)
            fault("renamed")
            prune(root, keep, protect=final)
            fault("pruned")
    except NoSpaceError:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # give the space back
        raise
    barrier()
    return final


def _check_arguments(step, files, keep, rank, world_size) -> None:
    """Checked alike on every rank before the first barrier, so all ranks fail together."""
    for field, value, low in (("step", step, 0), ("world_size", world_size, 1), ("rank", rank, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SpecError(field, value, f"must be an integer >= {low}")
    if rank >= world_size:
        raise SpecError("rank", rank, f"must be < world_size ({world_size})")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 2:
        raise SpecError(
            "keep", keep, "must be >= 2 (while one checkpoint is written the previous one stays)"
        )
    if not isinstance(files, dict):
        raise SpecError("files", type(files).__name__, "must be a dict of name -> payload")
    for name in files:
        if not plain_file_name(name):
            raise SpecError(
                "files",
                name,
                f"is not a valid checkpoint file name ({PLAIN_RULE}; dcp/ is the writer's)",
            )


def _create(path: Path) -> IO[bytes]:
    return open(path, "xb")


def _write_file(
    path: Path, payload: object, encoded: bytes | None, create: Callable[[Path], IO[bytes]]
) -> None:
    """Create `path` (never overwrite: another rank using the same name is an error), write
    `encoded` (JSON), else `payload` through torch.save, flush and fsync, so the bytes are on
    disk before the manifest vouches for them."""
    try:
        f = create(path)
    except FileExistsError:
        raise CheckpointError(
            path, "written twice (file names must be unique across ranks)"
        ) from None
    with f:
        if encoded is None:
            torch.save(payload, f)
        else:
            f.write(encoded)
        f.flush()
        os.fsync(f.fileno())
    if encoded is None:
        _check_loadable(path)


def _check_loadable(path: Path) -> None:
    """Unpickle the file as resume will, weights-only (memory-mapped: tensor data is not read),
    so that a payload holding, say, a numpy array fails now rather than at resume."""
    try:
        torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    except Exception as err:
        raise CheckpointError(
            path,
            f"would be refused by torch.load(weights_only=True): {_reason(err)} (save only "
            "tensors, dicts, lists, tuples, numbers, str and None)",
        ) from err


def _json_bytes(path: Path, payload: object) -> bytes:
    try:
        return json.dumps(payload, indent=2, allow_nan=False).encode()
    except (TypeError, ValueError) as err:
        raise CheckpointError(path, f"cannot be written as JSON ({err})") from None


def load_file(path: Path, name: str, *, map_location=None, mmap: bool = False):
    """One file of a checkpoint: `.json` parsed, anything else through
    torch.load(weights_only=True) (with `mmap`, tensors memory-mapped: their shapes and dtypes
    cost no read of their data). Any failure is a CheckpointError naming the file. Verify the
    checkpoint first (`verify_checkpoint`): this reads whatever bytes are there."""
    if name.endswith(".json"):
        return load_json(path, name)
    file = Path(path) / name
    try:
        return torch.load(file, weights_only=True, map_location=map_location, mmap=mmap)
    except FileNotFoundError:
        raise CheckpointError(file, "missing") from None
    except Exception as err:  # unpickling fails in many types: UnpicklingError, RuntimeError, ...
        raise CheckpointError(
            file, f"refused by torch.load(weights_only=True): {_reason(err)}"
        ) from err


# torch's weights-only refusal opens with generic advice (including to retry unsafely); the
# line that says what was refused comes after it
_GENERIC = ("Weights only load failed", "Please file an issue", "Check the documentation")


def _reason(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    specific = [line for line in lines if not line.startswith(_GENERIC)]
    return (specific or lines or [type(err).__name__])[0]
