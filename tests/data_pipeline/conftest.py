"""Small corpora written into tmp_path, shared by the data pipeline tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def numbered_docs(prefix: str, n: int, words: int = 30) -> list[str]:
    """n distinct documents, each naming its own number (so a split can be checked by text)."""
    return [
        f"{prefix} document {i}: " + " ".join(f"w{i}x{j}" for j in range(words)) for i in range(n)
    ]


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    """Three sources: a text file of 40 <|endoftext|>-separated documents, a folder of 12 files
    (txt and md, nested, plus a .py that must be ignored) and a JSONL file of 30 records."""
    root = tmp_path / "corpus"
    root.mkdir()
    text = root / "stories.txt"
    text.write_text("<|endoftext|>".join(numbered_docs("story", 40)), encoding="utf-8")
    folder = root / "notes"
    (folder / "deep").mkdir(parents=True)
    for i, doc in enumerate(numbered_docs("note", 12)):
        sub = folder / "deep" if i % 2 else folder
        (sub / f"n{i:02d}.{'md' if i % 3 == 0 else 'txt'}").write_text(doc, encoding="utf-8")
    (folder / "ignored.py").write_text("print('not text')", encoding="utf-8")
    jsonl = root / "web.jsonl"
    records = [{"id": i, "body": doc} for i, doc in enumerate(numbered_docs("page", 30))]
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return {"text": text, "folder": folder, "jsonl": jsonl}
