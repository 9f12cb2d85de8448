"""Training time and cost: FLOPs / (GPUs x peak x MFU).

Seed 000 (S-train-time) and seed 003 (T-days) derive training time this way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


@dataclass(frozen=True, kw_only=True)
class TrainingTime:
    train_flops: float
    n_gpus: int
    peak_flops_per_second: float
    mfu: float
    price_per_gpu_hour: float | None

    @property
    def achieved_flops_per_second(self) -> float:
        """Useful model FLOP/s of the whole cluster."""
        return self.n_gpus * self.peak_flops_per_second * self.mfu

    @property
    def seconds(self) -> float:
        return self.train_flops / self.achieved_flops_per_second

    @property
    def days(self) -> float:
        return self.seconds / SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float:
        return self.seconds * self.n_gpus / SECONDS_PER_HOUR

    @property
    def cost(self) -> float | None:
        if self.price_per_gpu_hour is None:
            return None
        return self.gpu_hours * self.price_per_gpu_hour


def training_time(
    *,
    train_flops: float,
    n_gpus: int,
    peak_flops_per_second: float,
    mfu: float,
    price_per_gpu_hour: float | None = None,
) -> TrainingTime:
    if n_gpus <= 0:
        raise SpecError("gpus", n_gpus, "must be a positive integer")
    if not 0 < mfu <= 1:
        raise SpecError("mfu", mfu, "must be in (0, 1]: a fraction of the peak")
    if train_flops < 0:
        raise SpecError("train_flops", train_flops, "must not be negative")
    if price_per_gpu_hour is not None and price_per_gpu_hour < 0:
        raise SpecError("price_per_gpu_hour", price_per_gpu_hour, "must not be negative")
    return TrainingTime(
        train_flops=train_flops,
        n_gpus=n_gpus,
        peak_flops_per_second=peak_flops_per_second,
        mfu=mfu,
        price_per_gpu_hour=price_per_gpu_hour,
    )


def mfu_from_measurement(
    *, flops_per_step: float, step_seconds: float, n_gpus: int, peak_flops_per_second: float
) -> float:
    """Achieved / promised FLOP/s (seed 000: MFU = actual FLOP/s / promised FLOP/s)."""
    if step_seconds <= 0:
        raise SpecError("step_seconds", step_seconds, "must be positive")
    if n_gpus <= 0:
        raise SpecError("gpus", n_gpus, "must be a positive integer")
    mfu = flops_per_step / step_seconds / (n_gpus * peak_flops_per_second)
    if not mfu <= 1:  # also catches inf from a step time that underflows
        raise SpecError(
            "step_seconds",
            step_seconds,
            f"implies MFU {mfu:.3g} > 1 (faster than the hardware peak): check the step time, "
            "--sequences, --gpus and --gpu",
        )
    return mfu


def tokens_from_epochs(*, epochs: float, n_samples: float, mean_tokens_per_sample: float) -> float:
    """Tokens = epochs x samples x mean length (seed 004: Epoch * 数据条数 * 平均数据长度)."""
    for field, value in (
        ("epochs", epochs),
        ("samples", n_samples),
        ("mean_length", mean_tokens_per_sample),
    ):
        if value <= 0:
            raise SpecError(field, value, "must be positive")
    return epochs * n_samples * mean_tokens_per_sample


# Tokens per optimizer step when none is given. Llama 1 trained every size on batches of 4M
# tokens (Touvron et al. 2023, arXiv:2302.13971, Table 2: 2,048 sequences of 2,048 tokens) and
# so did Llama 2 (arXiv:2307.09288, Table 1: "All models are trained with a global batch-size
# of 4M tokens", 1,024 sequences of 4,096): 4 x 2**20 tokens.
DEFAULT_TOKENS_PER_BATCH = 4 * 2**20


def default_global_batch(seq_len: int) -> int:
    """Sequences per optimizer step when the user gives none: about DEFAULT_TOKENS_PER_BATCH
    tokens, as a power of two so that the usual data-parallel degrees divide it (512 sequences
    at seq_len 8192, 2,048 at 2048); at least one sequence."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    return 2 ** max(0, round(math.log2(DEFAULT_TOKENS_PER_BATCH / seq_len)))
