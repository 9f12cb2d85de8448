"""FLOP counts: exact per-part forward matmuls, training and inference, and the approximations.

Conventions, stated once and carried in every result:
- FLOPs, not MACs: a multiply-add is 2 FLOPs, so (B, D) @ (D, K) costs 2*B*D*K (seed 000/001).
- Only matmuls are counted; norms, softmax, activations, bias adds and residuals are ignored as
  the seed does ("all other layers are negligible", seed 003) -- they are memory-bound and are
  timed from bytes, not FLOPs, by the step-time model.
- Attention is non-causal by default (every query scores all T keys, as in seed 003, PaLM and
  Chinchilla); `causal=True` counts only the T*(T+1)/2 query-key pairs a causal mask keeps.
  A sliding-window layer of window w scores T*min(T, w) pairs non-causally (each query is
  charged a full window) and sum_i min(i+1, w) causally (query i sees itself and up to w-1
  keys before it).
- Backward = 2 x forward (a weight gradient and an input gradient per matmul; seed 001,
  gradients_flops). Model FLOPs exclude recomputation; hardware FLOPs add it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.single.op_checkpoint import recomputed_flops as op_recomputed_flops
from trainbudget.core.single.params import attention_matrices, count_params, matmul_params
from trainbudget.core.spec.model_spec import BareModel, ModelSpec

RECOMPUTE_KINDS = ("none", "selective", "full", "selective-op")
"""Appended, never reordered: a plan's recompute code is the index here (parallel/layout.py)."""


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


def attended_pairs(seq_len: int, causal: bool, window: int = 0) -> int:
    """Query-key pairs scored in one head: T*T, or T*(T+1)/2 under a causal mask. With a
    sliding window w < T: T*w, or causally w*(w+1)/2 + (T-w)*w (the first w queries see
    1..w keys, every later one w)."""
    if window and window < seq_len:
        if causal:
            return window * (window + 1) // 2 + (seq_len - window) * window
        return seq_len * window
    return seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len


def stack_pairs(spec: ModelSpec, seq_len: int, causal: bool) -> int:
    """Query-key pairs of one head summed over all layers (global and sliding-window ones)."""
    n_sliding = spec.n_sliding_layers
    return (spec.n_layers - n_sliding) * attended_pairs(seq_len, causal) + (
        n_sliding * attended_pairs(seq_len, causal, spec.sliding_window)
    )


def forward_flops(spec: ModelSpec, seq_len: int, *, causal: bool = False) -> ForwardFlops:
    """Exact forward matmul FLOPs of one sequence (seed 003, `flops()`, generalised to GQA,
    SwiGLU, MoE after dense layers, MLA and sliding-window layers)."""
    check_seq_len(spec, seq_len)
    t, d, n = seq_len, spec.d_model, spec.n_layers
    pairs = stack_pairs(spec, t, causal)
    n_moe, n_dense = spec.n_moe_layers, spec.n_layers - spec.n_moe_layers
    k = spec.experts_per_token + spec.n_shared_experts  # experts a token visits
    d_ff, d_e = spec.d_ff, spec.d_ff_expert

    def up(d_hidden: int) -> int:
        return matmul_flops(t, d, d_hidden)

    gated = spec.mlp == "swiglu"
    return ForwardFlops(
        seq_len=t,
        causal=causal,
        # fused (d, d_q + d_kv + d_v), or MLA's down- and up-projections
        qkv=n * sum(matmul_flops(t, rows, cols) for _, rows, cols, _ in attention_matrices(spec)),
        # (T, d_head) @ (d_head, T) per head, n_heads heads: 2 * pairs * d_head * n_heads
        scores=2 * pairs * spec.d_q,
        # (T, T) @ (T, d_v_head) per head: 2 * pairs * d_v_head * n_heads
        attn_values=2 * pairs * spec.d_attn_out,
        attn_proj=n * matmul_flops(t, spec.d_attn_out, d),
        mlp_up=n_dense * up(d_ff) + n_moe * k * up(d_e),
        mlp_gate=(n_dense * up(d_ff) + n_moe * k * up(d_e)) if gated else 0,
        mlp_down=n_dense * matmul_flops(t, d_ff, d) + n_moe * k * matmul_flops(t, d_e, d),
        router=n_moe * matmul_flops(t, d, spec.n_experts),
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


def recompute_flops(
    fwd: ForwardFlops, recompute: str, flash_attention: bool, spec: ModelSpec | None = None
) -> int:
    """Forward FLOPs recomputed during backward, per sequence.

    - selective (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2): the attention core,
      Q @ K^T and softmax @ V, is recomputed instead of stored;
    - full: every layer's forward runs again (the head is not checkpointed);
    - selective-op (torchtitan's per-op policy, `op_checkpoint`): the matmuls it does not save
      (every second one); needs `spec`;
    - FlashAttention (Dao et al. 2022, arXiv 2205.14135, Alg. 4) recomputes Q @ K^T in its own
      backward whatever the policy.
    """
    if recompute not in RECOMPUTE_KINDS:
        raise SpecError("recompute", recompute, "must be one of " + ", ".join(RECOMPUTE_KINDS))
    if recompute == "selective-op":
        if spec is None:
            raise SpecError("recompute", recompute, "needs the model spec (which matmuls run)")
        extra = op_recomputed_flops(spec, fwd.seq_len)
    else:
        parts = {"none": 0, "selective": fwd.scores + fwd.attn_values, "full": fwd.layers}
        extra = parts[recompute]
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
        if recompute == "selective-op":
            raise SpecError(
                "recompute", recompute, "needs a model architecture, not a bare parameter count"
            )
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
        recompute_flops_per_token=recompute_flops(fwd, recompute, flash_attention, model) / seq_len,
        approx_6n_per_token=6 * p.active,
        palm_per_token=palm_flops_per_token(model, seq_len),
    )


