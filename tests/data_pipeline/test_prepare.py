"""prepare: the token files, the sidecar's counts and ranges, the held-out split, atomicity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainbudget.core.errors import SpecError
from trainbudget.data import prepare as prepare_module
from trainbudget.data.files import read_meta
from trainbudget.data.prepare import held_out, prepare, tail_cut
from trainbudget.data.sources import Source, parse_source
from trainbudget.data.tokenizers import EOT_TEXT, ByteTokenizer


def _split_docs(data_dir: Path, split: str, source: dict) -> list[str]:
    """The documents of one source in one split, decoded (byte tokenizer)."""
    tokens = np.fromfile(data_dir / f"{split}.bin", dtype=np.uint16)
    start, end = source["ranges"][split]
    text = bytes(np.where(tokens[start:end] == 256, 0, tokens[start:end]).astype(np.uint8))
    assert not end > start or tokens[end - 1] == 256  # every document ends with end-of-text
    return text.decode("utf-8").split("\0")[:-1]


def _prepare_corpus(corpus: dict[str, Path], out: Path, **kw) -> dict:
    sources = [str(corpus["text"]), f"notes={corpus['folder']}:2", f"{corpus['jsonl']}:0.5"]
    return prepare(sources, out, text_field="body", val_fraction=0.1, **kw)


def test_files_dtype_counts_and_no_temp_files(corpus: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    meta = _prepare_corpus(corpus, out)
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.bin", "val.bin"]
    assert meta == read_meta(out)
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 257 and meta["eot_id"] == 256
    assert meta["tokenizer"] == {"kind": "byte", "file": None}
    for split in ("train", "val"):
        n_bytes = (out / f"{split}.bin").stat().st_size
        assert n_bytes == 2 * meta["tokens"][split]  # the counts are the file lengths
        assert meta["tokens"][split] == sum(s["tokens"][split] for s in meta["sources"])
    assert [s["name"] for s in meta["sources"]] == ["stories", "notes", "web"]
    assert [s["weight"] for s in meta["sources"]] == [1.0, 2.0, 0.5]
    assert [s["kind"] for s in meta["sources"]] == ["text", "folder", "jsonl"]
    n_docs = [s["documents"]["train"] + s["documents"]["val"] for s in meta["sources"]]
    assert n_docs == [40, 12, 30]


def test_source_ranges_partition_each_split(corpus: dict[str, Path], tmp_path: Path) -> None:
    meta = _prepare_corpus(corpus, tmp_path / "out")
    for split in ("train", "val"):
        edge = 0
        for s in meta["sources"]:
            start, end = s["ranges"][split]
            assert start == edge and end - start == s["tokens"][split]
            edge = end
        assert edge == meta["tokens"][split]


def test_held_out_split_is_nonempty_disjoint_and_complete(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    meta = _prepare_corpus(corpus, out)
    expected = {"stories": 4, "notes": 1, "web": 3}  # round(0.1 n), at least 1
    for s in meta["sources"]:
        train, val = _split_docs(out, "train", s), _split_docs(out, "val", s)
        assert len(val) == s["documents"]["val"] == expected[s["name"]]
        assert len(train) == s["documents"]["train"]
        assert not set(train) & set(val)
        assert s["held_out"] == "documents"
    stories = corpus["text"].read_text(encoding="utf-8").split(EOT_TEXT)
    s0 = meta["sources"][0]
    # together the splits are the source, each in its original order
    train = _split_docs(out, "train", s0)
    assert sorted(train + _split_docs(out, "val", s0)) == sorted(stories)
    assert train == [d for d in stories if d in train]


def test_split_is_deterministic_given_seed(corpus: dict[str, Path], tmp_path: Path) -> None:
    _prepare_corpus(corpus, tmp_path / "a", seed=3)
    _prepare_corpus(corpus, tmp_path / "b", seed=3)
    _prepare_corpus(corpus, tmp_path / "c", seed=4)
    val = {d: (tmp_path / d / "val.bin").read_bytes() for d in "abc"}
    assert val["a"] == val["b"]
    assert val["a"] != val["c"]


def test_held_out_rules() -> None:
    assert held_out(1, 0.5, 0, "s").sum() == 0
    assert held_out(2, 0.01, 0, "s").sum() == 1  # at least one
    assert held_out(3, 0.5, 0, "s").sum() == 2  # round(1.5) = 2, leaving one to train on
    assert held_out(100, 0.0, 0, "s").sum() == 0
    assert held_out(1000, 0.05, 0, "s").sum() == 50
    assert (held_out(50, 0.2, 7, "s") == held_out(50, 0.2, 7, "s")).all()


def test_single_document_source_holds_out_its_tail(tmp_path: Path) -> None:
    lines = [f"line {i} of the only document" for i in range(100)]
    path = tmp_path / "one.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    meta = prepare([path], tmp_path / "out", val_fraction=0.1)
    (s,) = meta["sources"]
    assert s["held_out"] == "tail"
    train, val = _split_docs(tmp_path / "out", "train", s), _split_docs(tmp_path / "out", "val", s)
    assert train[0] + val[0] == path.read_text(encoding="utf-8")
    assert val[0].startswith("line ") and 5 <= len(val[0].splitlines()) <= 15
    assert tail_cut("abc", 0.0) == 3


def test_val_fraction_zero_gives_an_empty_val_file(tmp_path: Path) -> None:
    meta = prepare(None, tmp_path / "out", val_fraction=0)
    assert meta["tokens"]["val"] == 0 and (tmp_path / "out" / "val.bin").stat().st_size == 0
    assert meta["sources"][0]["held_out"] == "none"


def test_embedded_corpus_default(tmp_path: Path) -> None:
    meta = prepare([], tmp_path / "out")
    (s,) = meta["sources"]
    assert s["name"] == "python-docs" and s["kind"] == "embedded"
    assert s["path"].startswith("pydoc_data.topics")
    assert meta["tokens"]["train"] > 400_000 and meta["documents"]["val"] >= 1


def test_failure_leaves_old_files_and_no_temp_files(
    corpus: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    prepare([corpus["text"]], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepare_module, "encode_documents", broken)
    with pytest.raises(SpecError, match="No space left"):
        prepare([corpus["text"], f"{corpus['jsonl']}"], out, text_field="body")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_rerun_replaces_and_meta_matches(corpus: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare([corpus["text"]], out)
    meta = prepare([corpus["folder"]], out)
    on_disk = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert on_disk == meta and on_disk["sources"][0]["name"] == "notes"
    assert (out / "train.bin").stat().st_size == 2 * meta["tokens"]["train"]


def test_parse_source_forms() -> None:
    assert parse_source("data/web.jsonl") == Source(name="web", path=Path("data/web.jsonl"))
    s = parse_source("code=src/py:2.5")
    assert (s.name, s.path, s.weight) == ("code", Path("src/py"), 2.5)
    assert parse_source("a/b=c.txt").path == Path("a/b=c.txt")  # '=' inside a path
    for bad in ("x.txt:0", "x.txt:-1", "x.txt:nan"):
        with pytest.raises(SpecError, match="weight"):
            parse_source(bad)


def test_encoding_is_byte_exact(tmp_path: Path) -> None:
    text = "naïve — 世界 🚀"
    (tmp_path / "u.txt").write_text(text, encoding="utf-8")
    prepare([tmp_path / "u.txt"], tmp_path / "out", val_fraction=0)
    tokens = np.fromfile(tmp_path / "out" / "train.bin", dtype=np.uint16)
    assert tokens.tolist() == [*ByteTokenizer().encode(text), 256]
