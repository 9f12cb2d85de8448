"""The torch-free half of the checkpoint store: names, manifests, hashing, listing, verifying,
publishing and pruning. `checkpoint.py` adds the files themselves (torch.save / torch.load).

A run keeps its checkpoints in `<out>/checkpoints/`:

    step-00000100/          a checkpoint: its files and, written last, manifest.json
    step-00000200/dcp/      a sharded run's model and optimizer (torch.distributed.checkpoint)
    .tmp-step-00000300/     being written (or left by a killed process): never a checkpoint
    .old-step-00000200/     an existing step-00000200 moved aside while the same step is re-saved
    .del-step-00000100/     a pruned checkpoint being deleted

Only a `step-*` folder holding a manifest.json counts as a checkpoint, and it appears there in
one atomic rename of a folder whose files were fsynced first; a kill at any moment leaves either
the old set of checkpoints or the new one, plus leftovers that `clean_partial` removes.
The manifest records the SHA-256 and size of every file, those of the `dcp/` sub-folder included
(as `dcp/NAME`): torch.load, DCP and safetensors load a file with a flipped bit without
complaint, so the hash is what catches it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from trainbudget.core.errors import SpecError

CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "manifest.json"
FORMAT = 1
TMP_PREFIX, OLD_PREFIX, DEL_PREFIX = ".tmp-", ".old-", ".del-"
HASH_CHUNK_BYTES = 2**20  # checkpoint files can be GBs: hashed 1 MiB at a time
_STEP_NAME = re.compile(r"step-(\d{8,})")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
DCP_DIR = "dcp"
SUBFOLDERS = (DCP_DIR,)
"""The only folders a checkpoint holds, one level deep: dcp/ for torch.distributed.checkpoint's
files (`.metadata`, `__R_N.distcp`), which it names itself (hidden ones included)."""
PLAIN_RULE = f"plain, not hidden, no path separator, not {MANIFEST}"
NAME_RULE = f"{PLAIN_RULE}; or {DCP_DIR}/NAME, NAME any file name but . and .."


class CheckpointError(SpecError):
    """A checkpoint that cannot be used: `value` is the offending file, `rule` what is wrong."""

    def __init__(self, file: str | Path, rule: str) -> None:
        super().__init__("checkpoint", str(file), rule)


def checkpoint_name(step: int) -> str:
    """`step-00000120`: 8 digits, so names sort like steps up to 10**8."""
    return f"step-{step:08d}"


def checkpoint_step(path: str | Path) -> int:
    """The step in a checkpoint folder's name (`.../step-00000120` -> 120)."""
    match = _STEP_NAME.fullmatch(Path(path).name)
    if match is None:
        raise CheckpointError(path, "is not a checkpoint folder (its name is not step-XXXXXXXX)")
    return int(match.group(1))


def plain_file_name(name: object) -> bool:
    """A file directly in a checkpoint folder: plain, not hidden, not the manifest."""
    return (
        isinstance(name, str)
        and name not in ("", MANIFEST)
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
    )


def valid_file_name(name: object) -> bool:
    """A name a manifest may list: a plain file name, or `dcp/NAME` (one level, NAME neither
    `.` nor `..` and without separators; hidden allowed, as DCP writes `.metadata`). Absolute
    paths, `..` and hidden files outside dcp/ are refused."""
    if not isinstance(name, str) or name.count("/") != 1:
        return plain_file_name(name)
    folder, file = name.split("/")
    return folder in SUBFOLDERS and file not in ("", ".", "..") and "\\" not in file


