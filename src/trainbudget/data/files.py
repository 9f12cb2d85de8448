"""The on-disk format of a prepared data directory, and writing it atomically.

    DIR/train.bin      tokens, native-endian uint16 (vocab_size <= 65536) or uint32, no header
    DIR/val.bin        the held-out split, same dtype (may be empty)
    DIR/meta.json      the sidecar: dtype, vocab, tokenizer, counts, sources and their ranges
    DIR/tokenizer.json the Hugging Face tokenizer (BPE or pretrained only)

Every file is written to a temporary name in DIR (`.tmp-*`), fsynced, and renamed over the old
one only when all are complete (`os.replace` is atomic on POSIX and Windows): a reader sees an
old file or a new one, never half of one. The old meta.json is removed before the token files
are replaced and the new one renamed last, so a sidecar never describes other token files.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import IO

from trainbudget.core.errors import SpecError

FORMAT_NAME = "trainbudget-tokens"
FORMAT_VERSION = 1
META_FILE = "meta.json"
SPLITS = ("train", "val")
TEMP_PREFIX = ".tmp-"
UINT16_VOCAB_LIMIT = 2**16  # ids 0..65535 fit in uint16
TOKEN_DTYPES = ("uint16", "uint32")  # what token_dtype_name chooses from
MAX_VOCAB_SIZE = 2**32


def split_file(split: str) -> str:
    return f"{split}.bin"


def token_dtype_name(vocab_size: int) -> str:
    """The smallest unsigned dtype holding every id (uint16 halves the file of a byte vocab)."""
    return "uint16" if vocab_size <= UINT16_VOCAB_LIMIT else "uint32"


class StagedFiles:
    """Files written under temporary names in one folder, renamed into place together.

    `open(name)` gives a binary file at a temporary name; `commit()` fsyncs and closes each,
    then renames them in the order opened (so the sidecar, opened last, lands last). Use it as a
    context manager: on an exception every temporary file is removed and nothing is replaced.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self._staged: list[tuple[Path, str, IO[bytes]]] = []

    def open(self, name: str) -> IO[bytes]:
        tmp = str(self.folder / f"{TEMP_PREFIX}{name}.{os.getpid()}.{secrets.token_hex(4)}")
        # mode 0o666 under the umask, as open() would give (mkstemp's 0o600 would stick)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        f = os.fdopen(fd, "wb")
        self._staged.append((self.folder / name, tmp, f))
        return f

    def write_text(self, name: str, text: str) -> None:
        self.open(name).write(text.encode("utf-8"))

    def commit(self) -> None:
        for _, _, f in self._staged:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        for path, tmp, _ in self._staged:
            os.replace(tmp, path)
        self._staged.clear()
        _fsync_dir(self.folder)

    def abort(self) -> None:
        for _, tmp, f in self._staged:
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._staged.clear()

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; Windows cannot open a folder, and needs not)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(data_dir: str | os.PathLike) -> dict:
    """meta.json of a prepared directory, checked to be a format this code reads."""
    path = Path(data_dir) / META_FILE
    if not path.is_file():
        raise SpecError("data", str(data_dir), "has no meta.json; run `trainbudget data prepare`")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError
        raise SpecError("data", str(path), f"cannot be read ({err})") from None
    except RecursionError:
        raise SpecError("data", str(path), "cannot be read (nested too deeply)") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise SpecError("data", str(path), f"is not a {FORMAT_NAME} sidecar")
    if meta.get("format_version") != FORMAT_VERSION:
        raise SpecError(
            "data", str(path), f"format_version {meta.get('format_version')} != {FORMAT_VERSION}"
        )
    check_meta(meta, str(path))
    return meta


def check_meta(meta: dict, where: str) -> None:
    """The keys every reader uses, each of its type, and every source's range inside its split:
    a range past the end would read windows outside the file. SpecError("data", where, ...)
    naming the key."""

    def need(ok: bool, key: str, what: str) -> None:
        if not ok:
            raise SpecError("data", where, f"{key} must be {what} (re-prepare the folder)")

    vocab, dtype, tokens, sources = (
        meta.get(k) for k in ("vocab_size", "dtype", "tokens", "sources")
    )
    need(_is_count(vocab) and vocab > 0, "vocab_size", "a positive integer")
    need(dtype in TOKEN_DTYPES, "dtype", " or ".join(TOKEN_DTYPES))
    eot = meta.get("eot_id")
    need(_is_count(eot) and eot < vocab, "eot_id", f"an integer in [0, vocab_size = {vocab})")
    need(isinstance(meta.get("tokenizer"), dict), "tokenizer", "an object")
    for split in SPLITS:
        count = tokens.get(split) if isinstance(tokens, dict) else None
        need(_is_count(count), f"tokens.{split}", "a count")
    need(isinstance(sources, list) and bool(sources), "sources", "a non-empty list")
    for i, s in enumerate(sources):
        need(isinstance(s, dict) and isinstance(s.get("name"), str), f"sources[{i}].name", "text")
        weight = s.get("weight")
        need(_is_number(weight) and weight >= 0, f"sources[{i}].weight", "a number >= 0")
        ranges = s.get("ranges")
        for split in SPLITS:
            span = ranges.get(split) if isinstance(ranges, dict) else None
            key = f"sources[{i}].ranges.{split}"
            need(
                isinstance(span, list) and len(span) == 2 and all(map(_is_count, span)),
                key,
                "[start, end]",
            )
            need(
                span[0] <= span[1] <= tokens[split],
                key,
                f"inside the split (0 <= start <= end <= tokens.{split} = {tokens[split]}), "
                f"not {span}",
            )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
