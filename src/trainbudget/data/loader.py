"""Token files -> training batches: (x, y, source_ids), resumable exactly.

A batch row is a window of seq_len + 1 tokens at position i of one source's range:
x = tokens[i : i + T] and y = tokens[i + 1 : i + T + 1], the next token at every position.
Windows may cross document boundaries (the end-of-text token marks them) but never a source's,
so every row belongs to exactly one source and loss can be reported per source.

Random sampling draws each row's source by weight (the mixture), then its start uniformly among
the source's windows. Batch k comes from a generator seeded by (seed, k, rank), so the state is
just k: a restored loader draws the same next batches. Sequential sampling walks every source's
windows in file order with a cursor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainbudget.core.errors import SpecError
from trainbudget.data.files import SPLITS, read_meta, split_file
from trainbudget.data.token_ids import (
    SCAN_AT_OPEN_MAX_BYTES,
    check_window_ids,
    needs_check,
    scan_token_ids,
)

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""x (B, T) int64, y (B, T) int64, source_ids (B,) int64 indexes into `source_names`."""

SAMPLINGS = ("random", "sequential")
STATE_VERSION = 1


@dataclass(frozen=True)
class SourceRange:
    name: str
    weight: float
    start: int
    """First token of the source in this split."""
    end: int
    """One past its last token."""

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


class TokenDataset:
    """One split of a prepared directory, memory-mapped read-only: nothing is loaded until read."""

    def __init__(self, data_dir: str | os.PathLike, split: str = "train") -> None:
        if split not in SPLITS:
            raise SpecError("split", split, "must be one of " + ", ".join(SPLITS))
        self.data_dir = Path(data_dir)
        self.split = split
        self.meta = read_meta(data_dir)
        self.vocab_size: int = self.meta["vocab_size"]
        self.eot_id: int = self.meta["eot_id"]
        self.dtype = np.dtype(self.meta["dtype"])
        self.sources = [
            SourceRange(s["name"], s["weight"], *s["ranges"][split]) for s in self.meta["sources"]
        ]
        path = self.data_dir / split_file(split)
        n_tokens = self.meta["tokens"][split]
        if not path.is_file() or path.stat().st_size != n_tokens * self.dtype.itemsize:
            raise SpecError(
                "data", str(path), f"should hold {n_tokens} {self.dtype.name} tokens (re-prepare)"
            )
        # numpy cannot map an empty file; an empty held-out split is legal (val_fraction 0)
        self.tokens: np.ndarray = (
            np.memmap(path, dtype=self.dtype, mode="r") if n_tokens else np.zeros(0, self.dtype)
        )
        self.path = path
        # ids >= vocab_size: the whole file now, or a huge one window by window (token_ids)
        self.check_windows = needs_check(self.dtype, self.vocab_size)
        if self.check_windows and path.stat().st_size <= SCAN_AT_OPEN_MAX_BYTES:
            scan_token_ids(self.tokens, self.vocab_size, path)
            self.check_windows = False

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def source_names(self) -> list[str]:
        return [s.name for s in self.sources]

    def windows(self, starts: Sequence[int] | np.ndarray, seq_len: int) -> torch.Tensor:
        """(len(starts), seq_len + 1) int64: the token windows beginning at `starts`."""
        rows = np.stack([self.tokens[i : i + seq_len + 1] for i in starts])
        if self.check_windows:
            check_window_ids(rows, np.asarray(starts), self.vocab_size, self.path)
        return torch.from_numpy(rows.astype(np.int64))


def to_device(batch: Batch, device: str | torch.device) -> Batch:
    """Copy a batch to `device`; to CUDA from pinned memory, asynchronously (non_blocking), so
    the copy overlaps the previous step's compute."""
    device = torch.device(device)
    if device.type != "cuda":
        return tuple(t.to(device) for t in batch)  # type: ignore[return-value]
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)  # type: ignore[return-value]


