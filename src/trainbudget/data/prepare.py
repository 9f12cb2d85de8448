"""Sources of text -> token files: `train.bin`, `val.bin` and the `meta.json` sidecar.

Each split file is the sources one after another, in the order given; each source is its
documents in order, every document followed by the end-of-text id. So a source occupies one
contiguous range [start, end) of each split, recorded in meta.json, and the loader can sample
the mixture by source and report loss per source.

The held-out split takes `val_fraction` of each source's documents, at least one when the
source has two or more, never all; which ones is a deterministic function of (seed, source name).
A source that is a single document holds out its tail instead (cut at a line break).
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.data.files import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_VOCAB_SIZE,
    META_FILE,
    SPLITS,
    StagedFiles,
    split_file,
    token_dtype_name,
)
from trainbudget.data.sources import (
    Source,
    check_source,
    embedded_source,
    parse_source,
    read_documents,
    source_bytes,
)
from trainbudget.data.tokenizers import (
    BYTE_VOCAB_SIZE,
    MIN_BPE_VOCAB_SIZE,
    TOKENIZER_FILE,
    ByteTokenizer,
    HFTokenizer,
    load_tokenizer_file,
    require_bpe,
    train_bpe,
)

MAX_VAL_FRACTION = 0.5
DEFAULT_BPE_VOCAB_SIZE = 4096
ENCODE_CHUNK_CHARS = 4 * 2**20  # documents encoded (and written) together, ~4 MiB of text
PROGRESS_MIN_BYTES = 32 * 2**20  # inputs smaller than this report no progress
PROGRESS_EVERY_FRACTION = 0.05  # of the input, so a long run prints about 20 lines

Progress = Callable[[str], None]


def prepare(
    sources: Sequence[Source | str | os.PathLike] | None,
    out_dir: str | os.PathLike,
    tokenizer: str | os.PathLike = "byte",
    vocab_size: int | None = None,
    val_fraction: float = 0.05,
    seed: int = 0,
    text_field: str = "text",
    progress: Progress | None = None,
    *,
    allow_binary: bool = False,
) -> dict:
    """Tokenize `sources` into `out_dir`; returns the meta.json dict that was written.

    sources: Source objects or `[NAME=]PATH[:WEIGHT]` strings; empty or None: the embedded
        corpus (Python's reference documentation) as source "python-docs".
    tokenizer: "byte", "bpe" (trained here on all sources, `vocab_size` ids, default 4096) or
        the path of a tokenizer.json (copied into out_dir).
    allow_binary: tokenize files that do not look like text (a NUL byte, not UTF-8) anyway.
    """
    srcs = resolve_sources(sources, text_field, allow_binary=allow_binary)
    if not (isinstance(val_fraction, (int, float)) and 0 <= val_fraction <= MAX_VAL_FRACTION):
        raise SpecError("val_fraction", val_fraction, f"must be in [0, {MAX_VAL_FRACTION}]")
    check_tokenizer_request(tokenizer, vocab_size)
    if tokenizer not in ("byte", "bpe"):
        load_tokenizer_file(tokenizer)  # fails now on a bad file, not after reading the sources
    n_docs = [_count_documents(s) for s in srcs]  # reads everything once: bad input fails early
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError("out", str(out), f"cannot be created ({err.strerror})") from None
    report = _Progress(progress, sum(source_bytes(s) for s in srcs))
    if tokenizer == "bpe":
        report.note(f"training BPE ({vocab_size or DEFAULT_BPE_VOCAB_SIZE} ids) on the sources")
    tok = make_tokenizer(tokenizer, vocab_size, srcs)
    try:
        return _write_all(out, srcs, n_docs, tok, val_fraction, seed, report)
    except OSError as err:
        raise SpecError("out", str(out), f"cannot be written ({err.strerror or err})") from None


def _write_all(out, srcs, n_docs, tok, val_fraction, seed, report) -> dict:
    dtype = np.dtype(token_dtype_name(tok.vocab_size))
    entries = []
    with StagedFiles(out) as staged:
        files = {split: staged.open(split_file(split)) for split in SPLITS}
        offsets = dict.fromkeys(SPLITS, 0)
        for source, n in zip(srcs, n_docs, strict=True):
            entry = _write_source(source, n, files, offsets, tok, dtype, val_fraction, seed, report)
            entries.append(entry)
        tok_file = None
        if isinstance(tok, HFTokenizer):
            tok_file = TOKENIZER_FILE
            staged.write_text(TOKENIZER_FILE, tok.to_str())
        meta = _meta(tok, tok_file, dtype, entries, offsets, val_fraction, seed)
        staged.write_text(META_FILE, _dumps(meta))
        # a reader must never pair the old sidecar with the new token files
        (out / META_FILE).unlink(missing_ok=True)
    return meta


def resolve_sources(
    sources: Sequence[Source | str | os.PathLike] | None,
    text_field: str = "text",
    *,
    allow_binary: bool = False,
) -> list[Source]:
    srcs = [
        s if isinstance(s, Source) else parse_source(s, text_field) for s in (sources or [])
    ] or [embedded_source()]
    seen: set[str] = set()
    for s in srcs:
        if s.name in seen:
            raise SpecError("source", s.name, "names must be unique (name one NAME=PATH)")
        seen.add(s.name)
        check_source(s, allow_binary=allow_binary)
    return srcs


def check_tokenizer_request(spec: str | os.PathLike, vocab_size: int | None) -> None:
    """The cheap checks, made before any source is read."""
    if vocab_size is not None and not (
        isinstance(vocab_size, int) and 0 < vocab_size <= MAX_VOCAB_SIZE
    ):
        raise SpecError("vocab_size", vocab_size, f"must be an integer in [1, {MAX_VOCAB_SIZE}]")
    if spec == "byte":
        if vocab_size not in (None, BYTE_VOCAB_SIZE):
            raise SpecError("vocab_size", vocab_size, "the byte tokenizer has exactly 257 ids")
    elif spec == "bpe":
        if vocab_size is not None and vocab_size < MIN_BPE_VOCAB_SIZE:
            rule = f"must be >= {MIN_BPE_VOCAB_SIZE} (256 bytes + end-of-text)"
            raise SpecError("vocab_size", vocab_size, rule)
        require_bpe()
    elif vocab_size is not None:
        raise SpecError("vocab_size", vocab_size, "is fixed by the tokenizer file; leave it out")


def make_tokenizer(
    spec: str | os.PathLike, vocab_size: int | None, sources: list[Source]
) -> ByteTokenizer | HFTokenizer:
    """The byte tokenizer, a BPE trained on all `sources`, or a tokenizer.json loaded."""
    check_tokenizer_request(spec, vocab_size)
    if spec == "byte":
        return ByteTokenizer()
    if spec == "bpe":
        docs = (d for s in sources for d in read_documents(s))
        return train_bpe(docs, vocab_size or DEFAULT_BPE_VOCAB_SIZE)
    return load_tokenizer_file(spec)


def _count_documents(source: Source) -> int:
    n = sum(1 for _ in read_documents(source))
    if n == 0:
        raise SpecError("source", source.origin, "contains no text")
    return n


def held_out(n_docs: int, val_fraction: float, seed: int, name: str) -> np.ndarray:
    """Boolean mask over a source's documents: True for the held-out ones.

    round(val_fraction * n) documents, at least 1 and at most n - 1; none when n < 2 or
    val_fraction is 0. Seeded by (seed, crc32(name)), so adding a source moves no other's split.
    """
    mask = np.zeros(n_docs, dtype=bool)
    if n_docs < 2 or val_fraction <= 0:
        return mask
    k = min(n_docs - 1, max(1, math.floor(val_fraction * n_docs + 0.5)))
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    mask[rng.choice(n_docs, size=k, replace=False)] = True
    return mask


def tail_cut(text: str, val_fraction: float) -> int:
    """Where a single-document source splits: the first line break after 1 - val_fraction of
    its characters (or exactly there when no line break follows). 0 or len(text): no split."""
    if val_fraction <= 0 or len(text) < 2:
        return len(text)
    at = max(1, int(len(text) * (1 - val_fraction)))
    newline = text.find("\n", at)
    return newline + 1 if 0 <= newline < len(text) - 1 else at


def _split_documents(
    source: Source, n_docs: int, val_fraction: float, seed: int
) -> tuple[str, Iterator[tuple[str, str]]]:
    """(how the split was made, an iterator of (split, document))."""
    docs = read_documents(source)
    if n_docs == 1:
        (text,) = docs
        cut = tail_cut(text, val_fraction)
        pieces = [("train", text[:cut]), ("val", text[cut:])]
        return ("tail" if cut < len(text) else "none"), (p for p in pieces if p[1])
    mask = held_out(n_docs, val_fraction, seed, source.name)
    how = "documents" if mask.any() else "none"
    return how, (("val" if mask[i] else "train", d) for i, d in enumerate(docs))


def _write_source(source, n_docs, files, offsets, tok, dtype, val_fraction, seed, report) -> dict:
    starts = dict(offsets)
    counts = dict.fromkeys(SPLITS, 0)
    how, pieces = _split_documents(source, n_docs, val_fraction, seed)
    pending: dict[str, list[str]] = {split: [] for split in SPLITS}
    pending_chars = 0
    for split, doc in pieces:
        pending[split].append(doc)
        pending_chars += len(doc)
        counts[split] += 1
        if pending_chars >= ENCODE_CHUNK_CHARS:
            _flush(pending, files, offsets, tok, dtype)
            report.advance(source.name, pending_chars, offsets)
            pending_chars = 0
    _flush(pending, files, offsets, tok, dtype)
    report.source_done(source, offsets)
    return {
        "name": source.name,
        "kind": source.kind,
        "path": source.origin,
        "weight": source.weight,
        "held_out": how,
        "documents": counts,
        "tokens": {split: offsets[split] - starts[split] for split in SPLITS},
        "ranges": {split: [starts[split], offsets[split]] for split in SPLITS},
    }


def _flush(pending, files, offsets, tok, dtype) -> None:
    for split, docs in pending.items():
        if docs:
            tokens = encode_documents(tok, docs, dtype)
            files[split].write(tokens.tobytes())
            offsets[split] += len(tokens)
            docs.clear()


def encode_documents(tok: ByteTokenizer | HFTokenizer, docs: list[str], dtype) -> np.ndarray:
    """The documents' ids, each document followed by end-of-text, as one array of `dtype`."""
    if isinstance(tok, ByteTokenizer):  # fast path: the UTF-8 bytes are the ids
        parts = [np.frombuffer(d.encode("utf-8"), dtype=np.uint8) for d in docs]
    else:
        parts = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(docs)]
    eot = np.array([tok.eot_id], dtype=dtype)
    return np.concatenate([a for p in parts for a in (p.astype(dtype), eot)])


