"""FLOP counts: exact per-part forward matmuls, training and inference, and the approximations.

Conventions, stated once and carried in every result:
- FLOPs, not MACs: a multiply-add is 2 FLOPs, so (B, D) @ (D, K) costs 2*B*D*K (seed 000/001).
- Only matmuls are counted; norms, softmax, activations, bias adds and residuals are ignored as
  the seed does ("all other layers are negligible", seed 003) -- they are memory-bound and are
  timed from bytes, not FLOPs, by the step-time model.
- Attention is non-causal by default (every query scores all T keys, as in seed 003, PaLM and
  Chinchilla); `causal=True` counts only the T*(T+1)/2 query-key pairs a causal mask keeps.
- Backward = 2 x forward (a weight gradient and an input gradient per matmul; seed 001,
  gradients_flops). Model FLOPs exclude recomputation; hardware FLOPs add it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.single.params import count_params, matmul_params
from trainbudget.core.spec.model_spec import BareModel, ModelSpec

RECOMPUTE_KINDS = ("none", "selective", "full")


def matmul_flops(b: int, d: int, k: int) -> int:
    """FLOPs of (b, d) @ (d, k): each of the b*k outputs needs d multiplies and d-1 adds, ~2d."""
    return 2 * b * d * k


@dataclass(frozen=True, kw_only=True)
class ForwardFlops:
    """Forward matmul FLOPs for one sequence of `seq_len` tokens, all layers summed."""

    seq_len: int
    causal: bool
    qkv: int
    scores: int
    """Q @ K^T."""
    attn_values: int
    """softmax(scores) @ V (the seed's 'reduce')."""
    attn_proj: int
    mlp_up: int
    mlp_gate: int
    """SwiGLU gate matrix; 0 for GELU."""
    mlp_down: int
    router: int
    """MoE gating matmul; experts' work is in mlp_* (only the experts each token visits)."""
    logits: int
    """Output head (the seed's 'dense')."""

    @property
    def attention(self) -> int:
        return self.qkv + self.scores + self.attn_values + self.attn_proj

    @property
    def mlp(self) -> int:
        return self.mlp_up + self.mlp_gate + self.mlp_down + self.router

    @property
    def layers(self) -> int:
        """Everything but the head: what full recomputation repeats."""
        return self.attention + self.mlp

    @property
    def total(self) -> int:
        return self.layers + self.logits

    def as_dict(self) -> dict[str, int]:
        """Named parts that sum to `total`."""
        return {
            "qkv": self.qkv,
            "scores": self.scores,
            "attn_values": self.attn_values,
            "attn_proj": self.attn_proj,
            "mlp_up": self.mlp_up,
            "mlp_gate": self.mlp_gate,
            "mlp_down": self.mlp_down,
            "router": self.router,
            "logits": self.logits,
        }


def check_seq_len(spec: ModelSpec, seq_len: int) -> None:
    """A positive length that a learned position table can embed (RoPE models may extrapolate)."""
    if seq_len <= 0:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    if spec.position == "learned" and seq_len > spec.max_seq_len:
        raise SpecError(
            "seq_len",
            seq_len,
            f"exceeds the learned position table of {spec.name} (max_seq_len {spec.max_seq_len})",
        )


def attended_pairs(seq_len: int, causal: bool) -> int:
    """Query-key pairs scored in one head: T*T, or T*(T+1)/2 under a causal mask."""
    return seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len


def forward_flops(spec: ModelSpec, seq_len: int, *, causal: bool = False) -> ForwardFlops:
    """Exact forward matmul FLOPs of one sequence (seed 003, `flops()`, generalised to GQA,
    SwiGLU and MoE)."""
    check_seq_len(spec, seq_len)
    t, d, n = seq_len, spec.d_model, spec.n_layers
    d_q = spec.n_heads * spec.d_head
    pairs = attended_pairs(t, causal)
    if spec.is_moe:
        d_hidden = spec.d_ff_expert
        n_mlps = spec.experts_per_token + spec.n_shared_experts
        router = matmul_flops(t, d, spec.n_experts)
    else:
        d_hidden, n_mlps, router = spec.d_ff, 1, 0
    gate = matmul_flops(t, d, d_hidden) if spec.mlp == "swiglu" else 0
    return ForwardFlops(
        seq_len=t,
        causal=causal,
        qkv=n * matmul_flops(t, d, d_q + 2 * spec.d_kv),
        # (T, d_head) @ (d_head, T) per head, n_heads heads: 2 * pairs * d_head * n_heads
        scores=n * 2 * pairs * d_q,
        # (T, T) @ (T, d_head) per head: the same count
        attn_values=n * 2 * pairs * d_q,
        attn_proj=n * matmul_flops(t, d_q, d),
        mlp_up=n * n_mlps * matmul_flops(t, d, d_hidden),
        mlp_gate=n * n_mlps * gate,
        mlp_down=n * n_mlps * matmul_flops(t, d_hidden, d),
        router=n * router,
        logits=matmul_flops(t, d, spec.vocab_size),
    )


@dataclass(frozen=True, kw_only=True)
class TrainingFlops:
    """Training FLOPs per token, exact and approximate, with the conventions that produced them."""

    seq_len: int
    causal: bool
    recompute: str
    flash_attention: bool
    forward_per_sequence: ForwardFlops | None
    """None for a BareModel (no architecture)."""
    model_flops_per_token: float
    """Forward + backward (3 x forward): what MFU counts."""
    recompute_flops_per_token: float
    """Extra forward work re-done in backward; counted in hardware FLOPs only."""
    approx_6n_per_token: float
    """6 x N with N the (active) parameter count, embeddings included (seed 003, 6ND)."""
    palm_per_token: float | None
    """PaLM (Chowdhery et al. 2022, arXiv 2204.02311, App. B): 6N + 12*L*H*Q*T, N = matmul
    params."""

    @property
    def hardware_flops_per_token(self) -> float:
        return self.model_flops_per_token + self.recompute_flops_per_token


def recompute_flops(fwd: ForwardFlops, recompute: str, flash_attention: bool) -> int:
    """Forward FLOPs recomputed during backward, per sequence.

    - selective (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2): the attention core,
      Q @ K^T and softmax @ V, is recomputed instead of stored;
    - full: every layer's forward runs again (the head is not checkpointed);
    - FlashAttention (Dao et al. 2022, arXiv 2205.14135, Alg. 4) recomputes Q @ K^T in its own
      backward whatever the policy.
    """
    if recompute not in RECOMPUTE_KINDS:
        raise SpecError("recompute", recompute, "must be one of " + ", ".join(RECOMPUTE_KINDS))
    extra = {"none": 0, "selective": fwd.scores + fwd.attn_values, "full": fwd.layers}[recompute]
    if flash_attention:
        if recompute == "selective":
            # FlashAttention already stores no T x T matrix: selective recompute adds nothing
            # beyond the Q @ K^T its own backward redoes.
            extra = 0
        extra += fwd.scores
    return extra


def training_flops(
    model: ModelSpec | BareModel,
    seq_len: int,
    *,
    causal: bool = False,
    recompute: str = "none",
    flash_attention: bool = False,
) -> TrainingFlops:
    """Training FLOPs per token for `model` at `seq_len`."""
    if seq_len <= 0:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    if recompute not in RECOMPUTE_KINDS:
        raise SpecError("recompute", recompute, "must be one of " + ", ".join(RECOMPUTE_KINDS))
    if isinstance(model, BareModel):
        six_n = 6 * model.n_params
        return TrainingFlops(
            seq_len=seq_len,
            causal=causal,
            recompute=recompute,
            flash_attention=flash_attention,
            forward_per_sequence=None,
            model_flops_per_token=six_n,
            # A bare count has no layers to recompute separately: full recompute = one forward.
            recompute_flops_per_token=2 * model.n_params if recompute == "full" else 0,
            approx_6n_per_token=six_n,
            palm_per_token=None,
        )
    fwd = forward_flops(model, seq_len, causal=causal)
    p = count_params(model)
    return TrainingFlops(
        seq_len=seq_len,
        causal=causal,
        recompute=recompute,
        flash_attention=flash_attention,
        forward_per_sequence=fwd,
        model_flops_per_token=3 * fwd.total / seq_len,
        recompute_flops_per_token=recompute_flops(fwd, recompute, flash_attention) / seq_len,
        approx_6n_per_token=6 * p.active,
        palm_per_token=palm_flops_per_token(model, seq_len),
    )


def palm_flops_per_token(spec: ModelSpec, seq_len: int) -> int:
    """PaLM's estimate 6N + 12*L*H*Q*T (Chowdhery et al. 2022, App. B) with N the parameters
    used in matmuls (seed 003 `palm_flops`: total minus the position table)."""
    n = matmul_params(spec, active=True)
    return 6 * n + 12 * spec.n_layers * spec.n_heads * spec.d_head * seq_len


def inference_flops_per_token(model: ModelSpec | BareModel, context_len: int = 0) -> float:
    """Forward FLOPs to generate one token after `context_len` cached tokens.

    2 x (matmul params) for the weights (seed 004, B-infer: "2 x params"), plus the attention
    of the new query against context_len + 1 keys: 2 * 2 * n_layers * d_q * (context_len + 1).
    A BareModel gives the bare 2N.
    """
    if context_len < 0:
        raise SpecError("context_len", context_len, "must not be negative")
    if isinstance(model, BareModel):
        return 2 * model.n_params
    d_q = model.n_heads * model.d_head
    attention = 4 * model.n_layers * d_q * (context_len + 1)
    return 2 * matmul_params(model, active=True) + attention


def kv_cache_bytes(spec: ModelSpec, n_tokens: int, bytes_per_element: float) -> float:
    """K and V for `n_tokens` cached tokens: 2 * n_layers * n_kv_heads * d_head * bytes each."""
    if n_tokens < 0:
        raise SpecError("n_tokens", n_tokens, "must not be negative")
    return 2 * spec.n_layers * spec.d_kv * n_tokens * bytes_per_element


def hidden_state_bytes(spec: ModelSpec, n_tokens: int, bytes_per_element: float) -> float:
    """One layer's residual-stream tensor for `n_tokens` tokens: the "intermediate result" of
    inference, batch x tokens x d_model x bytes (seed 004, B-kv: 8 x 4096 x 8192 x 2 = 0.5 GiB)."""
    if n_tokens < 0:
        raise SpecError("n_tokens", n_tokens, "must not be negative")
    return n_tokens * spec.d_model * bytes_per_element
