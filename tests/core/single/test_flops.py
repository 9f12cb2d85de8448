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
