"""A `ModelSpec` from a Hugging Face `config.json` (stdlib json only; no transformers needed).

Supported `model_type`s: gpt2, llama, mistral, mixtral, qwen2. Defaults follow the
transformers config classes (e.g. `tie_word_embeddings` is True for gpt2 and False for the
others; a missing `num_key_value_heads` means multi-head attention). Anything the spec cannot
represent exactly (a separate `head_dim`, biases on attention but not the MLP, ...) is a
SpecError naming the key, never a silent miscount. Every error is a SpecError whose field reads
like "config.json:hidden_size".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.model_spec import ModelSpec

SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "mixtral", "qwen2")

# transformers' defaults for `tie_word_embeddings` (PretrainedConfig says True; the Llama,
# Mistral, Mixtral and Qwen2 config classes override it to False).
_TIE_DEFAULT = {"gpt2": True, "llama": False, "mistral": False, "mixtral": False, "qwen2": False}

# ModelSpec field -> config.json key, to report a spec validation error against the key given.
_LLAMA_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_ff": "intermediate_size",
    "max_seq_len": "max_position_embeddings",
    "n_experts": "num_local_experts",
    "experts_per_token": "num_experts_per_tok",
    "d_ff_expert": "intermediate_size",
}
_GPT2_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "n_embd",
    "n_layers": "n_layer",
    "n_heads": "n_head",
    "n_kv_heads": "n_head",
    "d_ff": "n_inner",
    "max_seq_len": "n_positions",
}
_GELU_VARIANTS = (
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_accurate",
    "gelu_python",
    "quick_gelu",
)
_SILU_NAMES = ("silu", "swish")


class _Keys:
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


def _check_head_dim(keys: _Keys, d_model: int, n_heads: int) -> None:
    head_dim = keys.integer("head_dim", required=False)
    if head_dim is None or n_heads <= 0:
        return
    if head_dim * n_heads != d_model:
        raise SpecError(
            keys.field("head_dim"),
            head_dim,
            f"unsupported: differs from hidden_size / num_attention_heads "
            f"({d_model} / {n_heads}); the spec derives d_head = d_model // n_heads",
        )


def _llama_like(keys: _Keys) -> dict[str, object]:
    """llama, mistral, mixtral, qwen2: RMSNorm, SwiGLU, RoPE."""
    mt = keys.model_type
    d_model = keys.integer("hidden_size")
    n_heads = keys.integer("num_attention_heads")
    act = keys.string("hidden_act", "silu")
    if act not in _SILU_NAMES:
        raise SpecError(
            keys.field("hidden_act"),
            act,
            f"unsupported: only 'silu' (a SwiGLU MLP) is supported for model_type '{mt}'",
        )
    _check_head_dim(keys, d_model, n_heads)
    fields: dict[str, object] = dict(
        vocab_size=keys.integer("vocab_size"),
        d_model=d_model,
        n_layers=keys.integer("num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=keys.integer(
            "num_key_value_heads", default=n_heads, required=False, positive=True
        ),
        d_ff=keys.integer("intermediate_size"),
        max_seq_len=keys.integer("max_position_embeddings"),
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=keys.boolean("tie_word_embeddings", _TIE_DEFAULT[mt]),
    )
    if mt == "llama":
        attention_bias = keys.boolean("attention_bias", False)
        mlp_bias = keys.boolean("mlp_bias", False)
        if attention_bias != mlp_bias:
            key, other = (
                ("attention_bias", "mlp_bias") if attention_bias else ("mlp_bias", "attention_bias")
            )
            raise SpecError(
                keys.field(key),
                True,
                f"unsupported without {other}: the spec puts biases on every "
                "linear layer (bias) or on q, k, v only (qkv_bias)",
            )
        fields["bias"] = attention_bias  # q, k, v, o and gate, up, down; RMSNorm has none
    elif mt == "qwen2":
        fields["qkv_bias"] = True  # Qwen2 has biases on q, k, v only
    if mt == "mixtral":
        fields["n_experts"] = keys.integer("num_local_experts", positive=True)
        fields["experts_per_token"] = keys.integer("num_experts_per_tok", positive=True)
    return fields


def _gpt2(keys: _Keys) -> dict[str, object]:
    """gpt2: LayerNorm with bias, GELU MLP, learned positions, biases everywhere."""
    d_model = keys.integer("n_embd")
    act = keys.string("activation_function", "gelu_new")
    if act not in _GELU_VARIANTS:
        raise SpecError(
            keys.field("activation_function"),
            act,
            "unsupported: only GELU variants are supported for model_type 'gpt2'",
        )
    if keys.boolean("add_cross_attention", False):
        raise SpecError(
            keys.field("add_cross_attention"),
            True,
            "unsupported: cross-attention layers are not part of the spec",
        )
    d_ff = keys.integer("n_inner", default=None, required=False)
    if d_ff is None and isinstance(d_model, int):
        d_ff = 4 * d_model
    return dict(
        vocab_size=keys.integer("vocab_size"),
        d_model=d_model,
        n_layers=keys.integer("n_layer"),
        n_heads=keys.integer("n_head"),
        d_ff=d_ff,
        max_seq_len=keys.integer("n_positions"),
        mlp="gelu",
        norm="layernorm",
        position="learned",
        bias=True,
        tied_embeddings=keys.boolean("tie_word_embeddings", _TIE_DEFAULT["gpt2"]),
    )


def spec_from_hf_config(
    config: Mapping, name: str, *, origin: str = "config.json", sources: tuple[str, ...] = ()
) -> ModelSpec:
    """The ModelSpec of a parsed Hugging Face config.json.

    `origin` prefixes every error field ("config.json:hidden_size"); `sources` is recorded.
    """
    if not isinstance(config, Mapping):
        raise SpecError(origin, type(config).__name__, "must be a JSON object")
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError(
            f"{origin}:model_type", None, "missing; supported: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise unknown_key(f"{origin}:model_type", model_type, SUPPORTED_MODEL_TYPES)
    keys = _Keys(config, origin, model_type)
    if model_type == "gpt2":
        fields, key_of = _gpt2(keys), _GPT2_KEYS
    else:
        fields, key_of = _llama_like(keys), _LLAMA_KEYS
    try:
        return ModelSpec(name=name, sources=tuple(sources), **fields)  # type: ignore[arg-type]
    except SpecError as err:
        key = key_of.get(err.field)
        if key is None:
            raise
        raise SpecError(keys.field(key), err.value, err.rule) from None


def _name_for(path: str) -> str:
    """'models/Llama-2-7b-hf/config.json' -> 'Llama-2-7b-hf'; 'x/qwen2.json' -> 'qwen2'."""
    base = os.path.basename(path)
    if base == "config.json":
        parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
        return parent or "config"
    stem, ext = os.path.splitext(base)
    return stem if ext.lower() == ".json" and stem else base


def load_hf_config(path: str) -> ModelSpec:
    """Read a config.json (or a directory holding one) and return its ModelSpec."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise SpecError("config", path, "file not found") from None
    except UnicodeDecodeError:
        raise SpecError("config", path, "is not UTF-8 text") from None
    except OSError as err:
        raise SpecError("config", path, f"cannot be read: {err.strerror or err}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(
            "config", path, f"is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    except RecursionError:
        raise SpecError("config", path, "is not usable JSON: nested too deeply") from None
    if not isinstance(config, dict):
        raise SpecError(
            "config", path, f"must hold a JSON object, found a JSON {_json_kind(config)}"
        )
    return spec_from_hf_config(
        config, _name_for(path), origin=os.path.basename(path), sources=(path,)
    )


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"
