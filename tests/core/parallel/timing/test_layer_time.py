"""One layer's time: FlashAttention skips the causal mask's upper tiles, the unfused kernel
computes them all; the spec's shapes (sliding windows, MLA's projections, dense layers before
the MoE ones) and dropout's bytes in the layer's time."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY
from trainbudget.core.parallel.timing.layer_time import attention_projection_seconds, layer_compute
from trainbudget.core.parallel.timing.layer_traffic import (
    HIDDEN_DROPOUTS,
    causal_tile_fraction,
    flash_tile_fraction,
)
from trainbudget.core.single.flops import forward_flops, matmul_flops
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.presets import get_preset

H100 = get_hardware("h100-sxm")
L3_8B = get_preset("llama-3-8b")


def _on(hw=H100) -> dict:
    """The device arguments of layer_compute and micro_batch_compute: bf16 on `hw`."""
    eff = DEFAULT_EFFICIENCY.resolved(hw)
    return dict(e=2, peak=hw.peak_flops_per_second("bf16"), hbm=hw.hbm_bytes_per_second, eff=eff)


def _layer(plan: Plan, seq_len: int, causal: bool = False, spec=L3_8B):
    return layer_compute(spec, PlanNumbers.of(plan), seq_len=seq_len, causal=causal, **_on())


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


# ---- the spec's shapes: windows, MLA, dense-then-MoE stacks -----------------------------

MISTRAL = get_preset("mistral-7b")  # every layer slides over 4096 keys
DEEPSEEK = get_preset("deepseek-v3")  # MLA; 3 dense layers, then 58 MoE ones


def _layer_of(spec, plan: Plan, seq_len: int, causal: bool = False):
    return layer_compute(
        spec,
        PlanNumbers.of(plan),
        seq_len=seq_len,
        e=2,
        peak=H100.peak_flops_per_second("bf16"),
        hbm=H100.hbm_bytes_per_second,
        eff=DEFAULT_EFFICIENCY.resolved(H100),
        causal=causal,
    )


def test_a_sliding_layer_attends_over_its_window():
    global_ = MISTRAL.replace(sliding_window=0)
    for plan in (Plan(), Plan(tp=2, cp=2, micro_batch=2)):
        sliding, full = _layer_of(MISTRAL, plan, 32768), _layer_of(global_, plan, 32768)
        assert sliding.attention_seconds == pytest.approx(
            4096 / 32768 * full.attention_seconds, rel=1e-12
        )
    # causal: the band's tiles (33 of each block row past the first 32) against the triangle's
    sliding, full = _layer_of(MISTRAL, Plan(), 32768, True), _layer_of(global_, Plan(), 32768, True)
    assert flash_tile_fraction(32768, 4096) == (528 + 224 * 33) / (256 * 32)
    ratio = 4096 * flash_tile_fraction(32768, 4096) / (32768 * causal_tile_fraction(32768))
    assert sliding.attention_seconds == pytest.approx(ratio * full.attention_seconds, rel=1e-12)
    # a window at least as long as the sequence changes nothing
    assert _layer_of(MISTRAL, Plan(), 4096) == _layer_of(global_, Plan(), 4096)


def test_gemma_mixes_global_and_sliding_layers_by_the_stage():
    gemma = get_preset("gemma-2-9b")  # 42 layers, every 2nd global
    mixed = _layer_of(gemma, Plan(), 32768).attention_seconds
    glob = _layer_of(gemma.replace(sliding_window=0, global_every=0), Plan(), 32768)
    slide = _layer_of(gemma.replace(global_every=0), Plan(), 32768)
    assert mixed == pytest.approx((glob.attention_seconds + slide.attention_seconds) / 2)


def test_mla_projections_take_their_real_flops():
    def flops(m, n, k):  # a gemm that returns its FLOPs instead of its seconds
        return matmul_flops(m, k, n)

    fwd = forward_flops(DEEPSEEK, 4096)
    per_layer = (fwd.qkv + fwd.attn_proj) / DEEPSEEK.n_layers
    assert attention_projection_seconds(DEEPSEEK, 4096, 1, flops) == pytest.approx(per_layer)
    # under TP the up-projections split, the two down-projections are duplicated
    d, q_lora, kv_down = DEEPSEEK.d_model, DEEPSEEK.q_lora_rank, 512 + 64
    down = matmul_flops(4096, d, q_lora) + matmul_flops(4096, d, kv_down)
    assert attention_projection_seconds(DEEPSEEK, 4096, 8, flops) == pytest.approx(
        down + (per_layer - down) / 8
    )


def test_dense_layers_of_an_moe_stack_run_the_dense_mlp():
    all_moe = DEEPSEEK.replace(n_dense_layers=0)
    mixed, moe = _layer_of(DEEPSEEK, Plan(), 4096), _layer_of(all_moe, Plan(), 4096)
    assert mixed.attention_seconds == moe.attention_seconds
    assert mixed.forward_seconds != moe.forward_seconds


def test_hidden_dropouts_add_their_bytes_to_the_layer():
    """GPT-2 with and without dropout, FlashAttention (no attention-dropout traffic: it runs
    inside the kernel): the two hidden dropouts' 6 bytes an element of the hidden vector, as
    forward-pass bytes (a third: the backward is timed as twice the forward)."""
    gpt = get_preset("gpt2")
    plan, rows = Plan(micro_batch=4), 4 * 1024
    with_dropout = _layer(plan, 1024, spec=gpt.replace(dropout=True))
    without = _layer(plan, 1024, spec=gpt.replace(dropout=False))
    rate = H100.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    added = rows * HIDDEN_DROPOUTS * gpt.d_model * 6 / 3 / rate
    assert with_dropout.memory_bound_seconds - without.memory_bound_seconds == pytest.approx(added)
    assert with_dropout.attention_seconds == without.attention_seconds


def test_unfused_attention_times_its_dropout_on_the_probabilities():
    """Without FlashAttention the attention dropout is its own kernel over the s x s
    probabilities of every head: 10 bytes a score forward and backward, a third as forward."""
    gpt = get_preset("gpt2")
    plan = Plan(micro_batch=4, flash_attention=False)
    with_dropout = _layer(plan, 1024, spec=gpt.replace(dropout=True))
    without = _layer(plan, 1024, spec=gpt.replace(dropout=False))
    rate = H100.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    scores = 4 * gpt.n_heads * 1024 * 1024
    added = scores * 10 / 3 / rate
    assert with_dropout.attention_seconds - without.attention_seconds == pytest.approx(added)
