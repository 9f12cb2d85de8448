"""Training time and cost: FLOPs / (GPUs x peak x MFU)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.training_time import (
    DEFAULT_TOKENS_PER_BATCH,
    default_global_batch,
    mfu_from_measurement,
    tokens_from_epochs,
    training_time,
)

# 6 * 70e9 params * 15e12 tokens = 6.3e24 FLOPs (6ND for a 70B model on 15T tokens)
FLOPS_70B_15T = 6 * 70e9 * 15e12
H100_BF16 = 989.5e12  # H100 SXM dense bf16 peak FLOP/s (NVIDIA datasheet)


def test_time_70b_on_1024_h100() -> None:
    """6.3e24 / (1024 x 989.5e12 x 0.5) = 1.2435e7 s = 143.9 days."""
    t = training_time(
        train_flops=FLOPS_70B_15T, n_gpus=1024, peak_flops_per_second=H100_BF16, mfu=0.5
    )
    assert t.achieved_flops_per_second == 1024 * H100_BF16 * 0.5
    assert t.seconds == pytest.approx(1.2435e7, rel=1e-4)
    assert t.days == pytest.approx(143.92, rel=1e-4)
    assert t.gpu_hours == pytest.approx(t.seconds * 1024 / 3600)
    assert t.cost is None


def test_cost() -> None:
    """Cost = GPU-hours x price: 10 GPUs for 1 hour at $2 = $20."""
    # 10 GPUs x 1e12 FLOP/s x 1.0 MFU x 3600 s = 3.6e16 FLOPs
    t = training_time(
        train_flops=3.6e16, n_gpus=10, peak_flops_per_second=1e12, mfu=1.0, price_per_gpu_hour=2.0
    )
    assert t.gpu_hours == pytest.approx(10.0)
    assert t.cost == pytest.approx(20.0)


def test_mfu_from_measurement() -> None:
    """MFU = achieved / promised: 4e15 FLOPs in 1 s on 8 GPUs of 1e15 peak = 0.5."""
    assert (
        mfu_from_measurement(
            flops_per_step=4e15, step_seconds=1.0, n_gpus=8, peak_flops_per_second=1e15
        )
        == 0.5
    )


def test_tokens_from_epochs() -> None:
    """Seed 004: tokens = epochs x samples x mean length: 3 x 1e6 x 512 = 1.536e9."""
    assert tokens_from_epochs(epochs=3, n_samples=1e6, mean_tokens_per_sample=512) == 1.536e9


BASE = dict(train_flops=1e20, n_gpus=8, peak_flops_per_second=1e15, mfu=0.4)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mfu": 0}, "mfu"),
        ({"mfu": 1.5}, "mfu"),
        ({"n_gpus": 0}, "gpus"),
        ({"train_flops": -1.0}, "train_flops"),
        ({"price_per_gpu_hour": -2.0}, "price_per_gpu_hour"),
    ],
)
def test_training_time_errors(changes: dict, field: str) -> None:
    """MFU outside (0, 1], no GPUs, negative FLOPs or price are refused by name."""
    with pytest.raises(SpecError) as err:
        training_time(**{**BASE, **changes})
    assert err.value.field == field


def test_mfu_one_allowed() -> None:
    """MFU = 1 is the closed end of (0, 1]."""
    assert training_time(**{**BASE, "mfu": 1.0}).mfu == 1.0


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(epochs=-1, n_samples=10, mean_tokens_per_sample=5), "epochs"),
        (dict(epochs=1, n_samples=0, mean_tokens_per_sample=5), "samples"),
        (dict(epochs=1, n_samples=10, mean_tokens_per_sample=-5), "mean_length"),
    ],
)
def test_negative_tokens_refused(kw: dict, field: str) -> None:
    """Epochs, sample counts and lengths must be positive."""
    with pytest.raises(SpecError) as err:
        tokens_from_epochs(**kw)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("kw", "field"), [({"step_seconds": 0}, "step_seconds"), ({"n_gpus": 0}, "gpus")]
)
def test_mfu_measurement_errors(kw: dict, field: str) -> None:
    """A measurement needs a positive step time and GPU count."""
    args = dict(flops_per_step=1e15, step_seconds=1.0, n_gpus=1, peak_flops_per_second=1e15)
    with pytest.raises(SpecError) as err:
        mfu_from_measurement(**{**args, **kw})
    assert err.value.field == field


@pytest.mark.parametrize(
    ("seq_len", "sequences"),
    [
        (2048, 2048),  # Llama 1: 4M tokens = 2,048 x 2,048 (arXiv:2302.13971, Table 2)
        (4096, 1024),  # Llama 2: 4M tokens = 1,024 x 4,096 (arXiv:2307.09288, Table 1)
        (8192, 512),  # the README's 70B report: --global-batch 512 at 8,192
        (3000, 1024),  # 1,398 sequences would be 4M; the nearest power of two is 1,024
        (2**23, 1),  # a sequence longer than the batch: still one sequence
    ],
)
def test_default_global_batch_is_about_4m_tokens(seq_len: int, sequences: int) -> None:
    assert DEFAULT_TOKENS_PER_BATCH == 4 * 2**20
    assert default_global_batch(seq_len) == sequences


def test_default_global_batch_needs_a_sequence_length() -> None:
    with pytest.raises(SpecError):
        default_global_batch(0)
