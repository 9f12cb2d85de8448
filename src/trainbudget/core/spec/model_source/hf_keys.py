"""Typed reads from a Hugging Face config.json mapping, and the readers every family shares
(head width, activation, biases, sliding-window layers). Every error names `origin:key`."""

from __future__ import annotations

from collections.abc import Mapping

from trainbudget.core.errors import SpecError

GELU_NAMES = (
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_accurate",
    "gelu_python",
    "quick_gelu",
)
SILU_NAMES = ("silu", "swish")


class ConfigKeys:
    """Typed reads from one config mapping; every error names `origin:key`."""

    def __init__(self, config: Mapping, origin: str, model_type: str) -> None:
        self.config = config
        self.origin = origin
        self.model_type = model_type

    def field(self, key: str) -> str:
        return f"{self.origin}:{key}"

    def integer(
        self, key: str, default: int | None = None, required: bool = True, positive: bool = False
    ) -> int | None:
        """An integer; null or missing gives `default` unless the key is required."""
        if key not in self.config:
            if required:
                raise SpecError(
                    self.field(key), None, f"missing; required for model_type '{self.model_type}'"
                )
            return default
        value = self.config[key]
        if value is None and not required:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(self.field(key), value, "must be an integer")
        if positive and value <= 0:
            raise SpecError(self.field(key), value, "must be a positive integer")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self.config:
            return default
        value = self.config[key]
        if not isinstance(value, bool):
            raise SpecError(self.field(key), value, "must be true or false")
        return value

    def string(self, key: str, default: str) -> str:
        if key not in self.config or self.config[key] is None:
            return default
        value = self.config[key]
        if not isinstance(value, str):
            raise SpecError(self.field(key), value, "must be a string")
        return value


def head_dim_field(keys: ConfigKeys, d_model: int, n_heads: int, default: int | None = None) -> int:
    """The spec's head_dim: 0 when the config's equals d_model // n_heads (the spec's default)."""
    head_dim = keys.integer("head_dim", default=default, required=False, positive=True)
    if head_dim is None or (n_heads > 0 and head_dim * n_heads == d_model):
        return 0
    return head_dim


def require_activation(
    keys: ConfigKeys, names: tuple[str, ...], key: str, default: str, what: str
) -> None:
    act = keys.string(key, default)
    if act not in names:
        raise SpecError(
            keys.field(key),
            act,
            f"unsupported: only {what} is supported for model_type '{keys.model_type}'",
        )


def refuse_bias(keys: ConfigKeys, key: str = "attention_bias") -> None:
    if keys.boolean(key, False):
        raise SpecError(
            keys.field(key),
            True,
            f"unsupported for model_type '{keys.model_type}': the spec puts biases on every "
            "linear layer (bias) or on q, k, v only (qkv_bias)",
        )


def _global_every(keys: ConfigKeys, n_layers: int, default: int) -> int:
    """Every how many layers one attends globally, from `layer_types` when given (transformers
    >= 4.53 writes it) or `default`; 0 when every layer slides."""
    types = keys.config.get("layer_types")
    if types is None:
        return default
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n_layers:
        raise SpecError(
            keys.field("layer_types"),
            types if not isinstance(types, list) else f"{len(types)} entries",
            f"must list one entry per layer ({n_layers}, num_hidden_layers)",
        )
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    every = full[0] + 1 if full else 0
    for i, kind in enumerate(types):
        expected = kinds[1] if every and (i + 1) % every == 0 else kinds[0]
        if kind != expected:
            raise SpecError(
                keys.field(f"layer_types[{i}]"),
                kind,
                f"expected {expected!r}: the spec represents every k-th layer global and the "
                f"others sliding (here k = {every}, from the first 'full_attention')",
            )
    return every


def sliding_fields(keys: ConfigKeys, n_layers: int, default_every: int = 0) -> dict[str, object]:
    """sliding_window (null: none) and which layers use it."""
    window = keys.integer("sliding_window", default=0, required=False, positive=True)
    every = _global_every(keys, n_layers, default_every) if isinstance(n_layers, int) else 0
    if not window or every == 1:
        return {}
    return {"sliding_window": window, "global_every": every}


def refuse_qwen_window(keys: ConfigKeys) -> None:
    """Qwen2/3 ignore sliding_window unless use_sliding_window, which the spec cannot follow
    (max_window_layers picks the layers)."""
    if keys.boolean("use_sliding_window", False):
        raise SpecError(
            keys.field("use_sliding_window"),
            True,
            "unsupported: Qwen's max_window_layers pattern is not part of the spec",
        )
