"""Matmul FLOPs: seed 003 T-fwd-flops for GPT-2 small, PaLM's formula, recompute, inference."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.flops import (
    forward_flops,
    inference_flops_per_token,
    kv_cache_bytes,
    matmul_flops,
    palm_flops_per_token,
    recompute_flops,
    training_flops,
)
from trainbudget.core.spec.model_spec import BareModel, ModelSpec

GPT2 = ModelSpec(
    vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024
)
T = 1024


def test_matmul_flops() -> None:
    """(b, d) @ (d, k) is 2*b*d*k FLOPs (a multiply-add is 2 FLOPs)."""
    assert matmul_flops(2, 3, 4) == 48  # 2 * 2 * 3 * 4


def test_gpt2_forward_per_part() -> None:
    """Seed 003 T-fwd-flops, GPT-2 small no bias, T=1024, 12 layers."""
    f = forward_flops(GPT2, T)
    assert f.qkv == 12 * 3_623_878_656  # 2 * 1024 * 768 * 2304
    assert f.scores == 12 * 1_610_612_736  # 2 * 1024 * 1024 * 768
    assert f.attn_values == 12 * 1_610_612_736  # same shape product
    assert f.attn_proj == 12 * 1_207_959_552  # 2 * 1024 * 768 * 768
    assert f.mlp_up == 12 * 4_831_838_208  # 2 * 1024 * 768 * 3072
    assert f.mlp_down == 12 * 4_831_838_208
    assert f.mlp_gate == f.router == 0  # GELU, dense
    assert f.logits == 79_047_426_048  # 2 * 1024 * 768 * 50257
    assert f.total == 291_648_307_200
    assert sum(f.as_dict().values()) == f.total


def test_gpt2_training_and_palm() -> None:
    """Seed 003: training = 3 x forward = 874,944,921,600 per sequence; PaLM's 6N + 12LHQT gives
    875,062,886,400, a ratio of 1.000135 (the difference is 6 x the 19,200 norm weights x T)."""
    tf = training_flops(GPT2, T)
    assert tf.model_flops_per_token * T == 874_944_921_600
    assert palm_flops_per_token(GPT2, T) * T == 875_062_886_400
    assert tf.palm_per_token * T == 875_062_886_400
    assert tf.palm_per_token / tf.model_flops_per_token == pytest.approx(1.000135, abs=1e-6)
    assert tf.palm_per_token - tf.model_flops_per_token == 6 * 19_200  # per token
    assert tf.approx_6n_per_token == 6 * 124_337_664  # 6N with N all parameters


@pytest.mark.parametrize("t", [1, 7, 1024])
def test_causal_scores(t: int) -> None:
    """Causal: T*(T+1)/2 query-key pairs per head, so scores = d_q * T * (T+1) per layer."""
    causal = forward_flops(GPT2, t, causal=True)
    assert causal.scores == 12 * 768 * t * (t + 1)
    assert causal.attn_values == causal.scores
    assert causal.qkv == forward_flops(GPT2, t).qkv  # only the attention core changes


def test_recompute_full_is_one_more_forward_of_layers() -> None:
    """Full recomputation reruns every layer's forward, but not the head."""
    f = forward_flops(GPT2, T)
    assert recompute_flops(f, "full", False) == f.layers == f.total - f.logits
    tf = training_flops(GPT2, T, recompute="full")
    assert tf.recompute_flops_per_token == f.layers / T
    assert tf.hardware_flops_per_token == tf.model_flops_per_token + f.layers / T


def test_recompute_selective_and_flash() -> None:
    """Selective redoes QK^T and softmax@V; FlashAttention redoes QK^T in any policy."""
    f = forward_flops(GPT2, T)
    assert recompute_flops(f, "none", False) == 0
    assert recompute_flops(f, "selective", False) == f.scores + f.attn_values
    assert recompute_flops(f, "none", True) == f.scores
    assert recompute_flops(f, "selective", True) == f.scores  # no T x T matrix to redo
    assert recompute_flops(f, "full", True) == f.layers + f.scores


def test_bare_model_training() -> None:
    """A bare count gets 6N, and full recompute adds one 2N forward."""
    tf = training_flops(BareModel(n_params=70_000_000_000), 4096, recompute="full")
    assert tf.model_flops_per_token == 6 * 70e9
    assert tf.recompute_flops_per_token == 2 * 70e9
    assert tf.forward_per_sequence is None and tf.palm_per_token is None


