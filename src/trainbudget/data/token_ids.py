"""Every token id below the vocabulary size: checked when a token file is opened, or, for a
file too large to read at start-up, in every window as it is loaded.

An id >= vocab_size indexes past the embedding table: PyTorch raises "index out of range in
self" at the first batch holding one (on CUDA, a device-side assert that ends the process), so
a single bad id deep in the file stops a run hours in. The file is scanned at open when it is
at most SCAN_AT_OPEN_MAX_BYTES (1 GiB: about 0.5 s at 2 GB/s, 512 M uint16 tokens); a larger
one is checked window by window in `TokenDataset.windows`, which costs one max() over the
batch. A dtype that cannot hold an id >= vocab_size (uint16 with 65,536 ids) needs no check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.core.units import GiB

SCAN_AT_OPEN_MAX_BYTES = GiB
SCAN_CHUNK_TOKENS = 2**24  # 32 MiB of uint16 at a time: the memmap is read in pieces


def needs_check(dtype: np.dtype, vocab_size: int) -> bool:
    """Whether `dtype` can hold an id >= vocab_size at all."""
    return int(np.iinfo(dtype).max) >= vocab_size


def scan_token_ids(tokens: np.ndarray, vocab_size: int, path: Path) -> None:
    """Raise a SpecError naming the first id >= vocab_size in `tokens` (a memmap of `path`) and
    its position; reads the file in chunks of SCAN_CHUNK_TOKENS."""
    for first in range(0, len(tokens), SCAN_CHUNK_TOKENS):
        chunk = np.asarray(tokens[first : first + SCAN_CHUNK_TOKENS])
        if int(chunk.max()) >= vocab_size:
            at = int(np.argmax(chunk >= vocab_size))
            raise bad_id(path, int(chunk[at]), first + at, vocab_size)


def check_window_ids(rows: np.ndarray, starts: np.ndarray, vocab_size: int, path: Path) -> None:
    """`rows` (B, T + 1), the windows beginning at `starts`: an id >= vocab_size is named with
    its position in the file."""
    if rows.size and int(rows.max()) >= vocab_size:
        row, col = np.argwhere(rows >= vocab_size)[0]
        raise bad_id(path, int(rows[row, col]), int(starts[row]) + int(col), vocab_size)


def bad_id(path: Path, token_id: int, position: int, vocab_size: int) -> SpecError:
    return SpecError(
        "data",
        str(path),
        f"token {position:,} is id {token_id}, not below vocab_size {vocab_size} (meta.json): "
        "the file does not match its tokenizer (re-prepare it)",
    )