class _Progress:
    """Calls `progress` with one line per source and per 5 % of a large input."""

    def __init__(self, progress: Progress | None, total_bytes: int) -> None:
        self.progress = progress if total_bytes >= PROGRESS_MIN_BYTES else None
        self.total = max(total_bytes, 1)
        self.finished = 0  # input bytes of the sources done
        self.done = 0  # ... plus characters read of the current one (close to its bytes)
        self.last = 0

    def note(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def advance(self, name: str, n_chars: int, offsets: dict) -> None:
        self.done += n_chars
        if self.done - self.last >= PROGRESS_EVERY_FRACTION * self.total:
            self.last = self.done
            self._line(name, "reading", offsets)

    def source_done(self, source: Source, offsets: dict) -> None:
        self.finished += source_bytes(source)
        self.done = self.last = self.finished
        self._line(source.name, "done", offsets)

    def _line(self, name: str, state: str, offsets: dict) -> None:
        if self.progress is not None:
            pct = min(100.0, 100 * self.done / self.total)
            tokens = sum(offsets.values())
            self.progress(f"{name}: {state}, {pct:.0f}% of the input, {tokens:,} tokens so far")


def _meta(tok, tok_file, dtype, entries, offsets, val_fraction, seed) -> dict:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dtype": dtype.name,
        "vocab_size": tok.vocab_size,
        "eot_id": tok.eot_id,
        "tokenizer": {"kind": tok.kind, "file": tok_file},
        "val_fraction": val_fraction,
        "seed": seed,
        "files": {split: split_file(split) for split in SPLITS},
        "tokens": dict(offsets),
        "documents": {split: sum(e["documents"][split] for e in entries) for split in SPLITS},
        "sources": entries,
    }


def _dumps(meta: dict) -> str:
    return json.dumps(meta, indent=2, allow_nan=False) + "\n"
