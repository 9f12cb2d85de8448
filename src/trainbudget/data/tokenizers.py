"""Tokenizers: text <-> token ids, each with an end-of-text id that separates documents.

`ByteTokenizer` needs nothing: the UTF-8 bytes of the text are the ids (0..255) and 256 is
end-of-text. `HFTokenizer` wraps a Hugging Face `tokenizers.Tokenizer`: a byte-level BPE trained
here on the corpus (kind "bpe") or any tokenizer.json already on disk (kind "pretrained"). That
library is optional (`pip install 'trainbudget[data]'`); asking for BPE without it is a SpecError.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from trainbudget.core.errors import SpecError, unknown_key

if TYPE_CHECKING:
    from tokenizers import Tokenizer as _HFTokenizerObject

EOT_TEXT = "<|endoftext|>"
"""The end-of-text token's text: GPT-2's spelling, also the document separator in text files."""

# end-of-text spellings of common pretrained tokenizers, searched in this order
EOT_CANDIDATES = (EOT_TEXT, "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>", "[SEP]")

BYTE_VOCAB_SIZE = 257  # 256 byte values + end-of-text
MIN_BPE_VOCAB_SIZE = BYTE_VOCAB_SIZE  # the byte alphabet and end-of-text, before any merge
TOKENIZER_FILE = "tokenizer.json"
NAMED_TOKENIZERS = ("byte", "bpe")
"""The tokenizers named by a word; anything else is the path of a tokenizer.json."""
INSTALL_HINT = "needs the Hugging Face `tokenizers` library: pip install 'trainbudget[data]'"


class Tokenizer(Protocol):
    """What prepare and the trainer use of a tokenizer."""

    kind: str
    vocab_size: int
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class ByteTokenizer:
    """Ids are the UTF-8 bytes of the text; 256 is end-of-text. Lossless for any string."""

    kind = "byte"
    vocab_size = BYTE_VOCAB_SIZE
    eot_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """End-of-text is dropped; a cut multi-byte character decodes as U+FFFD."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer with a known end-of-text id; encodes without BOS/EOS templates."""

    def __init__(self, tokenizer: _HFTokenizerObject, kind: str, eot_id: int | None = None):
        self.hf = tokenizer
        self.kind = kind
        self.eot_id = find_eot_id(tokenizer) if eot_id is None else eot_id
        # ids run from 0; the largest id, not the count, bounds them (added tokens may leave gaps)
        self.vocab_size = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Encoded in parallel threads; without offsets (faster) where the library has that."""
        encode = getattr(self.hf, "encode_batch_fast", self.hf.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=True)

    def to_str(self) -> str:
        return self.hf.to_str()


def _hf() -> Any:
    try:
        import tokenizers
    except ImportError:
        return None
    return tokenizers


def bpe_available() -> bool:
    """Whether the optional Hugging Face `tokenizers` library is installed."""
    return _hf() is not None


def require_bpe() -> None:
    """SpecError naming the install command unless `tokenizers` is importable."""
    _require_hf("tokenizer", "bpe")


def _require_hf(field: str, value: object) -> Any:
    hf = _hf()
    if hf is None:
        raise SpecError(field, value, INSTALL_HINT)
    return hf


def find_eot_id(tokenizer: _HFTokenizerObject) -> int:
    for text in EOT_CANDIDATES:
        token_id = tokenizer.token_to_id(text)
        if token_id is not None:
            return token_id
    raise SpecError(
        "tokenizer",
        "tokenizer.json",
        "has no end-of-text token; known: " + ", ".join(EOT_CANDIDATES),
    )


def train_bpe(texts: Iterator[str] | Iterable[str], vocab_size: int) -> HFTokenizer:
    """A byte-level BPE (GPT-2's scheme) with `vocab_size` ids, end-of-text among them.

    Byte-level: every string encodes, and decode(encode(s)) == s. A corpus too small to learn
    `vocab_size - 257` merges gives a smaller vocabulary; the returned `vocab_size` is the real one.
    """
    hf = _require_hf("tokenizer", "bpe")
    if vocab_size < MIN_BPE_VOCAB_SIZE:
        raise SpecError(
            "vocab_size", vocab_size, f"must be >= {MIN_BPE_VOCAB_SIZE} (256 bytes + end-of-text)"
        )
    tok = hf.Tokenizer(hf.models.BPE())
    tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = hf.decoders.ByteLevel()
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT_TEXT],  # id 0
        initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok, kind="bpe")


def load_tokenizer_file(path: str | os.PathLike, kind: str = "pretrained") -> HFTokenizer:
    """Any Hugging Face tokenizer.json (or a folder holding one)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, TOKENIZER_FILE)
    if not os.path.isfile(p):  # a misspelt name ('bytes') is no file: say so, not "install"
        unknown = unknown_key("tokenizer", p, NAMED_TOKENIZERS)
        rule = f"{unknown.rule}, or the path of a Hugging Face {TOKENIZER_FILE} (no such file)"
        raise SpecError("tokenizer", p, rule)
    hf = _require_hf("tokenizer", p)
    try:
        tok = hf.Tokenizer.from_file(p)
    except Exception as err:  # the Rust side raises its own Exception type
        raise SpecError("tokenizer", p, f"is not a Hugging Face tokenizer.json ({err})") from None
    return HFTokenizer(tok, kind=kind)


def load_tokenizer(
    meta: dict | str | os.PathLike, data_dir: str | os.PathLike | None = None
) -> ByteTokenizer | HFTokenizer:
    """The tokenizer that made a prepared data directory, from its meta.json sidecar.

    `meta` is the sidecar's dict (then `data_dir` locates a tokenizer file named in it) or the
    data directory itself.
    """
    if not isinstance(meta, dict):
        from trainbudget.data.files import read_meta

        data_dir = meta
        meta = read_meta(meta)
    info = meta["tokenizer"]
    if info["kind"] == "byte":
        return ByteTokenizer()
    if data_dir is None:
        raise SpecError("data_dir", None, f"is needed to find {info['file']}")
    tok = load_tokenizer_file(os.path.join(os.fspath(data_dir), info["file"]), kind=info["kind"])
    tok.eot_id = meta["eot_id"]
    return tok
