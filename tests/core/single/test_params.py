"""Exact parameter counts against published / hand-derived totals, per part."""

from __future__ import annotations

from trainbudget.core.single.params import (
    count_params,
    layer_parameter_tensors,
    matmul_params,
    matrix_shapes,
    parameter_tensors,
)
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.presets import get_preset

# GPT-2 small shape (HF gpt2 config.json), biases off unless asked.
GPT2 = ModelSpec(
    vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024
)
# Llama-2-7b shape (HF meta-llama/Llama-2-7b-hf config.json).
LLAMA2_7B = ModelSpec(
    vocab_size=32000,
    d_model=4096,
    n_layers=32,
    n_heads=32,
    d_ff=11008,
    max_seq_len=4096,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    tied_embeddings=False,
)
# Mixtral-8x7B shape (HF mistralai/Mixtral-8x7B-v0.1 config.json).
MIXTRAL = LLAMA2_7B.replace(
    n_kv_heads=8, d_ff=14336, max_seq_len=32768, n_experts=8, experts_per_token=2
)


def vector_count(spec: ModelSpec) -> int:
    """Everything not in a matrix: norms and biases (derived independently of params.py)."""
    d = spec.d_model
    w = 2 if (spec.norm == "layernorm" and spec.bias) else 1  # weight (+ bias) per feature
    layer_norms = (4 if spec.post_norms else 2) * d * w
    layer_norms += 2 * spec.d_head * w if spec.qk_norm else 0
    layer_norms += (spec.q_lora_rank + spec.kv_lora_rank) * w  # MLA's latent norms
    qkv_out = spec.d_q + spec.d_kv + spec.d_v
    n_in = 2 if spec.mlp == "swiglu" else 1
    n_moe = spec.n_layers - spec.n_dense_layers if spec.is_moe else 0
    n_mlps = spec.n_experts + spec.n_shared_experts
    biases = 0
    if spec.bias:
        biases = spec.n_layers * (qkv_out + d)
        biases += (spec.n_layers - n_moe) * (n_in * spec.d_ff + d)
        biases += n_moe * n_mlps * (n_in * spec.d_ff_expert + d)
    elif spec.qkv_bias:
        biases = spec.n_layers * qkv_out
    router = n_moe * spec.n_experts if spec.router_bias else 0
    return spec.n_layers * layer_norms + d * w + biases + router


def test_gpt2_no_bias_total() -> None:
    """Seed 003 T-params: GPT-2 small without biases has 124,337,664 parameters."""
    assert count_params(GPT2).total == 124_337_664


def test_gpt2_no_bias_parts() -> None:
    """Seed 003 / seed-examples T-params per part."""
    p = count_params(GPT2)
    assert p.embedding_position == 786_432  # 1024 x 768
    assert p.embedding_token == 38_597_376  # 50257 x 768
    # per block: qkv 768*2304 + proj 768*768 + mlp 2*768*3072 + 2 LayerNorm weights of 768
    assert p.per_layer // GPT2.n_layers == 7_079_424
    assert p.per_layer % GPT2.n_layers == 0
    assert p.head == 0  # tied
    assert p.final_norm == 768


def test_rope_and_alibi_have_no_position_parameters() -> None:
    """Only a learned position table has parameters: max_seq_len x d_model (1024 x 768)."""
    learned = count_params(GPT2).total
    for position in ("rope", "alibi"):
        p = count_params(GPT2.replace(position=position))
        assert p.embedding_position == 0
        assert p.total == learned - 1024 * 768
    assert not any(
        name == "embedding/position" for name, *_ in matrix_shapes(GPT2.replace(position="alibi"))
    )


def test_gpt2_with_bias_matches_hf() -> None:
    """HF gpt2 (biases everywhere but the head): 124,439,808 = sum(p.numel())."""
    assert count_params(GPT2.replace(bias=True)).total == 124_439_808


