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
    except (OSError, json.JSONDecodeError) as err:
        raise SpecError("data", str(path), f"cannot be read ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise SpecError("data", str(path), f"is not a {FORMAT_NAME} sidecar")
    if meta.get("format_version") != FORMAT_VERSION:
        raise SpecError(
            "data", str(path), f"format_version {meta.get('format_version')} != {FORMAT_VERSION}"
        )
    return meta
