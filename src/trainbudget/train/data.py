"""The run's data: token files from `trainbudget data prepare` (or the embedded corpus,
prepared once into <out>/data), training batches (one global batch per optimizer step, split
among the ranks: `TrainBatches`) and held-out batches per source."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from trainbudget.core.errors import SpecError
from trainbudget.data.loader import Batches, TokenDataset, eval_batches, to_device
from trainbudget.data.prepare import prepare
from trainbudget.data.tokenizers import load_tokenizer
from trainbudget.train.spec.config import TrainConfig

GLOBAL_STATE_VERSION = 1


class TrainBatches:
    """Training batches moved to the device: one global batch per optimizer step, drawn from one
    random stream that every rank shares, each rank taking its rows; exactly resumable.

    Optimizer step s draws its whole global batch -- G = world_size x micro_batch x grad_accum
    windows, sources by the mixture and starts uniformly within each source, as
    `data.loader.Batches` draws them -- from `np.random.default_rng([seed, s])`, the same on every
    rank. Row j = (m x world_size + r) x micro_batch + i goes to micro-batch m of rank r. So
    - every run with the same G (and seed, seq_len, data) trains on the same G windows at every
      step, whatever the split into ranks, micro-batches and accumulation: a 2-rank run with
      micro_batch B and grad_accum A sees per step exactly the windows of a 1-process run with
      (2B, A) or (B, 2A), and the step's mean loss is over the same rows;
    - runs with the same world_size x micro_batch (and grad_accum) even get the same rows in
      the same micro-batch, row for row.
    (The per-rank `Batches(rank=, world_size=)` streams, seeded by (seed, k, rank), give each
    rank valid but different data, which no single-process run reproduces.) Each rank reads only
    its own rows from the memory map. The state is the step and the micro-batch within it, plus
    what the stream depends on; the split into ranks is not part of it, so a checkpoint taken at
    a step boundary resumes exactly under another layout with the same G.
    """

    def __init__(
        self,
        dataset: TokenDataset,
        micro_batch: int,
        seq_len: int,
        *,
        seed: int,
        grad_accum: int = 1,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum <= 0:
            raise SpecError("grad_accum", grad_accum, "must be a positive integer")
        self.micro_batch, self.grad_accum = micro_batch, grad_accum
        self.rank, self.world_size = rank, world_size
        self.global_batch = world_size * micro_batch * grad_accum
        # Batches' own checks: micro_batch, seq_len and rank here; seq_len against the sources and
        # the mixture in the one-stream sampler of G rows, whose window ranges and mixture
        # probabilities _global uses (it draws nothing itself)
        Batches(dataset, micro_batch, seq_len, seed=seed, rank=rank, world_size=world_size)
        self.sampler = Batches(dataset, self.global_batch, seq_len, seed=seed)
        self.dataset, self.seq_len, self.seed = dataset, seq_len, seed
        self.step = 0  # optimizer steps whose micro-batches this rank has all drawn
        self.micro = 0  # micro-batches of the current step drawn
        self._drawn: tuple[int, np.ndarray, np.ndarray] | None = None  # (step, ids, starts)

    def _global(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Source ids and window starts of step `step`'s whole global batch (every rank draws
        the same: the generator does not depend on the rank)."""
        if self._drawn is None or self._drawn[0] != step:
            s = self.sampler
            rng = np.random.default_rng([self.seed, step])
            ids = rng.choice(len(s.probs), size=self.global_batch, p=s.probs)
            starts = rng.integers(s.starts[ids], s.stops[ids])
            self._drawn = (step, ids.astype(np.int64), starts)
        return self._drawn[1], self._drawn[2]

    def fingerprint(self) -> int:
        """CRC-32 of the next step's whole global batch (its sources and window starts): equal
        fingerprints, equal tokens. Logged per step to prove a resumed run reads the stream of
        the uninterrupted one."""
        ids, starts = self._global(self.step)
        return zlib.crc32(starts.astype(np.int64).tobytes(), zlib.crc32(ids.tobytes()))

    def rows(self, micro: int) -> slice:
        """This rank's rows of a step's global batch for micro-batch `micro`."""
        first = (micro * self.world_size + self.rank) * self.micro_batch
        return slice(first, first + self.micro_batch)

    def next_batch(self, device: torch.device):
        ids, starts = self._global(self.step)
        rows = self.rows(self.micro)
        windows = self.dataset.windows(starts[rows], self.seq_len)  # (B, T + 1)
        batch = (
            windows[:, :-1].contiguous(),
            windows[:, 1:].contiguous(),
            torch.from_numpy(ids[rows].copy()),
        )
        self.micro += 1
        if self.micro == self.grad_accum:
            self.step, self.micro = self.step + 1, 0
        return to_device(batch, device)

    def seek(self, step: int) -> None:
        """Continue at the start of optimizer step `step` (a rollback skips the bad batches)."""
        self.step, self.micro = step, 0

    def _fingerprint(self) -> dict:
        return {
            "sampling": "global",
            "seed": self.seed,
            "global_batch": self.global_batch,
            "seq_len": self.seq_len,
            "split": self.dataset.split,
            "n_tokens": len(self.dataset),
            "sources": self.dataset.source_names,
            "probs": [float(p) for p in self.sampler.probs],
        }

    def state_dict(self) -> dict:
        return {
            "version": GLOBAL_STATE_VERSION,
            "step": self.step,
            "micro": self.micro,
            "micro_rows": self.world_size * self.micro_batch,
            **self._fingerprint(),
        }

    def load_state_dict(self, state: dict) -> None:
        for key, value in self._fingerprint().items():
            if state.get(key) != value:
                raise SpecError(
                    f"loader state {key}", state.get(key), f"differs from this run's {value!r}"
                )
        micro = int(state.get("micro", 0))
        # mid-step, the rows already drawn depend on the layout; at a step boundary they do not
        if micro and state.get("micro_rows") != self.world_size * self.micro_batch:
            raise SpecError(
                "loader state micro_rows",
                state.get("micro_rows"),
                "a checkpoint taken inside a step resumes only with the same "
                "world_size x micro_batch",
            )
        self.step, self.micro = int(state["step"]), micro


