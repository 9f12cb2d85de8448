"""Issue 15, item 5: token ids >= vocab_size are found when the file is opened (or, for a file
over SCAN_AT_OPEN_MAX_BYTES, in the window that holds one), named with their position; a
meta.json whose ranges run past the end of the file, or without eot_id, is refused by name.

The failure they replace: the embedding lookup raises "IndexError: index out of range in self"
at the first batch holding the id (reproduced below), so a sparse bad id let a run go for
steps; ranges past the end read windows outside the source."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.data import token_ids  # noqa: E402
from trainbudget.data.files import read_meta  # noqa: E402
from trainbudget.data.loader import TokenDataset  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402

pytestmark = pytest.mark.torch

BAD_ID, BAD_AT = 300, 1234  # an id past the byte vocabulary (257), deep in the file


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    text = tmp_path / "t.txt"
    text.write_text("plain words for a small byte corpus. " * 200, encoding="utf-8")
    out = tmp_path / "data"
    prepare([str(text)], out, tokenizer="byte", val_fraction=0.0)
    return out


def poke(data: Path, position: int, value: int) -> None:
    tokens = np.memmap(data / "train.bin", dtype=np.uint16, mode="r+")
    tokens[position] = value
    tokens.flush()
    del tokens


def test_the_failure_without_the_check(prepared: Path) -> None:
    """What a bad id does to the model: the embedding lookup fails, at that batch only."""
    embedding = torch.nn.Embedding(257, 4)
    with pytest.raises(IndexError, match="index out of range in self"):
        embedding(torch.tensor([[BAD_ID]]))


def test_a_sparse_bad_id_is_found_at_open(prepared: Path) -> None:
    poke(prepared, BAD_AT, BAD_ID)
    with pytest.raises(SpecError) as caught:
        TokenDataset(prepared, "train")
    err = caught.value
    assert err.field == "data" and err.value == str(prepared / "train.bin")
    assert f"token {BAD_AT:,} is id {BAD_ID}, not below vocab_size 257" in err.rule
    assert "\n" not in str(err)


def test_a_file_too_large_to_scan_is_checked_per_window(prepared, monkeypatch) -> None:
    poke(prepared, BAD_AT, BAD_ID)
    monkeypatch.setattr("trainbudget.data.loader.SCAN_AT_OPEN_MAX_BYTES", 0)
    data = TokenDataset(prepared, "train")  # opens: nothing scanned
    assert data.check_windows
    clean = data.windows([0, 100], 32)  # windows that do not hold the id load
    assert int(clean.max()) < 257
    with pytest.raises(SpecError, match=f"token {BAD_AT:,} is id {BAD_ID}"):
        data.windows([0, BAD_AT - 5], 32)


def test_a_dtype_that_cannot_hold_a_bad_id_is_not_scanned() -> None:
    assert not token_ids.needs_check(np.dtype(np.uint16), 2**16)
    assert token_ids.needs_check(np.dtype(np.uint16), 257)
    assert token_ids.needs_check(np.dtype(np.uint32), 2**16 + 1)


def test_the_scan_reads_in_chunks(monkeypatch) -> None:
    monkeypatch.setattr(token_ids, "SCAN_CHUNK_TOKENS", 7)
    tokens = np.zeros(50, dtype=np.uint16)
    tokens[43] = 999
    with pytest.raises(SpecError, match="token 43 is id 999"):
        token_ids.scan_token_ids(tokens, 257, Path("x.bin"))
    token_ids.scan_token_ids(np.full(50, 256, dtype=np.uint16), 257, Path("x.bin"))


def edit_meta(data: Path, change) -> None:
    meta = json.loads((data / "meta.json").read_text())
    change(meta)
    (data / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: m["sources"][0]["ranges"]["train"].__setitem__(1, 10**9), "ranges.train"),
        (lambda m: m["sources"][0]["ranges"]["train"].__setitem__(0, 10**9), "ranges.train"),
        (lambda m: m.pop("eot_id"), "eot_id must be"),
        (lambda m: m.update(eot_id=257), "eot_id must be"),
        (lambda m: m["tokens"].pop("val"), "tokens.val must be"),
        (lambda m: m["sources"][0].pop("name"), "sources[0].name"),
    ],
)
def test_a_meta_json_that_does_not_fit_its_file_is_refused(prepared, change, needle) -> None:
    edit_meta(prepared, change)
    with pytest.raises(SpecError) as caught:
        read_meta(prepared)
    assert caught.value.field == "data" and needle in caught.value.rule, str(caught.value)
    with pytest.raises(SpecError, match="re-prepare"):
        TokenDataset(prepared, "train")  # the loader reads through the same check


def test_deeply_nested_meta_json_is_one_error(prepared: Path) -> None:
    (prepared / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match="cannot be read"):
        read_meta(prepared)