def list_checkpoints(root: Path) -> list[Path]:
    """`step-*` folders of `root` that hold a manifest, newest step first. Hashes nothing."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_NAME.fullmatch(p.name)) and p.is_dir() and (p / MANIFEST).is_file()
    ]
    return [p for _, p in sorted(found, reverse=True)]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (files created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_subfolders(folder: Path) -> None:
    """fsync every file in `folder`'s sub-folders, then the sub-folders: what a writer other
    than this module (DCP) put there is durable before the manifest vouches for it. fsync
    through a read-only descriptor flushes a file's pages whoever wrote them (local file
    systems; DCP also fsyncs its own files on each rank, for shared ones)."""
    for name in SUBFOLDERS:
        sub = folder / name
        if not sub.is_dir():
            continue
        for path in sorted(sub.iterdir()):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(sub)


def members(folder: Path) -> list[tuple[str, Path]]:
    """(name as a manifest lists it, path) of everything in a checkpoint folder, sorted by
    name: its entries, and instead of a sub-folder of SUBFOLDERS that folder's entries, named
    `dcp/NAME`. Names are not checked here."""
    found = []
    for path in folder.iterdir():
        if path.name in SUBFOLDERS and path.is_dir() and not path.is_symlink():
            found += [(f"{path.name}/{inner.name}", inner) for inner in path.iterdir()]
        else:
            found.append((path.name, path))
    return sorted(found)


def write_manifest(folder: Path, step: int, world_size: int) -> dict:
    """Hash every file in `folder` and its dcp/ sub-folder (every rank's: the folder is
    listed, not told) and write manifest.json, fsynced. Returns the manifest."""
    files = {}
    for name, path in members(folder):
        if not valid_file_name(name):
            raise CheckpointError(path, f"is not a valid file name in a checkpoint ({NAME_RULE})")
        if not path.is_file():
            raise CheckpointError(path, "is not a regular file (a checkpoint holds files only)")
        files[name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    manifest = {"format": FORMAT, "step": step, "world_size": world_size, "files": files}
    with open(folder / MANIFEST, "x", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=2, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return manifest


def read_manifest(path: Path) -> dict:
    """A checkpoint folder's manifest, checked against the schema (not against the files)."""
    path = Path(path)
    file = path / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(file, "missing (not a complete checkpoint)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(file, f"cannot be read as JSON ({err})") from None
    except RecursionError:
        raise CheckpointError(file, "cannot be read as JSON (nested too deeply)") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(file, "is not a JSON object")
    if type(manifest.get("format")) is not int or manifest["format"] != FORMAT:
        raise CheckpointError(file, f"format is {manifest.get('format')!r}, expected {FORMAT}")
    for key in ("step", "world_size"):
        if type(manifest.get(key)) is not int or manifest[key] < (1 if key == "world_size" else 0):
            raise CheckpointError(file, f"{key} is {manifest.get(key)!r}, not a valid integer")
    match = _STEP_NAME.fullmatch(path.name)
    if match and int(match.group(1)) != manifest["step"]:
        raise CheckpointError(file, f"says step {manifest['step']}; the folder is {path.name}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(file, "has no 'files' object")
    for name, entry in files.items():
        if not valid_file_name(name):
            raise CheckpointError(file, f"lists {name!r}, not a valid file name ({NAME_RULE})")
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not _SHA256_HEX.fullmatch(entry["sha256"])
            or type(entry.get("bytes")) is not int
            or entry["bytes"] < 0
        ):
            raise CheckpointError(file, f"entry of {name!r} is not {{sha256: hex, bytes: int}}")
    return manifest


def verify_checkpoint(path: Path) -> dict:
    """Check every file of a checkpoint (those in dcp/ included) against its manifest;
    returns the manifest.

    Raises CheckpointError naming the first bad file: missing, truncated or grown, not in the
    manifest, or with another SHA-256. Sizes are checked for all files before any is hashed.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(path, "no such checkpoint folder")
    manifest = read_manifest(path)
    listed = manifest["files"]
    for name, entry in listed.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(file, "missing (listed in the manifest)")
        size = file.stat().st_size
        if size != entry["bytes"]:
            what = "truncated" if size < entry["bytes"] else "grown"
            raise CheckpointError(
                file, f"{what}: {size:,} bytes, the manifest says {entry['bytes']:,}"
            )
    for name, file in members(path):
        if name != MANIFEST and name not in listed:
            raise CheckpointError(file, "not in the manifest")
    for name, entry in listed.items():
        try:
            digest = file_sha256(path / name)
        except OSError as err:
            raise CheckpointError(path / name, f"cannot be read ({err.strerror})") from None
        if digest != entry["sha256"]:
            raise CheckpointError(path / name, "SHA-256 differs from the manifest (file corrupt)")
    return manifest


def load_json(path: Path, name: str):
    """A JSON file of a checkpoint, parsed (what `checkpoint.load_file` does for `.json`,
    without torch); a CheckpointError names the file."""
    file = Path(path) / name
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(file, "missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(file, f"cannot be read as JSON ({err})") from None
    except RecursionError:
        raise CheckpointError(file, "cannot be read as JSON (nested too deeply)") from None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def step_folders(root: Path) -> list[Path]:
    """Every `step-*` folder of `root`, newest step first, with or without a manifest (one
    without was damaged: the writer renames a folder into place only after its manifest)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_NAME.fullmatch(p.name))]
    return [p for _, p in sorted(found, reverse=True) if p.is_dir()]


