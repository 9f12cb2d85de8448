"""Loader: windows, the mixture, sequential coverage, exact resume, evaluation batches.

Most tests use a synthetic directory whose token at position p is p itself (uint16, distinct),
so a window's tokens say exactly where it was cut from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.data.files import FORMAT_NAME, FORMAT_VERSION  # noqa: E402
from trainbudget.data.loader import Batches, TokenDataset, eval_batches  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402

pytestmark = pytest.mark.torch

SIZES = {"a": (3000, 400), "b": (1000, 150), "c": (500, 90)}  # (train, val) tokens per source
WEIGHTS = {"a": 1.0, "b": 2.0, "c": 1.0}


def synthetic_dir(root: Path, sizes: dict = SIZES, weights: dict = WEIGHTS) -> Path:
    """A prepared directory whose tokens are their own positions."""
    root.mkdir(parents=True, exist_ok=True)
    sources, edges = [], {"train": 0, "val": 0}
    for name, (n_train, n_val) in sizes.items():
        ranges = {}
        for split, n in (("train", n_train), ("val", n_val)):
            ranges[split] = [edges[split], edges[split] + n]
            edges[split] += n
        tokens = {split: r[1] - r[0] for split, r in ranges.items()}
        sources.append({"name": name, "weight": weights[name], "ranges": ranges, "tokens": tokens})
    for split, n in edges.items():
        np.arange(n, dtype=np.uint16).tofile(root / f"{split}.bin")
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dtype": "uint16",
        "vocab_size": 2**16,
        "eot_id": 0,
        "tokenizer": {"kind": "byte", "file": None},
        "tokens": edges,
        "sources": sources,
    }
    (root / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return root


@pytest.fixture
def data(tmp_path: Path) -> TokenDataset:
    return TokenDataset(synthetic_dir(tmp_path / "syn"), "train")


def _source_of(ds: TokenDataset, position: int) -> int:
    return next(i for i, s in enumerate(ds.sources) if s.start <= position < s.end)


def test_dataset_is_a_read_only_memmap(data: TokenDataset) -> None:
    assert isinstance(data.tokens, np.memmap)
    assert len(data) == 4500 and data.source_names == ["a", "b", "c"]
    with pytest.raises(ValueError):
        data.tokens[0] = 1  # mode "r"


def test_windows_are_offset_by_one_inside_one_source(data: TokenDataset) -> None:
    batches = Batches(data, micro_batch=8, seq_len=64, seed=0)
    for _ in range(50):
        x, y, ids = next(batches)
        assert x.shape == y.shape == (8, 64) and ids.shape == (8,)
        assert x.dtype == y.dtype == ids.dtype == torch.int64
        assert torch.equal(y, x + 1)  # y[t] is the token after x[t]
        assert torch.equal(x, x[:, :1] + torch.arange(64))  # a contiguous window
        for row in range(8):
            s = data.sources[int(ids[row])]
            assert s.start <= int(x[row, 0]) and int(y[row, -1]) < s.end


def test_mixture_follows_the_weights(data: TokenDataset) -> None:
    counts = np.zeros(3)
    batches = Batches(data, micro_batch=32, seq_len=16, seed=1)
    for _ in range(300):
        counts += np.bincount(next(batches)[2].numpy(), minlength=3)
    freq = counts / counts.sum()  # 9600 rows: one standard deviation is about 0.005
    assert freq == pytest.approx([0.25, 0.5, 0.25], abs=0.025)
    only_c = Batches(data, micro_batch=32, seq_len=16, weights={"c": 1.0})
    assert set(next(only_c)[2].tolist()) == {2}


def test_windows_are_uniform_inside_a_source(data: TokenDataset) -> None:
    starts = []
    batches = Batches(data, micro_batch=64, seq_len=100, seed=2, weights=[1, 0, 0])
    for _ in range(100):
        starts += next(batches)[0][:, 0].tolist()
    # starts uniform on [0, 3000 - 101]: mean 1449.5, sd of the mean about 835 / 80
    assert min(starts) >= 0 and max(starts) <= 2899
    assert np.mean(starts) == pytest.approx(1449.5, abs=60)


def test_sequential_covers_every_token_of_every_source(data: TokenDataset) -> None:
    batches = Batches(data, micro_batch=5, seq_len=64, sampling="sequential")
    per_epoch = batches.total_windows  # ceil((n - 1) / T) per source: 47 + 16 + 8
    assert per_epoch == 71
    seen_y: set[int] = set()
    seen_x: set[int] = set()
    n_batches = -(-per_epoch // 5)
    for _ in range(n_batches):
        x, y, ids = next(batches)
        seen_x.update(x.flatten().tolist())
        seen_y.update(y.flatten().tolist())
        for row in range(len(ids)):
            assert int(ids[row]) == _source_of(data, int(x[row, 0]))
            assert _source_of(data, int(y[row, -1])) == int(ids[row])
    # every token but a source's last is an input, every token but its first a target
    assert seen_x == {p for s in data.sources for p in range(s.start, s.end - 1)}
    assert seen_y == {p for s in data.sources for p in range(s.start + 1, s.end)}


def test_sequential_wraps_around(data: TokenDataset) -> None:
    batches = Batches(data, micro_batch=71, seq_len=64, sampling="sequential")
    first = next(batches)
    assert all(torch.equal(a, b) for a, b in zip(next(batches), first, strict=True))


@pytest.mark.parametrize("sampling", ["random", "sequential"])
def test_resume_draws_the_same_next_batches(data: TokenDataset, sampling: str) -> None:
    a = Batches(data, micro_batch=4, seq_len=32, seed=7, sampling=sampling)
    for _ in range(5):
        next(a)
    state = json.loads(json.dumps(a.state_dict()))  # survives a JSON (or torch.save) checkpoint
    expected = [next(a) for _ in range(3)]
    b = Batches(data, micro_batch=4, seq_len=32, seed=7, sampling=sampling)
    b.load_state_dict(state)
    for want, got in zip(expected, (next(b) for _ in range(3)), strict=True):
        for w, g in zip(want, got, strict=True):
            assert torch.equal(w, g)


def test_resume_refuses_a_different_loader(data: TokenDataset) -> None:
    state = Batches(data, micro_batch=4, seq_len=32, seed=7).state_dict()
    with pytest.raises(SpecError, match="seq_len"):
        Batches(data, micro_batch=4, seq_len=16, seed=7).load_state_dict(state)


def test_ranks_draw_different_rows(data: TokenDataset) -> None:
    r0 = Batches(data, micro_batch=4, seq_len=32, sampling="sequential", world_size=2)
    r1 = Batches(data, micro_batch=4, seq_len=32, sampling="sequential", rank=1, world_size=2)
    x0, x1 = next(r0)[0][:, 0].tolist(), next(r1)[0][:, 0].tolist()
    assert x0 == [0, 64, 128, 192] and x1 == [32, 96, 160, 224]


def test_bad_loader_arguments(data: TokenDataset) -> None:
    with pytest.raises(SpecError, match="seq_len"):
        Batches(data, micro_batch=2, seq_len=600)  # source c has 500 tokens
    Batches(data, micro_batch=2, seq_len=600, weights={"a": 1, "b": 1})  # c left out: fine
    with pytest.raises(SpecError, match="weights"):
        Batches(data, micro_batch=2, seq_len=8, weights={"zzz": 1})
    with pytest.raises(SpecError, match="sampling"):
        Batches(data, micro_batch=2, seq_len=8, sampling="shuffled")
    with pytest.raises(SpecError, match="micro_batch"):
        Batches(data, micro_batch=0, seq_len=8)


def test_eval_batches_per_source(tmp_path: Path) -> None:
    val = TokenDataset(synthetic_dir(tmp_path / "syn"), "val")
    batches = list(eval_batches(val, micro_batch=2, seq_len=32))
    by_source: dict[int, list[int]] = {}
    for x, y, ids in batches:
        assert len(set(ids.tolist())) == 1  # one source per batch
        assert torch.equal(y, x + 1)
        by_source.setdefault(int(ids[0]), []).extend(x[:, 0].tolist())
    # non-overlapping windows from each source's start: (n - 1) // T of them
    assert by_source == {0: [32 * k for k in range(12)], 1: [400 + 32 * k for k in range(4)],
                         2: [550 + 32 * k for k in range(2)]}  # fmt: skip
    assert list(eval_batches(val, 2, 32)) and len(list(eval_batches(val, 2, 32, 1))) == 3
    assert [b[0].tolist() for b in eval_batches(val, 2, 32)] == [b[0].tolist() for b in batches]


def test_to_device_cpu_and_prepared_data(tmp_path: Path) -> None:
    prepare(None, tmp_path / "d")
    ds = TokenDataset(tmp_path / "d", "train")
    assert ds.dtype == np.uint16 and ds.eot_id == 256 and ds.source_names == ["python-docs"]
    x, y, _ = next(Batches(ds, micro_batch=2, seq_len=128).to("cpu"))
    assert x.device.type == "cpu" and torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < 257


def test_empty_val_split_opens(tmp_path: Path) -> None:
    prepare(None, tmp_path / "d", val_fraction=0)
    val = TokenDataset(tmp_path / "d", "val")
    assert len(val) == 0 and list(eval_batches(val, 2, 16)) == []


def test_truncated_file_is_detected(tmp_path: Path) -> None:
    root = synthetic_dir(tmp_path / "syn")
    with open(root / "train.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(SpecError, match="re-prepare"):
        TokenDataset(root, "train")


@pytest.mark.gpu
def test_to_cuda_is_pinned_and_async(data: TokenDataset) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, y, ids = next(Batches(data, micro_batch=2, seq_len=16).to("cuda"))
    torch.cuda.synchronize()
    assert x.is_cuda and y.is_cuda and ids.is_cuda and torch.equal(y, x + 1)
