"""The one description of a decoder-only transformer, shared by estimator, profiler and trainer.

Naming follows the project rule: `n_*` are counts, `d_*` are tensor dimensions.
All validation lives in `ModelSpec.__post_init__`; every rule names the field and the value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trainbudget.core.errors import SpecError

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rope", "alibi")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer (GPT-2 / Llama / Mistral / Mixtral / Qwen2 family)."""

    name: str = "custom"
    """A label for printing; not used in any arithmetic."""
    vocab_size: int
    """Rows of the token embedding (and of the output head)."""
    d_model: int
    """Width of the residual stream."""
    n_layers: int
    """Transformer blocks."""
    n_heads: int
    """Query heads; head dimension is d_model // n_heads."""
    n_kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 means n_heads (multi-head attention)."""
    d_ff: int
    """Hidden width of the dense MLP (per expert width is d_ff_expert)."""
    max_seq_len: int
    """Context length; sizes the learned position table (no parameter for rope and alibi)."""
    mlp: str = "gelu"
    """'gelu' (two matrices: up, down) or 'swiglu' (three: gate, up, down)."""
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
    n_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_per_token: int = 0
    """Routed experts each token visits (top-k); 0 for a dense model."""
    n_shared_experts: int = 0
    """Experts every token visits in addition to the routed ones (DeepSeek-MoE style)."""
    d_ff_expert: int = 0
    """Hidden width of one expert; 0 means d_ff."""
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
        """Per-head width (d_model // n_heads)."""
        return self.d_model // self.n_heads

    @property
    def d_kv(self) -> int:
        """Width of K (and of V): n_kv_heads * d_head."""
        return self.n_kv_heads * self.d_head

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def replace(self, **changes: object) -> ModelSpec:
        """A copy with fields changed, validated again."""
        return dataclasses.replace(self, **changes)


def spec_fields() -> dict[str, type]:
    """Field name -> Python type, for `--set field=value` parsing."""
    types = {"int": int, "bool": bool, "str": str}
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
    for name in ("n_experts", "experts_per_token", "n_shared_experts", "d_ff_expert"):
        _nonnegative(spec, name)
    for name in ("tied_embeddings", "bias", "qkv_bias"):
        if not isinstance(getattr(spec, name), bool):
            raise SpecError(name, getattr(spec, name), "must be true or false")
    _choice(spec, "mlp", MLP_KINDS)
    _choice(spec, "norm", NORM_KINDS)
    _choice(spec, "position", POSITION_KINDS)
    if spec.d_model % spec.n_heads:
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
    if spec.n_experts == 0:
        if spec.experts_per_token or spec.n_shared_experts or spec.d_ff_expert:
            raise SpecError(
                "n_experts",
                0,
                "is 0 (dense) but experts_per_token, n_shared_experts or d_ff_expert is set",
            )
    else:
        if not 1 <= spec.experts_per_token <= spec.n_experts:
            raise SpecError(
                "experts_per_token",
                spec.experts_per_token,
                f"must be between 1 and n_experts ({spec.n_experts})",
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