def _split_rows(rows: torch.Tensor, source_ids: np.ndarray) -> Batch:
    # rows (B, T + 1) -> x (B, T), y (B, T), contiguous so the model sees plain tensors
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous(), torch.from_numpy(source_ids)


class Batches:
    """An endless iterator of (x, y, source_ids) batches from one split.

    micro_batch: rows B per batch; seq_len: tokens T per row.
    sampling: "random" (the weighted mixture, the training default) or "sequential" (every
        window of every source in file order, stride T, then again from the start).
    weights: per-source mixture weights for random sampling, a {name: weight} mapping or a
        sequence in source order; default the weights given to `prepare`. Zero drops a source.
    rank, world_size: data-parallel shards; each rank draws different rows.
    """

    def __init__(
        self,
        dataset: TokenDataset,
        micro_batch: int,
        seq_len: int,
        seed: int = 0,
        sampling: str = "random",
        weights: Mapping[str, float] | Sequence[float] | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        for field, value in (("micro_batch", micro_batch), ("seq_len", seq_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(field, value, "must be a positive integer")
        if sampling not in SAMPLINGS:
            raise SpecError("sampling", sampling, "must be one of " + ", ".join(SAMPLINGS))
        if not 0 <= rank < world_size:
            raise SpecError("rank", rank, f"must be in [0, world_size = {world_size})")
        self.dataset = dataset
        self.micro_batch = micro_batch
        self.seq_len = seq_len
        self.seed = seed
        self.sampling = sampling
        self.rank = rank
        self.world_size = world_size
        self.device: torch.device | None = None
        self.step = 0  # batches drawn (random) or windows passed (sequential), over all ranks
        self.starts = np.array([s.start for s in dataset.sources], dtype=np.int64)
        # one past the last window start: a window needs T + 1 tokens inside the source
        self.stops = np.array([s.end - seq_len for s in dataset.sources], dtype=np.int64)
        if sampling == "random":
            self.probs = self._mixture(weights)
        else:
            if weights is not None:
                raise SpecError("weights", weights, "apply to random sampling only")
            self.window_counts = np.array(
                [_n_windows(s.n_tokens, seq_len) for s in dataset.sources], dtype=np.int64
            )
            self.total_windows = int(self.window_counts.sum())
            if self.total_windows == 0:
                raise self._too_short(max(dataset.sources, key=lambda s: s.n_tokens))

    @property
    def source_names(self) -> list[str]:
        return self.dataset.source_names

    def to(self, device: str | torch.device) -> Batches:
        """Yield batches on `device` (pinned, non_blocking copies on CUDA); returns self."""
        self.device = torch.device(device)
        return self

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self.sampling == "random":
            batch = self._random_batch(self.step)
            self.step += 1
        else:
            batch = self._sequential_batch(self.step)
            self.step += self.micro_batch * self.world_size
        return batch if self.device is None else to_device(batch, self.device)

    def state_dict(self) -> dict:
        """Everything needed to draw the same next batches: the step plus what it depends on."""
        return {
            "version": STATE_VERSION,
            "step": self.step,
            **self._fingerprint(),
        }

    def load_state_dict(self, state: Mapping) -> None:
        mine = self._fingerprint()
        for key, value in mine.items():
            if state.get(key) != value:
                raise SpecError(
                    f"loader state {key}", state.get(key), f"differs from this loader's {value!r}"
                )
        self.step = int(state["step"])

    def _fingerprint(self) -> dict:
        fp = {
            "sampling": self.sampling,
            "seed": self.seed,
            "micro_batch": self.micro_batch,
            "seq_len": self.seq_len,
            "rank": self.rank,
            "world_size": self.world_size,
            "split": self.dataset.split,
            "n_tokens": len(self.dataset),
            "sources": self.source_names,
        }
        if self.sampling == "random":
            fp["probs"] = [float(p) for p in self.probs]
        return fp

    def _mixture(self, weights: Mapping[str, float] | Sequence[float] | None) -> np.ndarray:
        sources = self.dataset.sources
        if weights is None:
            w = [s.weight for s in sources]
        elif isinstance(weights, Mapping):
            unknown = set(weights) - set(self.source_names)
            if unknown:
                raise SpecError(
                    "weights", sorted(unknown), "unknown; known: " + ", ".join(self.source_names)
                )
            w = [float(weights.get(s.name, 0.0)) for s in sources]
        else:
            w = [float(x) for x in weights]
            if len(w) != len(sources):
                raise SpecError("weights", weights, f"needs one weight per source ({len(sources)})")
        if any(not np.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise SpecError("weights", w, "must be >= 0 with a positive sum")
        for s, x in zip(sources, w, strict=True):
            if x > 0 and s.n_tokens < self.seq_len + 1:
                raise self._too_short(s)
        return np.array(w, dtype=np.float64) / sum(w)

    def _too_short(self, source: SourceRange) -> SpecError:
        return SpecError(
            "seq_len",
            self.seq_len,
            f"source {source.name!r} has {source.n_tokens} {self.dataset.split} tokens; "
            "a window needs seq_len + 1 (lower seq_len or give it weight 0)",
        )

    def _random_batch(self, step: int) -> Batch:
        rng = np.random.default_rng([self.seed, step, self.rank])
        source_ids = rng.choice(len(self.probs), size=self.micro_batch, p=self.probs)
        starts = rng.integers(self.starts[source_ids], self.stops[source_ids])
        return _split_rows(self.dataset.windows(starts, self.seq_len), source_ids)

    def _sequential_batch(self, step: int) -> Batch:
        # rank r takes every world_size-th window, starting at r
        index = step + self.rank + self.world_size * np.arange(self.micro_batch)
        source_ids, starts = self._window(index % self.total_windows)
        return _split_rows(self.dataset.windows(starts, self.seq_len), source_ids)

    def _window(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and start of the given global window numbers (sources in file order)."""
        first = np.concatenate([[0], np.cumsum(self.window_counts)])
        source_ids = np.searchsorted(first, index, side="right") - 1
        k = index - first[source_ids]
        # stride T; the last window of a source is pulled back to end at the source's end
        starts = np.minimum(self.starts[source_ids] + k * self.seq_len, self.stops[source_ids] - 1)
        return source_ids.astype(np.int64), starts


def _n_windows(n_tokens: int, seq_len: int) -> int:
    """Windows at stride T covering every target of a range of n tokens (0 if n < T + 1)."""
    if n_tokens < seq_len + 1:
        return 0
    return -(-(n_tokens - 1) // seq_len)  # ceil((n - 1) / T)


def eval_batches(
    dataset: TokenDataset,
    micro_batch: int,
    seq_len: int,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    *,
    max_rows: int | None = None,
) -> Iterator[Batch]:
    """Deterministic evaluation batches, source by source: non-overlapping windows at stride T
    from each source's start, at most `max_batches` batches (or `max_rows` windows) per source,
    each batch from one source (the last of a source may have fewer rows). A source's last < T
    targets, and any source shorter than T + 1 tokens, are not scored."""
    for source_id, s in enumerate(dataset.sources):
        n_rows = max(0, (s.n_tokens - 1) // seq_len)
        if max_batches is not None:
            n_rows = min(n_rows, max_batches * micro_batch)
        if max_rows is not None:
            n_rows = min(n_rows, max_rows)
        for first in range(0, n_rows, micro_batch):
            rows = np.arange(first, min(first + micro_batch, n_rows), dtype=np.int64)
            ids = np.full(len(rows), source_id, dtype=np.int64)
            batch = _split_rows(dataset.windows(s.start + rows * seq_len, seq_len), ids)
            yield batch if device is None else to_device(batch, device)
