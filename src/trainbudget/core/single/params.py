"""Exact parameter counts with a named per-part breakdown.

Conventions (matching PyTorch's `sum(p.numel() for p in model.parameters())`):
- a tied head shares the token embedding and adds no parameters;
- `bias=True` puts a bias on every linear layer and every LayerNorm (GPT-2); the head has none;
- RMSNorm has a weight and never a bias; RoPE has no parameters;
- an MoE layer has a router (d_model x n_experts, no bias) and n_experts SwiGLU/GELU experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.spec.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class ParamBreakdown:
    """Parameters by part. Per-layer parts are already multiplied by n_layers."""

    embedding_token: int
    embedding_position: int
    attention_norm: int
    attention_qkv: int
    attention_proj: int
    mlp_norm: int
    mlp: int
    """Dense MLP matrices (and biases); 0 for MoE models."""
    moe_router: int
    moe_experts: int
    """All routed experts of all layers."""
    moe_shared_experts: int
    final_norm: int
    head: int
    """0 when tied to the token embedding."""
    active_routed_experts: int
    """The routed experts one token visits (experts_per_token of n_experts), all layers."""

    @property
    def total(self) -> int:
        return sum(self.as_dict().values())

    @property
    def active(self) -> int:
        """Parameters one token uses: total minus the routed experts it does not visit."""
        return self.total - self.moe_experts + self.active_routed_experts

    @property
    def embedding(self) -> int:
        return self.embedding_token + self.embedding_position

    @property
    def per_layer(self) -> int:
        layered = (
            self.attention_norm
            + self.attention_qkv
            + self.attention_proj
            + self.mlp_norm
            + self.mlp
            + self.moe_router
            + self.moe_experts
            + self.moe_shared_experts
        )
        return layered

    def as_dict(self) -> dict[str, int]:
        """Named parts that sum to `total` (the summary properties are not repeated here)."""
        return {
            "embedding/token": self.embedding_token,
            "embedding/position": self.embedding_position,
            "attention/norm": self.attention_norm,
            "attention/qkv": self.attention_qkv,
            "attention/proj": self.attention_proj,
            "mlp/norm": self.mlp_norm,
            "mlp": self.mlp,
            "moe/router": self.moe_router,
            "moe/experts": self.moe_experts,
            "moe/shared_experts": self.moe_shared_experts,
            "final_norm": self.final_norm,
            "head": self.head,
        }


def norm_params(spec: ModelSpec) -> int:
    """One normalisation layer: weight (d_model), plus a bias for LayerNorm when bias=True."""
    if spec.norm == "layernorm" and spec.bias:
        return 2 * spec.d_model
    return spec.d_model


def mlp_params(spec: ModelSpec, d_hidden: int) -> int:
    """One MLP of hidden width d_hidden: GELU has up and down, SwiGLU adds a gate."""
    n_in_matrices = 2 if spec.mlp == "swiglu" else 1
    weights = (n_in_matrices + 1) * spec.d_model * d_hidden
    biases = (n_in_matrices * d_hidden + spec.d_model) if spec.bias else 0
    return weights + biases


def count_params(spec: ModelSpec) -> ParamBreakdown:
    """Exact parameter count of `spec`, per part."""
    d, n_layers = spec.d_model, spec.n_layers
    d_q = spec.n_heads * spec.d_head  # == d_model
    qkv_out = d_q + 2 * spec.d_kv
    qkv = d * qkv_out + (qkv_out if (spec.bias or spec.qkv_bias) else 0)
    proj = d_q * d + (d if spec.bias else 0)
    if spec.is_moe:
        dense_mlp = 0
        router = d * spec.n_experts
        one_expert = mlp_params(spec, spec.d_ff_expert)
        experts = spec.n_experts * one_expert
        shared = spec.n_shared_experts * one_expert
        active_routed = spec.experts_per_token * one_expert
    else:
        dense_mlp = mlp_params(spec, spec.d_ff)
        router = experts = shared = active_routed = 0
    return ParamBreakdown(
        embedding_token=spec.vocab_size * d,
        embedding_position=spec.max_seq_len * d if spec.position == "learned" else 0,
        attention_norm=n_layers * norm_params(spec),
        attention_qkv=n_layers * qkv,
        attention_proj=n_layers * proj,
        mlp_norm=n_layers * norm_params(spec),
        mlp=n_layers * dense_mlp,
        moe_router=n_layers * router,
        moe_experts=n_layers * experts,
        moe_shared_experts=n_layers * shared,
        final_norm=norm_params(spec),
        head=0 if spec.tied_embeddings else spec.vocab_size * d,
        active_routed_experts=n_layers * active_routed,
    )


def matmul_params(spec: ModelSpec, active: bool = True) -> int:
    """Parameters that take part in a matmul for each token: the "N" of 6N and of PaLM's formula.

    Excludes the position table (a lookup) and, when untied, the input token embedding (a
    lookup); a tied embedding is kept because the head multiplies by it (seed 003, palm_flops).
    Norm weights and biases are kept too, as PaLM and the seed do (they are a rounding error).
    """
    p = count_params(spec)
    n = (p.active if active else p.total) - p.embedding_position
    if not spec.tied_embeddings:
        n -= p.embedding_token
    return n


def matrix_shapes(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The weight matrices of `spec` as (name, rows, cols, how many), in the trainer's layout
    (fused qkv; one tensor per expert matrix). Everything else (norms, biases) is a vector."""
    d, n = spec.d_model, spec.n_layers
    d_q = spec.n_heads * spec.d_head
    n_in = 2 if spec.mlp == "swiglu" else 1
    d_hidden = spec.d_ff_expert if spec.is_moe else spec.d_ff
    n_mlps = (spec.n_experts + spec.n_shared_experts) if spec.is_moe else 1
    shapes = [
        ("embedding/token", spec.vocab_size, d, 1),
        ("attention/qkv", d, d_q + 2 * spec.d_kv, n),
        ("attention/proj", d_q, d, n),
        ("mlp/in", d, d_hidden, n * n_mlps * n_in),
        ("mlp/down", d_hidden, d, n * n_mlps),
    ]
    if spec.position == "learned":
        shapes.append(("embedding/position", spec.max_seq_len, d, 1))
    if spec.is_moe:
        shapes.append(("moe/router", d, spec.n_experts, n))
    if not spec.tied_embeddings:
        shapes.append(("head", spec.vocab_size, d, 1))
    return shapes
