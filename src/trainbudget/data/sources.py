"""Sources: what text a source names, and how it splits into documents.

A source is a text file, a folder (every *.txt and *.md below it, recursively, in path order) or
a JSONL file (one JSON object per line, its text under `text_field`). Documents are the units
that are held out and that end with the end-of-text token:

- a JSONL line is one document;
- a text file (or each file of a folder) is one document, unless it contains the literal
  separator `<|endoftext|>` (the convention of GPT-2-style text dumps): then each piece is one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.data.corpus import DEFAULT_SOURCE_NAME, default_corpus_origin, default_topics
from trainbudget.data.tokenizers import EOT_TEXT

FOLDER_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
SNIFF_BYTES = 8 * 2**10  # how much of each file is looked at to tell text from binary


@dataclass(frozen=True, kw_only=True)
class Source:
    name: str
    """Reported in meta.json and by the loader (per-source loss); unique within a prepare."""
    path: Path | None
    """A text file, a folder or a JSONL file; None: the embedded corpus."""
    weight: float = 1.0
    """Relative probability of drawing a training window from this source (the mixture)."""
    text_field: str = "text"
    """The key holding the text in each JSONL object."""

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise SpecError(
                "source", self.name, "a name must be non-empty, without spaces (NAME=PATH)"
            )
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise SpecError("weight", self.weight, f"of source {self.name!r} must be > 0")

    @property
    def kind(self) -> str:
        if self.path is None:
            return "embedded"
        if self.path.is_dir():
            return "folder"
        return "jsonl" if self.path.suffix.lower() in JSONL_SUFFIXES else "text"

    @property
    def origin(self) -> str:
        return default_corpus_origin() if self.path is None else str(self.path)


def embedded_source() -> Source:
    return Source(name=DEFAULT_SOURCE_NAME, path=None)


def parse_source(spec: str | os.PathLike, text_field: str = "text") -> Source:
    """`[NAME=]PATH[:WEIGHT]`: NAME defaults to the file's stem, WEIGHT to 1."""
    if not isinstance(spec, str):
        path = Path(spec)
        return Source(name=_default_name(path), path=path, text_field=text_field)
    text, name, weight = spec, None, 1.0
    head, eq, rest = text.partition("=")
    if eq and os.sep not in head and "/" not in head:
        name, text = head, rest
    body, colon, tail = text.rpartition(":")
    if colon and body and not Path(text).exists():  # a file named with a colon is that file
        parsed = _weight(tail, spec, names_a_file=Path(body).exists())
        if parsed is not None:
            text, weight = body, parsed
    path = Path(text)
    return Source(name=name or _default_name(path), path=path, weight=weight, text_field=text_field)


def _weight(tail: str, spec: str, *, names_a_file: bool) -> float | None:
    """The WEIGHT after the last colon; None when it is part of the path instead (not a
    number, and what precedes it is no file)."""
    try:
        weight = float(tail)
    except ValueError:
        if not names_a_file:
            return None
        weight = math.nan  # 'small.txt:abc': a file, then a weight that is not a number
    if not (math.isfinite(weight) and weight > 0):
        raise SpecError("weight", tail, f"of source {spec!r} must be a number > 0")
    return weight


def _default_name(path: Path) -> str:
    """The file's stem, its spaces made underscores ('my data.txt' -> my_data)."""
    return "_".join((path.stem or path.name).split()) or path.name


def check_source(source: Source, *, allow_binary: bool = False) -> None:
    """Fail before anything is written: the path exists, a folder has text files, and each
    file looks like text (see `binary_reason`) unless `allow_binary`."""
    if source.path is None:
        return
    if not source.path.exists():
        raise SpecError(
            "source", str(source.path), "no such file or folder (a source is [NAME=]PATH[:WEIGHT])"
        )
    files = folder_files(source.path) if source.kind == "folder" else [source.path]
    if not files:
        raise SpecError("source", str(source.path), "folder has no *.txt or *.md files")
    if allow_binary:
        return
    for path in files:
        reason = binary_reason(path)
        if reason:
            raise SpecError(
                "source",
                str(path),
                f"looks binary ({reason}), not text; pass --allow-binary to tokenize it anyway",
            )


def binary_reason(path: Path) -> str | None:
    """Why the file's first SNIFF_BYTES are not text -- a NUL byte, or bytes that are not
    UTF-8 -- or None. A multi-byte character cut at the end of the sample is not counted."""
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as err:
        raise SpecError("source", str(path), f"cannot be read ({err.strerror})") from None
    nul = head.find(b"\0")
    if nul >= 0:
        return f"a NUL byte at offset {nul}"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3 or err.reason != "unexpected end of data":
            return f"not UTF-8 at offset {err.start}"
    return None


def source_bytes(source: Source) -> int:
    """Input size, for progress reporting."""
    if source.path is None:
        return 0
    if source.kind == "folder":
        return sum(p.stat().st_size for p in folder_files(source.path))
    return source.path.stat().st_size


def folder_files(folder: Path) -> list[Path]:
    files = (p for p in folder.rglob("*") if p.suffix.lower() in FOLDER_SUFFIXES and p.is_file())
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def read_documents(source: Source) -> Iterator[str]:
    """The source's documents in order; empty ones are skipped."""
    if source.path is None:
        docs: Iterator[str] = iter(default_topics())
    elif source.kind == "folder":
        docs = (d for p in folder_files(source.path) for d in _text_documents(p))
    elif source.kind == "jsonl":
        docs = _jsonl_documents(source.path, source.text_field)
    else:
        docs = _text_documents(source.path)
    return (d for d in docs if d)


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig drops a byte-order mark; undecodable bytes become U+FFFD rather than failing
        return path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as err:
        raise SpecError("source", str(path), f"cannot be read ({err.strerror})") from None


def _text_documents(path: Path) -> list[str]:
    return _read_text(path).split(EOT_TEXT)


def _jsonl_documents(path: Path, field: str) -> Iterator[str]:
    with path.open(encoding="utf-8-sig", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise SpecError(
                    "source", f"{path}:{lineno}", f"line {lineno} is not JSON ({err.msg})"
                ) from None
            if not isinstance(obj, dict) or field not in obj:
                raise SpecError("text_field", field, f"missing on line {lineno} of {path}")
            text = obj[field]
            if not isinstance(text, str):
                raise SpecError("text_field", field, f"is not a string on line {lineno} of {path}")
            yield text
