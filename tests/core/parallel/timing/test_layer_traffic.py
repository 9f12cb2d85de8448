"""What a layer moves beyond its FLOPs: the causal mask's computed tiles (FlashAttention-2, Dao
2023, arXiv 2307.08691, Sec. 3.1.1), dropout's bytes, and the layers of the timed stage."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.layer_traffic import (
    FLASH_BLOCK_TOKENS,
    causal_tile_fraction,
    dropout_bytes,
    stage_mix,
)
from trainbudget.core.spec.presets import get_preset


def test_causal_tile_fraction():
    assert FLASH_BLOCK_TOKENS == 128
    assert causal_tile_fraction(128) == 1.0  # one tile: the diagonal, computed whole
    assert causal_tile_fraction(8192) == pytest.approx(65 / 128)  # 64 tiles a side
    assert causal_tile_fraction(131072) == pytest.approx(1025 / 2048)
    assert causal_tile_fraction(200) == 3 / 4  # 2 tiles a side: 3 of 4


def test_stage_mix_counts_the_last_stages_layers():
    gemma = get_preset("gemma-2-9b")  # 42 layers, every 2nd global
    last = stage_mix(gemma, PlanNumbers.of(Plan(pp=3)))  # layers 28..41: 7 global
    assert (last.layers, last.sliding) == (14, 7)
    last = stage_mix(get_preset("gemma-3-1b"), PlanNumbers.of(Plan(pp=2)))  # 13..25
    assert (last.layers, last.sliding) == (13, 11)  # layers 17 and 23 are global
    deepseek = get_preset("deepseek-v3")  # 3 dense layers, then 58 MoE ones
    assert stage_mix(deepseek, PlanNumbers.of(Plan())).moe == 58


def test_dropout_bytes():
    # the mask written and read (1 byte each), the gradient read and written (2 x 2 bytes);
    # a dropout that is its own kernel also reads its input and writes its output
    assert dropout_bytes(2, standalone=False) == 6
    assert dropout_bytes(2, standalone=True) == 10