def test_llama2_7b() -> None:
    """HF Llama-2-7b-hf: 6,738,415,616 parameters (sum of numel of the checkpoint)."""
    p = count_params(LLAMA2_7B)
    assert p.total == 6_738_415_616
    assert p.head == p.embedding_token == 131_072_000  # 32000 x 4096, untied
    assert p.embedding_position == 0  # RoPE has no table


def test_mixtral_8x7b() -> None:
    """HF Mixtral-8x7B-v0.1: 46,702,792,704 parameters; Mistral quotes ~12.9B active."""
    p = count_params(MIXTRAL)
    assert p.total == 46_702_792_704
    assert p.mlp == 0  # every MLP is an MoE layer
    assert p.moe_router == 32 * 4096 * 8  # layers x d_model x experts
    assert round(p.active / 1e9, 1) == 12.9


def test_active_equals_total_for_dense() -> None:
    """A dense model uses all its parameters for every token."""
    p = count_params(LLAMA2_7B)
    assert p.active == p.total


def test_qkv_bias_only() -> None:
    """Qwen2-style qkv_bias adds exactly one bias of width d + 2*d_kv per layer."""
    extra = count_params(LLAMA2_7B.replace(qkv_bias=True)).total - count_params(LLAMA2_7B).total
    assert extra == 32 * (4096 + 2 * 4096)


def test_matrix_shapes_plus_vectors_is_total() -> None:
    """Matrices (trainer layout) plus norms/biases account for every parameter."""
    for spec in (
        GPT2,
        GPT2.replace(bias=True),
        LLAMA2_7B,
        MIXTRAL,
        MIXTRAL.replace(n_shared_experts=1, bias=True, norm="layernorm"),
    ):
        elements = sum(r * c * k for _, r, c, k in matrix_shapes(spec))
        assert elements + vector_count(spec) == count_params(spec).total, spec


def test_gpt2_vectors_by_hand() -> None:
    """GPT-2 no bias: 25 LayerNorm weights of 768 = 19,200 vector params (2*12 + 1 norms)."""
    assert vector_count(GPT2) == 19_200
    # with bias: 25 LN biases (19,200) + per layer 2304 + 768 + 3072 + 768 = 6,912, x 12
    assert vector_count(GPT2.replace(bias=True)) == 2 * 19_200 + 12 * 6_912


def test_matmul_params() -> None:
    """PaLM's N: drop lookups (position table; untied input embedding), keep the head."""
    assert matmul_params(GPT2) == 124_337_664 - 786_432  # tied: embedding is the head
    assert matmul_params(LLAMA2_7B) == 6_738_415_616 - 131_072_000  # untied input table


# ---- shapes of current open models (the published counts are in tests/core/spec) ---------

# A small Llama-like base the cases below edit: d 64, 4 heads, 2 kv heads, d_ff 96, 3 layers.
SMALL = ModelSpec(
    vocab_size=100,
    d_model=64,
    n_layers=3,
    n_heads=4,
    n_kv_heads=2,
    d_ff=96,
    max_seq_len=32,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    tied_embeddings=False,
)


def test_explicit_head_dim_widens_q_k_v_and_o() -> None:
    """head_dim 32 on d 64: q 4x32 = 128, k and v 2x32 = 64 each, o 128 -> 64."""
    wide = SMALL.replace(head_dim=32)
    p = count_params(wide)
    assert p.attention_qkv == 3 * 64 * (128 + 64 + 64)
    assert p.attention_proj == 3 * 128 * 64
    narrow = count_params(SMALL)  # head_dim 16
    assert narrow.attention_qkv == 3 * 64 * (64 + 32 + 32)


def test_qk_norm_and_post_norms() -> None:
    """QK-norm: a d_head weight for q and one for k per layer; post-norms: two d_model ones."""
    base = count_params(SMALL).total
    assert count_params(SMALL.replace(qk_norm=True)).total - base == 3 * 2 * 16
    assert count_params(SMALL.replace(post_norms=True)).total - base == 3 * 2 * 64
    # GeGLU costs what SwiGLU does; the window changes no parameter
    assert count_params(SMALL.replace(gate_activation="gelu_tanh")).total == base
    assert count_params(SMALL.replace(sliding_window=8, global_every=2)).total == base


