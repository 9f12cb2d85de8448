"""Compute time of a micro-batch: the causal mask's skipped tiles (FlashAttention-2, Dao 2023,
arXiv 2307.08691, Sec. 3.1.1), and nothing skipped by the unfused kernel; the spec's shapes
(sliding windows, MLA's projections, dense layers before the MoE ones) in the layer's time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.compute_time import (
    FLASH_BLOCK_TOKENS,
    HIDDEN_DROPOUTS,
    LOSS_FP32_TRAFFIC_BYTES,
    attention_projection_seconds,
    causal_tile_fraction,
    dropout_bytes,
    flash_tile_fraction,
    layer_compute,
    micro_batch_compute,
    stage_mix,
)
from trainbudget.core.parallel.timing.efficiency import (
    DEFAULT_EFFICIENCY,
    DEFAULT_MATMUL_FRACTION,
    Efficiency,
)
from trainbudget.core.parallel.timing.gemm_time import gemm_shape_efficiency, matmul_seconds
from trainbudget.core.parallel.timing.step_time import _kernel_model, micro_batch_terms, step_time
from trainbudget.core.single.flops import forward_flops, matmul_flops
from trainbudget.core.spec.frameworks import GENERIC, get_framework
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


# step seconds once GEMMs were timed by shape (tile and wave quantization over the SMs, the
# row's MAMF, in_training 0.85 then) and attention by kernel (FlashAttention-2 on H100 for GENERIC),
# causal, H100, bf16; they pin the model between deliberate changes (the last: the pipeline
# bubble from every stage's work, the loss's traffic counted once, dropout's bytes; then
# FlashAttention timed per pass from the measured kernel tables,
# core.parallel.timing.attention_time;
# then each linear's backward GEMMs at their own shapes, split-K, the output writes after the
# K loop, kernel launch gaps and CPU dispatch; in_training the grid's 0.85 again; then causal
# attention under context parallelism as the ring's causal and unmasked blocks, and each KV hop
# hidden behind one ring step)
DENSE_PINS = [
    ("llama-2-7b", Plan(), 4096, 0.4134523523432991),
    ("llama-2-7b", Plan(dp=2, tp=2, pp=4, grad_accum=8), 4096, 0.5756130701846706),
    ("llama-3-8b", Plan(dp=4, cp=4, zero=2, grad_accum=2), 32768, 3.1182997627557203),
    ("mixtral-8x7b", Plan(dp=8, ep=8, zero=1, grad_accum=2), 4096, 1.3027386239892278),
]


@pytest.mark.parametrize("model, plan, seq_len, seconds", DENSE_PINS)
def test_models_without_the_new_shapes_keep_their_step_time(model, plan, seq_len, seconds):
    t = step_time(
        get_preset(model),
        plan,
        Cluster(hardware=H100, n_gpus=plan.n_gpus),
        seq_len=seq_len,
        precision=BF16,
        optimizer=get_optimizer("adamw"),
        causal=True,
    )
    assert t.step_seconds == pytest.approx(seconds, rel=1e-12)


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
    last = stage_mix(gemma, PlanNumbers.of(Plan(pp=3)))  # layers 28..41: 7 global
    assert (last.layers, last.sliding) == (14, 7)
    last = stage_mix(get_preset("gemma-3-1b"), PlanNumbers.of(Plan(pp=2)))  # 13..25
    assert (last.layers, last.sliding) == (13, 11)  # layers 17 and 23 are global


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
    assert stage_mix(DEEPSEEK, PlanNumbers.of(Plan())).moe == 58
    all_moe = DEEPSEEK.replace(n_dense_layers=0)
    mixed, moe = _layer_of(DEEPSEEK, Plan(), 4096), _layer_of(all_moe, Plan(), 4096)
    assert mixed.attention_seconds == moe.attention_seconds
    assert mixed.forward_seconds != moe.forward_seconds


# ---- GEMM shapes: tile and wave quantization (NVIDIA, "Matrix Multiplication Background") ----


def test_a_gemm_that_fills_whole_waves_loses_nothing():
    # 108 x 10 tiles of 256 x 128 on the A100's 108 SMs: exactly 10 waves
    assert gemm_shape_efficiency(256 * 108, 128 * 10, 108) == 1.0


def test_a_last_wave_with_one_tile_wastes_the_other_sms():
    # 109 tiles on 108 SMs: two waves, 109 of 216 slots used
    assert gemm_shape_efficiency(256 * 109, 128, 108) == pytest.approx(109 / 216)
    # a partial tile costs a whole one: 257 rows take two 256-row tiles
    assert gemm_shape_efficiency(257, 128, 2) == pytest.approx(257 / 512)
    # a batch of small GEMMs fills the SMs together (per-head attention GEMMs)
    assert gemm_shape_efficiency(256, 128, 108, batch=108) == 1.0
    assert gemm_shape_efficiency(256, 128, 0) == 1.0  # no SM count: no wave model


def test_the_row_measured_fractions_are_the_defaults():
    a100 = get_hardware("a100-80gb")
    eff = DEFAULT_EFFICIENCY.resolved(a100)
    assert eff.matmul == pytest.approx(267.9 / 312)  # ml-engineering MAMF table
    assert eff.attention == 0.5
    # H100: FlashAttention-2's 335 TFLOP/s of 989; the Hopper kernels 0.5
    assert DEFAULT_EFFICIENCY.resolved(H100).attention == pytest.approx(335 / 989)
    assert DEFAULT_EFFICIENCY.resolved(H100, "flash3").attention == 0.5
    assert DEFAULT_EFFICIENCY.resolved(a100, "flash3").attention == 0.5  # no FA3 on A100
    # B200: MAMF 1745.0 of 2250 TFLOPS (ml-engineering, torch 2.7.1+cu128)
    assert DEFAULT_EFFICIENCY.resolved(get_hardware("b200")).matmul == pytest.approx(1745 / 2250)
    assert DEFAULT_EFFICIENCY.resolved(get_hardware("tpu-v5e")).matmul == DEFAULT_MATMUL_FRACTION
    assert Efficiency(matmul=0.6).resolved(H100).matmul == 0.6  # a calibration wins


def _micro_batch(spec, plan: Plan, seq_len: int = 2048, hw=H100):
    return micro_batch_compute(
        spec, PlanNumbers.of(plan), seq_len=seq_len, sms=hw.sm_count, **_on(hw)
    )


def test_the_loss_traffic_is_counted_once():
    """The head's GEMMs run forward and twice backward; the loss's bytes per logit
    (LOSS_FP32_TRAFFIC_BYTES and the logits written and read) already cover both passes."""
    gpt = get_preset("gpt2")
    mb = _micro_batch(gpt, Plan(micro_batch=4), seq_len=1024)
    tokens = 4 * 1024
    rate = H100.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    loss = tokens * gpt.vocab_size * (2 * 2 + LOSS_FP32_TRAFFIC_BYTES) / rate
    gemm = matmul_seconds(
        matmul_flops(tokens, gpt.d_model, gpt.vocab_size), tokens, gpt.vocab_size, gpt.d_model,
        2, H100.peak_flops_per_second("bf16"), H100.hbm_bytes_per_second,
        DEFAULT_EFFICIENCY.resolved(H100), sms=H100.sm_count,
    )  # fmt: skip
    assert mb.head_seconds == pytest.approx(3 * gemm + loss)


def test_dropout_bytes():
    # the mask written and read (1 byte each), the gradient read and written (2 x 2 bytes);
    # a dropout that is its own kernel also reads its input and writes its output
    assert dropout_bytes(2, standalone=False) == 6
    assert dropout_bytes(2, standalone=True) == 10


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


def test_the_first_flashattention_runs_at_half_the_second_on_a100():
    """Dao 2023 (arXiv 2307.08691) abstract: FlashAttention reaches 25-40 % of the A100's peak,
    FlashAttention-2 'around 2x' that (50-73 %); the low ends, 0.25 and 0.5. A GPU without a
    'flash1' figure runs it at its 'flash2' one."""
    a100 = get_hardware("a100-80gb")
    assert DEFAULT_EFFICIENCY.resolved(a100, "flash1").attention == 0.25
    assert DEFAULT_EFFICIENCY.resolved(a100, "flash2").attention == 0.5
    h100_flash2 = DEFAULT_EFFICIENCY.resolved(H100, "flash2").attention
    assert DEFAULT_EFFICIENCY.resolved(H100, "flash1").attention == h100_flash2


def test_megatron_selective_recomputation_reruns_the_fused_attention_forward():
    """Megatron-Core wraps the core attention in a checkpoint under --recompute-activations
    (attention.py: checkpoint_core_attention), so with a fused kernel the selective policy
    still costs one attention forward a layer and micro-batch; a framework without that
    checkpoint pays nothing (the kernel keeps no scores)."""

    llama = get_preset("llama-3-8b")
    hw = get_hardware("h100-sxm")
    cluster = Cluster(hardware=hw, n_gpus=2)
    plan = Plan(tp=2, sp=True, recompute="selective", grad_accum=1)
    kw = dict(seq_len=8192, precision=get_precision("bf16-mixed"))
    megatron = get_framework("megatron")
    assert megatron.selective_reruns_fused_attention
    rerun = micro_batch_terms(llama, PlanNumbers.of(plan), cluster, framework=megatron, **kw)
    kept = micro_batch_terms(
        llama, PlanNumbers.of(plan), cluster,
        framework=replace(megatron, selective_reruns_fused_attention=False), **kw,
    )  # fmt: skip
    eff = DEFAULT_EFFICIENCY.resolved(hw, megatron.attention_kernel)
    layer = layer_compute(
        llama, PlanNumbers.of(plan), seq_len=8192, e=2, peak=hw.peak_flops_per_second("bf16"),
        hbm=hw.hbm_bytes_per_second, eff=eff, sms=hw.sm_count,
        kernels=_kernel_model(DEFAULT_EFFICIENCY, eff, hw, megatron, get_precision("bf16-mixed")),
    )  # fmt: skip
    added = rerun.backward_seconds - kept.backward_seconds
    assert added == pytest.approx(llama.n_layers * layer.attention_seconds, rel=1e-9)
    assert not GENERIC.selective_reruns_fused_attention