def latest_valid_checkpoint(
    root: Path,
    *,
    log: Callable[[str], None] = _stderr,
    check: Callable[[Path], None] | None = None,
) -> Path | None:
    """The newest checkpoint that verifies and passes `check` (a CheckpointError: it does
    not), or None. Each rejected one -- a `step-*` folder whose manifest is gone included -- is
    logged in one line with the reason and what is tried next. Deletes nothing."""
    candidates = step_folders(root)
    for i, path in enumerate(candidates):
        try:
            verify_checkpoint(path)
            if check is not None:
                check(path)
        except CheckpointError as err:
            after = (
                f"falling back to {candidates[i + 1].name}"
                if i + 1 < len(candidates)
                else "no older valid checkpoint"
            )
            log(f"checkpoint {path.name} rejected: {err}; {after}")
            continue
        return path
    return None


def publish(tmp: Path, final: Path) -> None:
    """Rename the complete folder `tmp` to `final` atomically, then make it durable. An
    existing `final` (the same step saved again) is moved aside first and deleted after."""
    old = final.with_name(OLD_PREFIX + final.name)
    if final.exists():
        _remove(old)
        os.rename(final, old)
    os.rename(tmp, final)
    fsync_dir(final.parent)
    _remove(old)


def clean_partial(root: Path) -> list[Path]:
    """Remove what a killed save or prune left behind (`.tmp-*`, `.del-*`, and `.old-*` whose
    checkpoint was replaced); returns what was removed. An `.old-step-X` with no `step-X` (killed
    between moving the old one aside and renaming the new one in) is a valid checkpoint: it is
    renamed back, not removed. Call it before `latest_valid_checkpoint`, on one rank."""
    root = Path(root)
    if not root.is_dir():
        return []
    removed, restored = [], False
    for path in sorted(root.iterdir()):
        if path.name.startswith(OLD_PREFIX):
            final = root / path.name[len(OLD_PREFIX) :]
            if not final.exists() and (path / MANIFEST).is_file():
                os.rename(path, final)
                restored = True
                continue
        elif not path.name.startswith((TMP_PREFIX, DEL_PREFIX)):
            continue
        _remove(path)
        removed.append(path)
    if removed or restored:
        fsync_dir(root)
    return removed


def prune(root: Path, keep: int, *, protect: Path) -> list[Path]:
    """Delete all but the newest `keep` checkpoints (never `protect`, the one just written) and
    the leftovers of killed saves. A deleted checkpoint is first renamed to `.del-*`, so a kill
    mid-delete never leaves a `step-*` folder with missing files. Returns what was deleted."""
    deleted = clean_partial(root)
    for path in list_checkpoints(root)[keep:]:
        if path != protect:
            doomed = path.with_name(DEL_PREFIX + path.name)
            os.rename(path, doomed)
            _remove(doomed)
            deleted.append(path)
    fsync_dir(root)
    return deleted


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