class RunData:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.train = TokenDataset(data_dir, "train")
        self.val = TokenDataset(data_dir, "val")
        self.tokenizer = load_tokenizer(data_dir)
        self.vocab_size = self.train.vocab_size

    def train_batches(
        self,
        micro_batch: int,
        seq_len: int,
        *,
        seed: int,
        grad_accum: int = 1,
        rank: int = 0,
        world_size: int = 1,
    ) -> TrainBatches:
        """This rank's share of one global batch per optimizer step (see TrainBatches)."""
        return TrainBatches(
            self.train,
            micro_batch,
            seq_len,
            seed=seed,
            grad_accum=grad_accum,
            rank=rank,
            world_size=world_size,
        )

    def eval_batches(
        self, micro_batch: int, seq_len: int, max_windows: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, str]]:
        """(x, y, source name) over the held-out split: the first `max_windows` windows of each
        source, `micro_batch` at a time (so the set does not depend on the batch size)."""
        if len(self.val) == 0:
            return
        for x, y, ids in eval_batches(self.val, micro_batch, seq_len, max_rows=max_windows):
            yield x, y, self.val.source_names[int(ids[0])]

    def unigram_entropy(self) -> float:
        """Entropy in nats of the training tokens' frequencies: the loss of the best model that
        ignores context, the bar a trained model must get well below."""
        counts = np.bincount(np.asarray(self.train.tokens), minlength=self.vocab_size)
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())


def open_data(cfg: TrainConfig, *, main: bool, barrier: Callable[[], None]) -> RunData:
    if cfg.data:
        path = Path(cfg.data)
        if not (path / "meta.json").exists():
            raise SpecError(
                "data",
                cfg.data,
                "is not a directory from `trainbudget data prepare` (no meta.json)",
            )
        return RunData(path)
    path = cfg.run_dir / "data"
    if main and not (path / "meta.json").exists():
        prepare(None, path, tokenizer="byte")  # the embedded corpus, byte-level
    barrier()
    return RunData(path)
