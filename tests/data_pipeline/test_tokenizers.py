"""Tokenizers: byte round trips, BPE training and reloading, the embedded corpus."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.data.corpus import default_corpus, default_topics
from trainbudget.data.prepare import prepare
from trainbudget.data.tokenizers import (
    BYTE_VOCAB_SIZE,
    ByteTokenizer,
    bpe_available,
    load_tokenizer,
    load_tokenizer_file,
    train_bpe,
)

MIXED_TEXT = "Grüße, 世界! naïve café — 🚀 tabs\tand\r\nnewlines\n  indented"

needs_bpe = pytest.mark.skipif(not bpe_available(), reason="Hugging Face tokenizers not installed")


def test_byte_round_trip_ascii_and_non_ascii() -> None:
    tok = ByteTokenizer()
    for text in ("", "hello world", MIXED_TEXT):
        ids = tok.encode(text)
        assert ids == list(text.encode("utf-8"))  # the ids are the UTF-8 bytes
        assert tok.decode(ids) == text
    assert len(tok.encode("é")) == 2 and len(tok.encode("🚀")) == 4


def test_byte_vocab_and_end_of_text() -> None:
    tok = ByteTokenizer()
    assert tok.vocab_size == BYTE_VOCAB_SIZE == 257
    assert tok.eot_id == 256
    assert max(tok.encode(MIXED_TEXT)) < 256
    assert tok.decode([104, 105, tok.eot_id, 33]) == "hi!"  # end-of-text is not text
    assert tok.decode([0xE4]) == "\ufffd"  # a cut multi-byte character does not raise


def test_default_corpus_is_python_reference_docs() -> None:
    text = default_corpus()
    topics = default_topics()
    assert len(topics) > 50
    assert len(text.encode("utf-8")) > 400_000
    assert text.startswith('The "assert" statement')  # topics in sorted key order
    assert 'The "try" statement' in text
    assert text == default_corpus()  # sorted keys: the same string every call


@needs_bpe
def test_bpe_round_trip_and_vocab_size() -> None:
    tok = train_bpe(default_topics(), vocab_size=512)
    assert tok.kind == "bpe"
    assert tok.vocab_size == 512
    assert 0 <= tok.eot_id < 512
    for text in ("def f(x):\n    return x", MIXED_TEXT, ""):
        ids = tok.encode(text)
        assert all(0 <= i < 512 for i in ids)
        assert tok.decode(ids) == text  # byte-level: lossless for any string
    # merges learned: fewer tokens than bytes on text like the corpus
    sample = default_topics()[0][:2000]
    assert len(tok.encode(sample)) < 0.7 * len(sample.encode("utf-8"))


@needs_bpe
def test_bpe_prepare_saves_and_reloads_tokenizer(tmp_path: Path) -> None:
    meta = prepare(None, tmp_path / "d", tokenizer="bpe", vocab_size=400)
    assert meta["tokenizer"] == {"kind": "bpe", "file": "tokenizer.json"}
    assert meta["vocab_size"] == 400 and meta["dtype"] == "uint16"
    assert (tmp_path / "d" / "tokenizer.json").is_file()
    tok = load_tokenizer(tmp_path / "d")
    assert tok.vocab_size == 400 and tok.eot_id == meta["eot_id"]
    assert tok.decode(tok.encode(MIXED_TEXT)) == MIXED_TEXT
    # the same tokenizer from the dict and the folder
    assert load_tokenizer(meta, tmp_path / "d").encode("lambda") == tok.encode("lambda")

    # a tokenizer.json already on disk: reused as "pretrained", same ids
    again = prepare(None, tmp_path / "e", tokenizer=tmp_path / "d" / "tokenizer.json")
    assert again["tokenizer"]["kind"] == "pretrained"
    assert again["tokens"] == meta["tokens"]
    a = (tmp_path / "d" / "train.bin").read_bytes()
    assert (tmp_path / "e" / "train.bin").read_bytes() == a


@needs_bpe
def test_pretrained_file_or_folder(tmp_path: Path) -> None:
    train_bpe(["some text to learn from"] * 10, vocab_size=300).hf.save(str(tmp_path / "t.json"))
    assert load_tokenizer_file(tmp_path / "t.json").vocab_size <= 300
    with pytest.raises(SpecError, match="tokenizer"):
        load_tokenizer_file(tmp_path)  # a folder without tokenizer.json
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    with pytest.raises(SpecError, match="not a Hugging Face tokenizer"):
        load_tokenizer_file(tmp_path / "bad.json")


def test_bpe_without_the_library_is_a_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` now fails
    assert not bpe_available()
    with pytest.raises(SpecError, match="pip install") as err:
        prepare(None, tmp_path / "d", tokenizer="bpe")
    assert err.value.field == "tokenizer"
    assert not (tmp_path / "d" / "meta.json").exists()
    assert load_tokenizer(prepare(None, tmp_path / "b")).encode("a") == [97]  # byte still works