def palm_flops_per_token(spec: ModelSpec, seq_len: int) -> int:
    """PaLM's estimate 6N + 12*L*H*Q*T (Chowdhery et al. 2022, App. B) with N the parameters
    used in matmuls (seed 003 `palm_flops`: total minus the position table). H*Q is taken
    as (d_q + d_attn_out) / 2, so MLA's narrower values count as they are; every layer is
    charged the full T whatever its window, as the formula defines."""
    n = matmul_params(spec, active=True)
    return 6 * n + 6 * spec.n_layers * (spec.d_q + spec.d_attn_out) * seq_len


def inference_flops_per_token(model: ModelSpec | BareModel, context_len: int = 0) -> float:
    """Forward FLOPs to generate one token after `context_len` cached tokens.

    2 x (matmul params) for the weights (seed 004, B-infer: "2 x params"), plus the attention
    of the new query against the context_len + 1 keys it sees (at most sliding_window in a
    sliding layer): 2 * (d_q + d_attn_out) per key and layer. A BareModel gives the bare 2N.
    """
    if context_len < 0:
        raise SpecError("context_len", context_len, "must not be negative")
    if isinstance(model, BareModel):
        return 2 * model.n_params
    seen, n_sliding = context_len + 1, model.n_sliding_layers
    keys = (model.n_layers - n_sliding) * seen + n_sliding * min(seen, model.sliding_window or seen)
    attention = 2 * (model.d_q + model.d_attn_out) * keys
    return 2 * matmul_params(model, active=True) + attention


def kv_cache_bytes(spec: ModelSpec, n_tokens: int, bytes_per_element: float) -> float:
    """The cache for `n_tokens` tokens: K and V, (d_kv + d_v) * bytes per token and layer; a
    sliding layer keeps only its last sliding_window tokens. MLA caches its compressed latent
    and the shared rotary key instead, kv_lora_rank + rope_head_dim per token and layer
    (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2)."""
    if n_tokens < 0:
        raise SpecError("n_tokens", n_tokens, "must not be negative")
    per_token = spec.kv_lora_rank + spec.rope_head_dim if spec.is_mla else spec.d_kv + spec.d_v
    n_sliding = spec.n_sliding_layers
    layer_tokens = (spec.n_layers - n_sliding) * n_tokens + n_sliding * min(
        n_tokens, spec.sliding_window or n_tokens
    )
    return layer_tokens * per_token * bytes_per_element


def hidden_state_bytes(spec: ModelSpec, n_tokens: int, bytes_per_element: float) -> float:
    """One layer's residual-stream tensor for `n_tokens` tokens: the "intermediate result" of
    inference, batch x tokens x d_model x bytes (seed 004, B-kv: 8 x 4096 x 8192 x 2 = 0.5 GiB)."""
    if n_tokens < 0:
        raise SpecError("n_tokens", n_tokens, "must not be negative")
    return n_tokens * spec.d_model * bytes_per_element
