"""A `ModelSpec` from a Hugging Face `config.json` (stdlib json only; no transformers needed).

Supported `model_type`s: gpt2, llama, mistral, mixtral, qwen2, qwen3, gemma2, gemma3_text
(the text-only Gemma 3), deepseek_v3. Defaults follow the transformers config classes (e.g.
`tie_word_embeddings` is True for gpt2 and Gemma and False for the others; a missing
`num_key_value_heads` means multi-head attention; Gemma's `head_dim` is 256). Anything the
spec cannot represent exactly (biases on attention but not the MLP, a layer pattern other than
"every k-th layer global", ...) is a SpecError naming the key, never a silent miscount. Every
error is a SpecError whose field reads like "config.json:hidden_size".

Keys that change no parameter and no matmul are not read: RoPE scaling, logit soft-capping,
Gemma's embedding scale and query scalar, DeepSeek's routing groups and scoring function.
DeepSeek-V3's multi-token-prediction module (`num_nextn_predict_layers`) is not part of the
spec: the count is the main model's (671B), as its weights documentation counts it.
Dropout probabilities (`attention_dropout`, `resid_pdrop`, ...) are not read either: they are
fine-tuning settings for most configs (GPT-2's 0.1), and the estimate assumes pre-training
without dropout unless told (`--set dropout=true`, ModelSpec.dropout).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.model_source import hf_families as fam
from trainbudget.core.spec.model_source.hf_keys import ConfigKeys
from trainbudget.core.spec.model_spec import ModelSpec

SUPPORTED_MODEL_TYPES = (
    "gpt2",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "deepseek_v3",
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
    keys = ConfigKeys(config, origin, model_type)
    if model_type == "gpt2":
        fields, key_of = fam.gpt2(keys), fam.GPT2_KEYS
    elif model_type == "deepseek_v3":
        fields, key_of = fam.deepseek_v3(keys), fam.DEEPSEEK_KEYS
    elif model_type in fam.LLAMA_LIKE:
        fields, key_of = fam.llama_like(keys), fam.LLAMA_KEYS
    else:
        fields, key_of = fam.gemma(keys), fam.LLAMA_KEYS
    if model_type != "gpt2":
        fields["pretrain_seq_len"] = pretrain_seq_len_field(keys)
    try:
        return ModelSpec(name=name, sources=tuple(sources), **fields)  # type: ignore[arg-type]
    except SpecError as err:
        key = key_of.get(err.field)
        if key is None:
            raise
        raise SpecError(keys.field(key), err.value, err.rule) from None


def pretrain_seq_len_field(keys: ConfigKeys) -> int:
    """rope_scaling.original_max_position_embeddings: the length the model was pre-trained at
    before its RoPE was stretched to max_position_embeddings (Llama 3.1, DeepSeek-V3, YaRN
    configs); 0 (the spec's "same as max_seq_len") when the config has no rope scaling."""
    scaling = keys.config.get("rope_scaling")
    if scaling is None:
        return 0
    if not isinstance(scaling, Mapping):
        raise SpecError(keys.field("rope_scaling"), scaling, "must be a JSON object or null")
    inner = ConfigKeys(scaling, keys.field("rope_scaling"), keys.model_type)
    return inner.integer("original_max_position_embeddings", default=0, required=False) or 0


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