MLA = SMALL.replace(
    n_kv_heads=4, head_dim=24, q_lora_rank=32, kv_lora_rank=16, rope_head_dim=8, v_head_dim=20
)


def test_mla_by_hand() -> None:
    """DeepSeek-V2 eqs. 9-13: q_down 64x32, its norm 32, q_up 32 x 4*24; kv_down 64 x (16+8),
    its norm 16, kv_up 16 x 4*(16+20) (non-rotary k and v per head); o 4*20 x 64."""
    p = count_params(MLA)
    per_layer = 64 * 32 + 32 + 32 * 96 + 64 * 24 + 16 + 16 * 4 * 36
    assert p.attention_qkv == 3 * per_layer
    assert p.attention_proj == 3 * 80 * 64
    no_q_latent = count_params(MLA.replace(q_lora_rank=0))
    assert no_q_latent.attention_qkv == 3 * (64 * 96 + 64 * 24 + 16 + 16 * 4 * 36)


def test_dense_then_moe_stack_and_router_bias() -> None:
    """One dense layer (d_ff 96), then two MoE layers of 4 experts (width 32) + 1 shared."""
    moe = SMALL.replace(
        n_experts=4, experts_per_token=2, n_shared_experts=1, d_ff_expert=32, n_dense_layers=1
    )
    p = count_params(moe)
    assert p.mlp == 1 * 3 * 64 * 96
    assert p.moe_experts == 2 * 4 * 3 * 64 * 32
    assert p.moe_shared_experts == 2 * 1 * 3 * 64 * 32
    assert p.moe_router == 2 * 64 * 4
    assert p.active_routed_experts == 2 * 2 * 3 * 64 * 32
    biased = count_params(moe.replace(router_bias=True))
    assert biased.moe_router - p.moe_router == 2 * 4


def test_matrix_shapes_cover_the_new_shapes() -> None:
    for spec in (
        SMALL.replace(head_dim=32, qk_norm=True, post_norms=True),
        MLA,
        MLA.replace(q_lora_rank=0),
        MLA.replace(n_experts=4, experts_per_token=2, d_ff_expert=96, n_dense_layers=1),
        MLA.replace(n_experts=4, experts_per_token=1, n_dense_layers=2, router_bias=True),
    ):
        elements = sum(r * c * k for _, r, c, k in matrix_shapes(spec))
        assert elements + vector_count(spec) == count_params(spec).total, spec
    # d_ff_expert == d_ff: the dense and expert matrices merge into one row each
    merged = MLA.replace(n_experts=4, experts_per_token=2, d_ff_expert=96, n_dense_layers=1)
    names = [(n, r, c) for n, r, c, _ in matrix_shapes(merged)]
    assert len(names) == len(set(names))


def test_parameter_tensors_of_a_layer():
    """Tensors a tensor-by-tensor gather issues a collective for, in the trainer's layout.
    GPT (Megatron's layer: LayerNorm weight and bias twice, qkv, proj, fc1, fc2 with biases)
    12; Llama (RMSNorm twice, qkv, proj, gate, up, down) 7; Qwen3 adds the q and k norms (9);
    Mixtral 8 experts x 3 matrices + router instead of the MLP's 3 (29)."""
    assert layer_parameter_tensors(get_preset("gpt3-175b")) == 12
    assert layer_parameter_tensors(get_preset("llama-2-7b")) == 7
    assert layer_parameter_tensors(get_preset("qwen3-8b")) == 9
    assert layer_parameter_tensors(get_preset("mixtral-8x7b")) == 29
    # GPT-3: learned positions, the token embedding (tied head), the final LayerNorm's 2
    assert parameter_tensors(get_preset("gpt3-175b")) == 96 * 12 + 4
