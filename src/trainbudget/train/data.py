"""The run's data: token files from `trainbudget data prepare` (or the embedded corpus,
prepared once into <out>/data), batches for training and held-out batches per source."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from trainbudget.core.errors import SpecError
from trainbudget.data.loader import Batches, TokenDataset, eval_batches, to_device
from trainbudget.data.prepare import prepare
from trainbudget.data.tokenizers import load_tokenizer
from trainbudget.train.config import TrainConfig


class TrainBatches:
    """Training batches moved to the device, with the loader's exact position for resuming."""

    def __init__(self, batches: Batches) -> None:
        self.batches = batches

    def next_batch(self, device: torch.device):
        return to_device(next(self.batches), device)

    def state_dict(self) -> dict:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state)


class RunData:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.train = TokenDataset(data_dir, "train")
        self.val = TokenDataset(data_dir, "val")
        self.tokenizer = load_tokenizer(data_dir)
        self.vocab_size = self.train.vocab_size

    def train_batches(
        self, micro_batch: int, seq_len: int, *, seed: int, rank: int = 0, world_size: int = 1
    ) -> TrainBatches:
        return TrainBatches(
            Batches(self.train, micro_batch, seq_len, seed=seed, rank=rank, world_size=world_size)
        )

    def eval_batches(
        self, micro_batch: int, seq_len: int, max_batches: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, str]]:
        """(x, y, source name) over the held-out split."""
        if len(self.val) == 0:
            return
        for x, y, ids in eval_batches(self.val, micro_batch, seq_len, max_batches):
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
