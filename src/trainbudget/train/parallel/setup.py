"""The pieces a run is built from that need torch: seeds and the optimizer for a precision
policy (autocast and its gradient scaler: model.optim.mixed_precision, which the profiler
shares)."""

from __future__ import annotations

import random

import numpy as np
import torch

from trainbudget.model.optim import MasterWeightOptimizer
from trainbudget.model.optimizers import build_optimizer
from trainbudget.train.spec.config import TrainConfig


def seed_everything(seed: int) -> None:
    """Python, numpy and torch (the seeds' advice: seed every source of randomness)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(model, cfg: TrainConfig):
    if cfg.precision == "bf16-mixed":
        return MasterWeightOptimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    return build_optimizer(
        cfg.optimizer, model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
    )
