"""Compute time of a micro-batch: the causal mask's skipped tiles (FlashAttention-2, Dao 2023,
arXiv 2307.08691, Sec. 3.1.1), and nothing skipped by the unfused kernel."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.compute_time import (
    DEFAULT_EFFICIENCY,
    FLASH_BLOCK_TOKENS,
    causal_tile_fraction,
    layer_compute,
)
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.step_time import step_time
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

H100 = get_hardware("h100-sxm")
L3_8B = get_preset("llama-3-8b")
BF16 = get_precision("bf16-mixed")


def test_causal_tile_fraction():
    assert FLASH_BLOCK_TOKENS == 128
    assert causal_tile_fraction(128) == 1.0  # one tile: the diagonal, computed whole
    assert causal_tile_fraction(8192) == pytest.approx(65 / 128)  # 64 tiles a side
    assert causal_tile_fraction(131072) == pytest.approx(1025 / 2048)
    assert causal_tile_fraction(200) == 3 / 4  # 2 tiles a side: 3 of 4


def _layer(plan: Plan, seq_len: int, causal: bool):
    return layer_compute(
        L3_8B,
        PlanNumbers.of(plan),
        seq_len=seq_len,
        e=2,
        peak=H100.peak_flops_per_second("bf16"),
        hbm=H100.hbm_bytes_per_second,
        eff=DEFAULT_EFFICIENCY,
        dropout=False,
        causal=causal,
    )


@pytest.mark.parametrize("seq_len", [4096, 32768])
def test_flash_attention_computes_only_the_causal_tiles(seq_len):
    full, causal = _layer(Plan(), seq_len, False), _layer(Plan(), seq_len, True)
    frac = causal_tile_fraction(seq_len)
    assert causal.attention_seconds == pytest.approx(frac * full.attention_seconds, rel=1e-12)
    saved = full.forward_seconds - causal.forward_seconds
    assert saved == pytest.approx((1 - frac) * full.attention_seconds, rel=1e-12)


def test_the_unfused_kernel_masks_but_computes_every_score():
    plan = Plan(flash_attention=False)
    assert _layer(plan, 4096, True) == _layer(plan, 4096, False)


def test_causal_lowers_the_step_most_at_long_sequences():
    def step(seq_len: int, causal: bool) -> float:
        return step_time(
            L3_8B,
            Plan(dp=8, grad_accum=1),
            Cluster(hardware=H100, n_gpus=8),
            seq_len=seq_len,
            precision=BF16,
            optimizer=get_optimizer("adamw"),
            causal=causal,
        ).step_seconds

    short = step(2048, True) / step(2048, False)
    long = step(32768, True) / step(32768, False)
    assert long < short < 1
    assert long < 0.75  # at 32K attention is most of the step and half of it is skipped