def test_inference_flops() -> None:
    """2 x matmul params + 4 * L * d_q * (context + 1) for the new token's attention."""
    n = 124_337_664 - 786_432  # matmul params of GPT-2 (no position table)
    assert inference_flops_per_token(GPT2) == 2 * n + 4 * 12 * 768 * 1
    assert inference_flops_per_token(GPT2, 1023) == 2 * n + 4 * 12 * 768 * 1024
    assert inference_flops_per_token(BareModel(n_params=7_000_000_000), 500) == 14e9


def test_kv_cache_gqa_by_hand() -> None:
    """Mistral-7B shape (32 layers, 8 kv heads of 128): 2 (K,V) * 32 * 8 * 128 * 2 bytes =
    131,072 bytes = 128 KiB per token in bf16, so 4096 tokens take 512 MiB."""
    mistral = ModelSpec(
        vocab_size=32000,
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        d_ff=14336,
        max_seq_len=32768,
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=False,
    )
    assert kv_cache_bytes(mistral, 1, 2) == 131_072
    assert kv_cache_bytes(mistral, 4096, 2) == 512 * 2**20


def test_gqa_and_swiglu_forward() -> None:
    """GQA shrinks qkv to d + 2*d_kv outputs; SwiGLU adds a gate the size of up."""
    s = GPT2.replace(n_kv_heads=4, mlp="swiglu")
    f = forward_flops(s, 8)
    assert f.qkv == 12 * 2 * 8 * 768 * (768 + 2 * 256)  # d_kv = 4 heads x 64
    assert f.mlp_gate == f.mlp_up


def test_moe_forward_counts_visited_experts() -> None:
    """Each token runs top-k plus shared experts, and a router of d x n_experts."""
    s = GPT2.replace(n_experts=8, experts_per_token=2, n_shared_experts=1, d_ff_expert=512)
    f = forward_flops(s, 4)
    assert f.mlp_up == 12 * 3 * 2 * 4 * 768 * 512  # 3 experts visited
    assert f.router == 12 * 2 * 4 * 768 * 8


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: forward_flops(GPT2, 0), "seq_len"),
        (lambda: training_flops(GPT2, -1), "seq_len"),
        (lambda: training_flops(GPT2, 8, recompute="some"), "recompute"),
        (lambda: recompute_flops(forward_flops(GPT2, 8), "partial", False), "recompute"),
        (lambda: inference_flops_per_token(GPT2, -1), "context_len"),
        (lambda: kv_cache_bytes(GPT2, -1, 2), "n_tokens"),
    ],
)
def test_errors_name_field(call, field: str) -> None:
    """Bad arguments raise SpecError naming the argument."""
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field


# ---- sliding windows, MLA, dense-then-MoE, and the presets of current open models ----------

from trainbudget.core.single.flops import attended_pairs  # noqa: E402
from trainbudget.core.single.params import count_params, matmul_params  # noqa: E402
from trainbudget.core.spec.presets import PRESETS  # noqa: E402


@pytest.mark.parametrize("t", [1, 5, 8, 9, 33])
@pytest.mark.parametrize("w", [1, 4, 8, 100])
def test_window_pairs_by_enumeration(t: int, w: int) -> None:
    """Query i sees key j when j <= i and i - j < w (itself and w - 1 before it); the
    non-causal convention charges every query min(T, w) keys."""
    causal = sum(1 for i in range(t) for j in range(t) if 0 <= i - j < w)
    assert attended_pairs(t, causal=True, window=w) == causal
    assert attended_pairs(t, causal=False, window=w) == t * min(t, w)
    if w >= t:  # a window as long as the sequence is global attention
        assert attended_pairs(t, True, w) == attended_pairs(t, True)
        assert attended_pairs(t, False, w) == attended_pairs(t, False)


def test_sliding_layers_in_the_scores() -> None:
    """Gemma 2 9B at 8192 tokens: 21 global layers score T^2 pairs per head, 21 sliding ones
    T x 4096; 16 heads of 256 (d_q 4096) for Q K^T and for softmax V."""
    spec, t = PRESETS["gemma-2-9b"], 8192
    f = forward_flops(spec, t)
    pairs = 21 * t * t + 21 * t * 4096
    assert f.scores == f.attn_values == 2 * pairs * 4096
    assert forward_flops(spec, 4096).scores == 2 * 42 * 4096 * 4096 * 4096  # window >= T
    mistral = PRESETS["mistral-7b"]  # every layer slides over 4096
    assert (
        forward_flops(mistral, 4096).scores
        == forward_flops(mistral.replace(sliding_window=0), 4096).scores
    )
    assert (
        forward_flops(mistral, 8192, causal=True).scores
        < forward_flops(mistral.replace(sliding_window=0), 8192, causal=True).scores
    )


