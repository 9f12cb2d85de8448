"""The one description of a decoder-only transformer, shared by estimator, profiler and trainer.

Naming follows the project rule: `n_*` are counts, `d_*` are tensor dimensions.
All validation lives in `ModelSpec.__post_init__`; every rule names the field and the value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from trainbudget.core.errors import SpecError

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rope", "alibi")
GATE_ACTIVATIONS = ("silu", "gelu_tanh")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer: GPT-2, Llama, Mistral, Mixtral, Qwen2/3, Gemma 2/3 and
    DeepSeek-V3 (multi-head latent attention, dense layers before the MoE ones)."""

    name: str = "custom"
    """A label for printing; not used in any arithmetic."""
    vocab_size: int
    """Rows of the token embedding (and of the output head)."""
    d_model: int
    """Width of the residual stream."""
    n_layers: int
    """Transformer blocks."""
    n_heads: int
    """Query heads; each is head_dim wide (d_model // n_heads unless head_dim is set)."""
    head_dim: int = 0
    """Width of each query and key head (and value head, unless v_head_dim is set); 0 means
    d_model // n_heads. Qwen3, Gemma and Mistral-Nemo set it apart from d_model / n_heads, so
    n_heads * head_dim need not equal d_model. Under MLA it is the rotary plus the non-rotary
    part (DeepSeek-V3: 128 + 64 = 192)."""
    n_kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 means n_heads (multi-head attention)."""
    d_ff: int
    """Hidden width of the dense MLP (per expert width is d_ff_expert)."""
    max_seq_len: int
    """Context length; sizes the learned position table (no parameter for rope and alibi)."""
    pretrain_seq_len: int = 0
    """The sequence length of the main pre-training stage when it is shorter than the context
    the model was extended to (Llama 3.1: 8192 of 131072; a Hugging Face config's
    rope_scaling.original_max_position_embeddings); 0 means max_seq_len. The default
    sequence length of every estimate (core.spec.defaults.default_seq_len)."""
    mlp: str = "gelu"
    """'gelu' (two matrices: up, down) or 'swiglu', a gated MLP (three: gate, up, down)."""
    gate_activation: str = "silu"
    """The gated MLP's activation: 'silu' (SwiGLU, Shazeer 2020, arXiv:2002.05202) or
    'gelu_tanh' (GeGLU, Gemma). Both cost the same matmuls and memory; only the torch model
    reads it."""
    norm: str = "layernorm"
    """'layernorm' (weight, plus a bias when bias=True) or 'rmsnorm' (weight only)."""
    position: str = "learned"
    """'learned' (a max_seq_len x d_model table), 'rope' (no parameters; rotated copies of q and
    k) or 'alibi' (no parameters; a per-head linear bias on the attention scores, Press et al.
    2022, arXiv:2108.12409, which the estimate treats as fused into the scores' kernel)."""
    tied_embeddings: bool = True
    """The output head reuses the token embedding matrix."""
    bias: bool = False
    """Biases on every linear layer and LayerNorm (GPT-2 style). The head never has one."""
    qkv_bias: bool = False
    """Biases on the q, k, v projections only (Qwen2 style); implied by bias=True."""
    qk_norm: bool = False
    """RMSNorm on each query and key head before RoPE (Qwen3, Gemma 3): one d_head weight for
    q and one for k per layer."""
    post_norms: bool = False
    """A norm on the outputs of attention and of the MLP before each residual add, besides the
    two pre-norms (Gemma 2/3 "sandwich" norms): two more d_model weights per layer."""
    sliding_window: int = 0
    """Keys a query of a sliding-window layer sees (itself and the sliding_window - 1 before
    it; Beltagy et al. 2020, arXiv:2004.05150); 0 means every layer attends to the whole
    sequence. No parameter depends on it."""
    global_every: int = 0
    """With a sliding window, every global_every-th layer (the global_every-th, 2 x, ...)
    attends globally and the others slide (Gemma 2: 2, Gemma 3: 6); 0 means all layers slide
    (Mistral 7B v0.1)."""
    q_lora_rank: int = 0
    """MLA (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2): width of the compressed query; 0 means
    queries are projected directly from the residual stream."""
    kv_lora_rank: int = 0
    """MLA: width of the compressed key-value latent; > 0 turns multi-head latent attention
    on (then rope_head_dim and v_head_dim describe the heads, and n_kv_heads = n_heads)."""
    rope_head_dim: int = 0
    """MLA: the rotary part of each query and key head (part of head_dim); the key's rotary
    part is one vector shared by all heads, projected straight from the residual stream."""
    v_head_dim: int = 0
    """MLA: width of each value head; 0 means head_dim."""
    n_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_per_token: int = 0
    """Routed experts each token visits (top-k); 0 for a dense model."""
    n_shared_experts: int = 0
    """Experts every token visits in addition to the routed ones (DeepSeek-MoE style)."""
    d_ff_expert: int = 0
    """Hidden width of one expert; 0 means d_ff."""
    n_dense_layers: int = 0
    """MoE models: the first n_dense_layers layers have a dense MLP of width d_ff instead of
    experts (DeepSeek-V3's first_k_dense_replace = 3)."""
    router_bias: bool = False
    """MoE models: a per-expert bias added to the routing scores to pick the top-k experts
    (DeepSeek-V3's auxiliary-loss-free balancing, arXiv:2412.19437, Sec. 2.1.2)."""
    capacity_factor: float = 0.0
    """MoE models: each expert takes at most capacity_factor x its even share of a batch's
    token-expert assignments, ceil(C x tokens x experts_per_token / n_experts), and drops the
    rest (Switch Transformer, arXiv:2101.03961, Sec. 2.2; its Table 1 tries 1.0 to 2.0); its
    dispatch buffers hold that many token slots whether filled or not. 0 means dropless
    (Mixtral, DeepSeek-V3): every token reaches its experts, and estimates assume the
    routing is balanced."""
    dropout: bool = False
    """Attention and hidden dropout while training (GPT-3-era Megatron's defaults,
    --attention-dropout 0.1 and --hidden-dropout 0.1): each keeps a one-byte mask and its
    dropped copy for backward (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.1: the 5as^2b
    term and 4 of the 34 sbh) and its kernels move those bytes. False for current open models,
    which pre-train without dropout (Llama 2, arXiv:2307.09288, and most since)."""
    sources: tuple[str, ...] = field(default=(), compare=False)
    """Where the numbers come from (URLs); not used in arithmetic."""

    def __post_init__(self) -> None:
        if self.n_kv_heads == 0:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff_expert == 0 and isinstance(self.n_experts, int) and self.n_experts > 0:
            object.__setattr__(self, "d_ff_expert", self.d_ff)
        _validate(self)

    # ---- derived dimensions -------------------------------------------------------------
    @property
    def d_head(self) -> int:
        """Per-head width of queries and keys: head_dim, or d_model // n_heads."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def d_v_head(self) -> int:
        """Per-head width of values: v_head_dim, or d_head."""
        return self.v_head_dim or self.d_head

    @property
    def d_q(self) -> int:
        """Width of Q: n_heads * d_head (the contraction width of the attention scores)."""
        return self.n_heads * self.d_head

    @property
    def d_kv(self) -> int:
        """Width of K: n_kv_heads * d_head (V has the same width except under MLA: d_v)."""
        return self.n_kv_heads * self.d_head

    @property
    def d_v(self) -> int:
        """Width of V: n_kv_heads * d_v_head."""
        return self.n_kv_heads * self.d_v_head

    @property
    def d_attn_out(self) -> int:
        """Input width of the output projection: n_heads * d_v_head."""
        return self.n_heads * self.d_v_head

    @property
    def d_rope(self) -> int:
        """Rotated width of each query and key head: rope_head_dim under MLA, else d_head."""
        return self.rope_head_dim if self.is_mla else self.d_head

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_moe_layers(self) -> int:
        """Layers whose MLP is routed experts (all but the first n_dense_layers)."""
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def n_sliding_layers(self) -> int:
        """Layers that attend within the sliding window."""
        if not self.sliding_window:
            return 0
        if not self.global_every:
            return self.n_layers
        return self.n_layers - self.n_layers // self.global_every

    def is_sliding_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) attends within the sliding window."""
        if not self.sliding_window:
            return False
        return not self.global_every or (index + 1) % self.global_every != 0

    @property
    def routed_slots_per_token(self) -> float:
        """Token slots each token fills in the routed experts' buffers, averaged over tokens:
        experts_per_token, times capacity_factor when there is one (buffers of the capacity,
        filled or not; GShard, arXiv:2006.16668, Sec. 2.2). The all-to-all bytes and the
        experts' activations scale with it; their FLOPs count only routed tokens."""
        return self.experts_per_token * (self.capacity_factor or 1)

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) has routed experts."""
        return self.is_moe and index >= self.n_dense_layers

    def replace(self, **changes: object) -> ModelSpec:
        """A copy with fields changed, validated again."""
        return dataclasses.replace(self, **changes)


def spec_fields() -> dict[str, type]:
    """Field name -> Python type, for `--set field=value` parsing."""
    types = {"int": int, "bool": bool, "str": str, "float": float}
    return {
        f.name: types.get(str(f.type), str)
        for f in dataclasses.fields(ModelSpec)
        if f.name != "sources"
    }


def _positive(spec: ModelSpec, name: str) -> None:
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(name, value, "must be an integer")
    if value <= 0:
        raise SpecError(name, value, "must be a positive integer")


def _nonnegative(spec: ModelSpec, name: str) -> None:
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(name, value, "must be an integer")
    if value < 0:
        raise SpecError(name, value, "must be zero or a positive integer")


def _choice(spec: ModelSpec, name: str, allowed: tuple[str, ...]) -> None:
    value = getattr(spec, name)
    if value not in allowed:
        raise SpecError(name, value, "must be one of " + ", ".join(allowed))


def _validate(spec: ModelSpec) -> None:
    for name in (
        "vocab_size",
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "d_ff",
        "max_seq_len",
    ):
        _positive(spec, name)
    for name in _COUNTS:
        _nonnegative(spec, name)
    for name in _FLAGS:
        if not isinstance(getattr(spec, name), bool):
            raise SpecError(name, getattr(spec, name), "must be true or false")
    _choice(spec, "mlp", MLP_KINDS)
    _choice(spec, "norm", NORM_KINDS)
    _choice(spec, "position", POSITION_KINDS)
    _choice(spec, "gate_activation", GATE_ACTIVATIONS)
    if spec.gate_activation != "silu" and spec.mlp != "swiglu":
        raise SpecError(
            "gate_activation", spec.gate_activation, "needs a gated MLP (mlp = 'swiglu')"
        )
    if not spec.head_dim and spec.d_model % spec.n_heads:  # head_dim unset: d_model // n_heads
        raise SpecError(
            "n_heads",
            spec.n_heads,
            f"must divide d_model ({spec.d_model}); "
            f"{spec.d_model} % {spec.n_heads} = {spec.d_model % spec.n_heads}",
        )
    if spec.n_kv_heads > spec.n_heads or spec.n_heads % spec.n_kv_heads:
        raise SpecError(
            "n_kv_heads",
            spec.n_kv_heads,
            f"must divide n_heads ({spec.n_heads}) for grouped-query attention",
        )
    if spec.pretrain_seq_len > spec.max_seq_len:
        raise SpecError(
            "pretrain_seq_len",
            spec.pretrain_seq_len,
            f"must not exceed max_seq_len ({spec.max_seq_len})",
        )
    _validate_window(spec)
    _validate_mla(spec)
    _validate_moe(spec)


_COUNTS = (
    "pretrain_seq_len",
    "head_dim",
    "sliding_window",
    "global_every",
    "q_lora_rank",
    "kv_lora_rank",
    "rope_head_dim",
    "v_head_dim",
    "n_experts",
    "experts_per_token",
    "n_shared_experts",
    "d_ff_expert",
    "n_dense_layers",
)
_FLAGS = (
    "tied_embeddings",
    "bias",
    "qkv_bias",
    "qk_norm",
    "post_norms",
    "router_bias",
    "dropout",
)


def _validate_window(spec: ModelSpec) -> None:
    if spec.global_every and not spec.sliding_window:
        raise SpecError(
            "global_every", spec.global_every, "needs a sliding_window (every layer is global)"
        )


def _validate_mla(spec: ModelSpec) -> None:
    if not spec.is_mla:
        for name in ("q_lora_rank", "rope_head_dim", "v_head_dim"):
            if getattr(spec, name):
                raise SpecError(name, getattr(spec, name), "is an MLA field: set kv_lora_rank")
        return
    if not 0 < spec.rope_head_dim < spec.d_head or spec.rope_head_dim % 2:
        raise SpecError(
            "rope_head_dim",
            spec.rope_head_dim,
            f"must be even, positive and below d_head ({spec.d_head}) under MLA",
        )
    if spec.n_kv_heads != spec.n_heads:
        raise SpecError(
            "n_kv_heads",
            spec.n_kv_heads,
            f"must equal n_heads ({spec.n_heads}) under MLA (every head has its own K and V)",
        )
    for name, allowed in (("position", "rope"), ("bias", False), ("qkv_bias", False)):
        if getattr(spec, name) != allowed:
            raise SpecError(name, getattr(spec, name), f"must be {allowed!r} under MLA")
    if spec.qk_norm:
        raise SpecError("qk_norm", True, "not supported with MLA (it normalises its latents)")


def _validate_moe(spec: ModelSpec) -> None:
    if spec.n_experts == 0:
        moe_only = ("experts_per_token", "n_shared_experts", "d_ff_expert", "n_dense_layers")
        if any(getattr(spec, name) for name in moe_only) or spec.router_bias:
            raise SpecError(
                "n_experts",
                0,
                "is 0 (dense) but experts_per_token, n_shared_experts, d_ff_expert, "
                "n_dense_layers or router_bias is set",
            )
    cf = spec.capacity_factor
    if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not math.isfinite(cf) or cf < 0:
        raise SpecError("capacity_factor", cf, "must be a number >= 0 (0: dropless)")
    if spec.n_experts == 0:
        if cf:
            raise SpecError("capacity_factor", cf, "is an MoE field: the model has no experts")
        return
    if not 1 <= spec.experts_per_token <= spec.n_experts:
        raise SpecError(
            "experts_per_token",
            spec.experts_per_token,
            f"must be between 1 and n_experts ({spec.n_experts})",
        )
    if spec.n_dense_layers >= spec.n_layers:
        raise SpecError(
            "n_dense_layers",
            spec.n_dense_layers,
            f"must be below n_layers ({spec.n_layers}): an MoE model needs an MoE layer",
        )


@dataclass(frozen=True, kw_only=True)
class BareModel:
    """A model known only by its parameter count ('dense:70e9'), for the 6ND questions.

    It has no architecture: per-part breakdowns, activations and attention FLOPs are not
    defined for it, and the estimator says so in its assumptions instead of inventing them.
    """

    n_params: int
    name: str = "dense"

    def __post_init__(self) -> None:
        if isinstance(self.n_params, bool) or not isinstance(self.n_params, int):
            raise SpecError("n_params", self.n_params, "must be an integer")
        if self.n_params <= 0:
            raise SpecError("n_params", self.n_params, "must be a positive integer")
