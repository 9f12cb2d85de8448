"""Compute time of a micro-batch: the causal mask's saving over a whole step, the step times the
model is pinned to, GEMM shapes' tile and wave quantization, the rows' measured fractions, the
head and loss, and what recomputation repeats."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.compute_time import (
    kernel_model_for,
    micro_batch_compute,
    micro_batch_terms,
)
from trainbudget.core.parallel.timing.efficiency import (
    DEFAULT_EFFICIENCY,
    DEFAULT_MATMUL_FRACTION,
    Efficiency,
)
from trainbudget.core.parallel.timing.gemm_time import gemm_shape_efficiency, matmul_seconds
from trainbudget.core.parallel.timing.layer_time import layer_compute
from trainbudget.core.parallel.timing.layer_traffic import LOSS_FP32_TRAFFIC_BYTES
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.flops import matmul_flops
from trainbudget.core.spec.frameworks import GENERIC, get_framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

H100 = get_hardware("h100-sxm")
L3_8B = get_preset("llama-3-8b")
BF16 = get_precision("bf16-mixed")


def _on(hw=H100) -> dict:
    """The device arguments of layer_compute and micro_batch_compute: bf16 on `hw`."""
    eff = DEFAULT_EFFICIENCY.resolved(hw)
    return dict(e=2, peak=hw.peak_flops_per_second("bf16"), hbm=hw.hbm_bytes_per_second, eff=eff)


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
        kernels=kernel_model_for(
            DEFAULT_EFFICIENCY, eff, hw, megatron, get_precision("bf16-mixed")
        ),
    )  # fmt: skip
    added = rerun.backward_seconds - kept.backward_seconds
    assert added == pytest.approx(llama.n_layers * layer.attention_seconds, rel=1e-9)
    assert not GENERIC.selective_reruns_fused_attention
