"""Exact parameter counts against published / hand-derived totals, per part."""

from __future__ import annotations

from trainbudget.core.single.params import count_params, matmul_params, matrix_shapes
from trainbudget.core.spec.model_spec import ModelSpec

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
    norm = 2 * d if (spec.norm == "layernorm" and spec.bias) else d
    qkv_out = d + 2 * spec.d_kv
    n_in = 2 if spec.mlp == "swiglu" else 1
    d_h = spec.d_ff_expert if spec.is_moe else spec.d_ff
    n_mlps = spec.n_experts + spec.n_shared_experts if spec.is_moe else 1
    biases = 0
    if spec.bias:
        biases = qkv_out + d + n_mlps * (n_in * d_h + d)
    elif spec.qkv_bias:
        biases = qkv_out
    return (2 * spec.n_layers + 1) * norm + spec.n_layers * biases


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