def test_mla_forward_by_hand() -> None:
    """DeepSeek-V3 at T tokens: the q/kv down- and up-projections, scores over d_head 192 and
    values over d_v_head 128 per head, o from 128 x 128 to 7168."""
    spec, t = PRESETS["deepseek-v3"], 16
    f = forward_flops(spec, t)
    weights = 7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * (128 + 128)
    assert f.qkv == 61 * 2 * t * weights
    assert f.scores == 61 * 2 * t * t * 128 * 192
    assert f.attn_values == 61 * 2 * t * t * 128 * 128
    assert f.attn_proj == 61 * 2 * t * 128 * 128 * 7168
    # 3 dense layers (18432 wide), 58 MoE layers of 8 routed + 1 shared experts (2048 wide)
    assert f.mlp_up == f.mlp_gate == 2 * t * 7168 * (3 * 18432 + 58 * 9 * 2048)
    assert f.router == 58 * 2 * t * 7168 * 256


STATED_PRESETS = ["qwen3-8b", "gemma-2-9b", "gemma-3-1b", "mistral-nemo", "mistral-7b"]


@pytest.mark.parametrize("name", [*STATED_PRESETS, "deepseek-v3"])
def test_flops_agree_with_the_parameters(name: str) -> None:
    """Every matmul but the attention core multiplies each active weight once per token:
    exact model FLOPs = 6 x (active matmul parameters) + 3 x the attention core, to the
    norm weights and router biases that are parameters but no matmul (< 0.02 %: Gemma 3
    1B's five norms per layer are 134,272 of its 1.0B)."""
    spec, t = PRESETS[name], 4096
    tf = training_flops(spec, t)
    fwd = tf.forward_per_sequence
    weights_only = tf.model_flops_per_token - 3 * (fwd.scores + fwd.attn_values) / t
    assert weights_only / (6 * matmul_params(spec, active=True)) == pytest.approx(1, abs=2e-4)


# exact / 6N at 4096 tokens, non-causal: above 1 by the attention core (large for
# DeepSeek-V3's 128 heads of 192 against 37B active parameters), below 1 when the untied
# input embedding (in 6N, in no matmul) outweighs it.
SIX_N_RATIO = {
    "qwen3-8b": 1.071,
    "gemma-2-9b": 1.152,
    "gemma-3-1b": 1.056,
    "mistral-nemo": 1.055,
    "mistral-7b": 1.130,
    "deepseek-v3": 1.248,
}


@pytest.mark.parametrize("name", sorted(SIX_N_RATIO))
def test_six_n_rule_within_a_stated_margin(name: str) -> None:
    tf = training_flops(PRESETS[name], 4096)
    assert tf.approx_6n_per_token == 6 * count_params(PRESETS[name]).active
    assert tf.model_flops_per_token / tf.approx_6n_per_token == pytest.approx(
        SIX_N_RATIO[name], abs=0.001
    )
    # causal attention halves the core: Qwen3 then falls just under 6N (0.998), NeMo to 1.000
    causal = training_flops(PRESETS[name], 4096, causal=True)
    assert 0.99 < causal.model_flops_per_token / causal.approx_6n_per_token < SIX_N_RATIO[name]


def test_kv_cache_of_sliding_layers_and_mla() -> None:
    """Gemma 3 1B: 4 global layers keep every token, 22 sliding ones their last 512 (one kv
    head of 256, K and V). DeepSeek-V3 caches the 512-wide latent and the 64-wide rotary key
    per layer (DeepSeek-V2, Sec. 2.1.2), not 128 heads of K and V."""
    gemma = PRESETS["gemma-3-1b"]
    assert kv_cache_bytes(gemma, 32768, 2) == (4 * 32768 + 22 * 512) * 2 * 256 * 2
    assert kv_cache_bytes(gemma, 100, 2) == 26 * 100 * 2 * 256 * 2
    assert kv_cache_bytes(PRESETS["deepseek-v3"], 1, 2) == 61 * (512 + 64) * 2


def test_inference_attention_sees_the_window() -> None:
    """A new token's attention: 2 * (d_q + d_attn_out) per key, at most 512 keys in Gemma 3's
    sliding layers; MLA's values are 128 wide, its queries and keys 192."""
    gemma, n = PRESETS["gemma-3-1b"], matmul_params(PRESETS["gemma-3-1b"])
    keys = 4 * 10_000 + 22 * 512
    assert inference_flops_per_token(gemma, 9_999) == 2 * n + 2 * (1024 + 1024) * keys
    ds = PRESETS["deepseek-v3"]
    assert (
        inference_flops_per_token(ds, 9) == 2 * matmul_params(ds) + 2 * 128 * (192 + 128) * 61 * 10
    )
    assert (
        palm_flops_per_token(ds, 4096) == 6 * matmul_params(ds) + 6 * 61 * 128 * (192 + 128) * 4096
    )
