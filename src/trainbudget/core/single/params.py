"""Exact parameter counts with a named per-part breakdown.

Conventions (matching PyTorch's `sum(p.numel() for p in model.parameters())`):
- a tied head shares the token embedding and adds no parameters;
- `bias=True` puts a bias on every linear layer and every LayerNorm (GPT-2); the head has none;
- RMSNorm has a weight and never a bias; RoPE has no parameters;
- QK-norm has one d_head weight for q and one for k (shared by the heads, as in Qwen3 and
  Gemma 3); MLA normalises its two latents (q_lora_rank + kv_lora_rank weights);
- an MoE layer has a router (d_model x n_experts, plus n_experts when router_bias) and
  n_experts SwiGLU/GELU experts; the first n_dense_layers layers of an MoE model have a dense
  MLP of width d_ff instead.
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
    """Norms around attention: the pre-norm, and the post-norm with post_norms."""
    attention_qkv: int
    """Q, K, V projections (MLA: the down- and up-projections) with their biases, and the norms
    inside attention (QK-norm; MLA's latent norms)."""
    attention_proj: int
    mlp_norm: int
    """Norms around the MLP: the pre-norm, and the post-norm with post_norms."""
    mlp: int
    """Dense MLP matrices (and biases) of the dense layers: all layers of a dense model, the
    first n_dense_layers of an MoE one."""
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


def norm_params(spec: ModelSpec, width: int | None = None) -> int:
    """One normalisation layer over `width` (default d_model): a weight, plus a bias for
    LayerNorm when bias=True."""
    width = spec.d_model if width is None else width
    return 2 * width if spec.norm == "layernorm" and spec.bias else width


def attention_in_params(spec: ModelSpec) -> int:
    """One layer's Q, K, V projections with their biases and inner norms.

    MLA (DeepSeek-V2, arXiv:2405.04434, eqs. 9-10, 12-13): q = W_uq norm(W_dq x) (or W_q x
    without q_lora_rank); [c_kv, k_rope] = W_dkv x, the rotary key k_rope shared by all
    heads; [k_nope, v] = W_ukv norm(c_kv) per head.
    """
    d = spec.d_model
    if spec.is_mla:
        q = spec.q_lora_rank * (d + spec.d_q) if spec.q_lora_rank else d * spec.d_q
        kv_down = d * (spec.kv_lora_rank + spec.rope_head_dim)
        d_nope = spec.d_head - spec.rope_head_dim
        kv_up = spec.kv_lora_rank * spec.n_heads * (d_nope + spec.d_v_head)
        latent_norms = norm_params(spec, spec.q_lora_rank) if spec.q_lora_rank else 0
        return q + kv_down + kv_up + latent_norms + norm_params(spec, spec.kv_lora_rank)
    out = spec.d_q + spec.d_kv + spec.d_v
    biases = out if (spec.bias or spec.qkv_bias) else 0
    qk_norm = 2 * norm_params(spec, spec.d_head) if spec.qk_norm else 0
    return d * out + biases + qk_norm


def mlp_params(spec: ModelSpec, d_hidden: int) -> int:
    """One MLP of hidden width d_hidden: GELU has up and down, SwiGLU adds a gate."""
    n_in_matrices = 2 if spec.mlp == "swiglu" else 1
    weights = (n_in_matrices + 1) * spec.d_model * d_hidden
    biases = (n_in_matrices * d_hidden + spec.d_model) if spec.bias else 0
    return weights + biases


def count_params(spec: ModelSpec) -> ParamBreakdown:
    """Exact parameter count of `spec`, per part."""
    d, n_layers, n_moe = spec.d_model, spec.n_layers, spec.n_moe_layers
    proj = spec.d_attn_out * d + (d if spec.bias else 0)
    block_norms = (2 if spec.post_norms else 1) * norm_params(spec)  # per block, per layer
    router = experts = shared = active_routed = 0
    if spec.is_moe:
        router = d * spec.n_experts + (spec.n_experts if spec.router_bias else 0)
        one_expert = mlp_params(spec, spec.d_ff_expert)
        experts = spec.n_experts * one_expert
        shared = spec.n_shared_experts * one_expert
        active_routed = spec.experts_per_token * one_expert
    return ParamBreakdown(
        embedding_token=spec.vocab_size * d,
        embedding_position=spec.max_seq_len * d if spec.position == "learned" else 0,
        attention_norm=n_layers * block_norms,
        attention_qkv=n_layers * attention_in_params(spec),
        attention_proj=n_layers * proj,
        mlp_norm=n_layers * block_norms,
        mlp=(n_layers - n_moe) * mlp_params(spec, spec.d_ff),
        moe_router=n_moe * router,
        moe_experts=n_moe * experts,
        moe_shared_experts=n_moe * shared,
        final_norm=norm_params(spec),
        head=0 if spec.tied_embeddings else spec.vocab_size * d,
        active_routed_experts=n_moe * active_routed,
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


def attention_matrices(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The Q, K, V projection matrices (name, rows, cols, n_layers): one fused matrix, or
    MLA's down- and up-projections."""
    d, n = spec.d_model, spec.n_layers
    if not spec.is_mla:
        return [("attention/qkv", d, spec.d_q + spec.d_kv + spec.d_v, n)]
    d_nope = spec.d_head - spec.rope_head_dim
    q_lora = spec.q_lora_rank
    if q_lora:
        q = [("attention/q_down", d, q_lora, n), ("attention/q_up", q_lora, spec.d_q, n)]
    else:
        q = [("attention/q", d, spec.d_q, n)]
    return [
        *q,
        ("attention/kv_down", d, spec.kv_lora_rank + spec.rope_head_dim, n),
        ("attention/kv_up", spec.kv_lora_rank, spec.n_heads * (d_nope + spec.d_v_head), n),
    ]


def matrix_shapes(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The weight matrices of `spec` as (name, rows, cols, how many), in the trainer's layout
    (fused qkv, or MLA's four projections; one tensor per expert matrix). Everything else
    (norms, biases) is a vector. Equal (name, rows, cols) rows are merged."""
    d, n, n_moe = spec.d_model, spec.n_layers, spec.n_moe_layers
    n_in = 2 if spec.mlp == "swiglu" else 1
    n_experts = spec.n_experts + spec.n_shared_experts
    shapes = [
        ("embedding/token", spec.vocab_size, d, 1),
        *attention_matrices(spec),
        ("attention/proj", spec.d_attn_out, d, n),
        ("mlp/in", d, spec.d_ff, (n - n_moe) * n_in),
        ("mlp/down", spec.d_ff, d, n - n_moe),
        ("mlp/in", d, spec.d_ff_expert, n_moe * n_experts * n_in),
        ("mlp/down", spec.d_ff_expert, d, n_moe * n_experts),
    ]
    if spec.position == "learned":
        shapes.append(("embedding/position", spec.max_seq_len, d, 1))
    if spec.is_moe:
        shapes.append(("moe/router", d, spec.n_experts, n_moe))
    if not spec.tied_embeddings:
        shapes.append(("head", spec.vocab_size, d, 1))
    merged: dict[tuple[str, int, int], int] = {}
    for name, rows, cols, count in shapes:
        if count:
            merged[(name, rows, cols)] = merged.get((name, rows, cols), 0) + count
    return [(name, rows, cols, count) for (name, rows, cols), count in merged.items()]


def _norm_tensors(spec: ModelSpec) -> int:
    """Tensors of one norm: a weight, and a bias for LayerNorm when bias=True (`norm_params`)."""
    return 2 if spec.norm == "layernorm" and spec.bias else 1


def layer_parameter_tensors(spec: ModelSpec) -> float:
    """Parameter tensors of one layer, on average over the layers, in the trainer's module
    layout (`matrix_shapes`: fused qkv, one tensor per expert matrix): each weight matrix, each
    bias vector, each norm's weight and bias. A GPT layer with biases and LayerNorm has 12 (two
    norms x 2, qkv, proj, fc1, fc2 x 2). What a framework that gathers tensor by tensor issues
    collectives for (`Framework.zero3_serial_per_tensor`)."""
    n, n_moe = spec.n_layers, spec.n_moe_layers
    matrices = sum(
        count
        for name, _, _, count in matrix_shapes(spec)
        if not name.startswith(("embedding", "head"))
    )
    per_norm = _norm_tensors(spec)
    norms = 2 * (2 if spec.post_norms else 1) + (2 if spec.qk_norm else 0)
    if spec.is_mla:
        norms += 2 if spec.q_lora_rank else 1  # the latents' norms
    biases = 0.0
    if spec.bias:  # every projection but MLA's and the router's has one
        biases = matrices - (n_moe if spec.is_moe else 0)
    elif spec.qkv_bias:
        biases = n
    if spec.router_bias:
        biases += n_moe
    return (matrices + biases) / n + norms * per_norm


def parameter_tensors(spec: ModelSpec) -> float:
    """Parameter tensors of the whole model: every layer's (`layer_parameter_tensors`), the
    token embedding, a learned position table, the final norm and an untied head."""
    outside = 1 + (spec.position == "learned") + _norm_tensors(spec) + (not spec.tied_embeddings)
    return spec.n_layers * layer_parameter_tensors(spec) + outside
