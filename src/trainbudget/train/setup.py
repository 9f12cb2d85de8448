"""The pieces a run is built from that need torch: seeds, the optimizer for a precision
policy, and autocast with its gradient scaler."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from trainbudget.model.optim import MasterWeightOptimizer
from trainbudget.model.optimizers import build_optimizer
from trainbudget.train.config import TrainConfig


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


def mixed_precision(precision: str, device: torch.device):
    """(autocast context, gradient scaler) for a precision policy: torch.autocast for the
    amp-* policies (fp32 weights, 16-bit matmuls), a GradScaler for fp16 (its small range
    underflows gradients without loss scaling, Micikevicius et al. 2018, arXiv 1710.03740);
    no-ops otherwise."""
    dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)
    autocast = (
        torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    )
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp-fp16")
    return autocast, scaler
