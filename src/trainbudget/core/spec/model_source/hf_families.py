"""Per-family readers: a config.json mapping -> ModelSpec fields (see `hf_config`)."""

from __future__ import annotations

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_source.hf_keys import (
    GELU_NAMES,
    SILU_NAMES,
    ConfigKeys,
    head_dim_field,
    refuse_bias,
    refuse_qwen_window,
    require_activation,
    sliding_fields,
)

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3")

# transformers' defaults for `tie_word_embeddings` (PretrainedConfig says True; the Llama,
# Mistral, Mixtral, Qwen2/3 and DeepSeek-V3 config classes override it to False).
TIE_DEFAULT = {
    "gpt2": True,
    "llama": False,
    "mistral": False,
    "mixtral": False,
    "qwen2": False,
    "qwen3": False,
    "gemma2": True,
    "gemma3_text": True,
    "deepseek_v3": False,
}
# transformers' Gemma2Config / Gemma3TextConfig defaults: head_dim, and every k-th layer global
_GEMMA_HEAD_DIM = 256
_GEMMA_GLOBAL_EVERY = {"gemma2": 2, "gemma3_text": 6}

# ModelSpec field -> config.json key, to report a spec validation error against the key given.
LLAMA_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_ff": "intermediate_size",
    "max_seq_len": "max_position_embeddings",
    "pretrain_seq_len": "rope_scaling.original_max_position_embeddings",
    "n_experts": "num_local_experts",
    "experts_per_token": "num_experts_per_tok",
    "d_ff_expert": "intermediate_size",
    "head_dim": "head_dim",
    "sliding_window": "sliding_window",
}
DEEPSEEK_KEYS = {
    **LLAMA_KEYS,
    "n_experts": "n_routed_experts",
    "d_ff_expert": "moe_intermediate_size",
    "n_shared_experts": "n_shared_experts",
    "n_dense_layers": "first_k_dense_replace",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "head_dim": "qk_nope_head_dim",
}
GPT2_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "n_embd",
    "n_layers": "n_layer",
    "n_heads": "n_head",
    "n_kv_heads": "n_head",
    "d_ff": "n_inner",
    "max_seq_len": "n_positions",
}


def llama_like(keys: ConfigKeys) -> dict[str, object]:
    """llama, mistral, mixtral, qwen2, qwen3: RMSNorm, SwiGLU, RoPE."""
    mt = keys.model_type
    d_model = keys.integer("hidden_size")
    n_heads = keys.integer("num_attention_heads")
    n_layers = keys.integer("num_hidden_layers")
    require_activation(keys, SILU_NAMES, "hidden_act", "silu", "'silu' (a SwiGLU MLP)")
    fields: dict[str, object] = dict(
        vocab_size=keys.integer("vocab_size"),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        head_dim=head_dim_field(keys, d_model, n_heads),
        n_kv_heads=keys.integer(
            "num_key_value_heads", default=n_heads, required=False, positive=True
        ),
        d_ff=keys.integer("intermediate_size"),
        max_seq_len=keys.integer("max_position_embeddings"),
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=keys.boolean("tie_word_embeddings", TIE_DEFAULT[mt]),
    )
    if mt in ("mistral", "mixtral"):
        fields.update(sliding_fields(keys, n_layers))  # every layer slides (Mistral 7B v0.1)
    elif mt in ("qwen2", "qwen3"):
        refuse_qwen_window(keys)
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
    elif mt == "qwen3":
        refuse_bias(keys)
        fields["qk_norm"] = True  # q_norm, k_norm: RMSNorm(head_dim) each
    if mt == "mixtral":
        fields["n_experts"] = keys.integer("num_local_experts", positive=True)
        fields["experts_per_token"] = keys.integer("num_experts_per_tok", positive=True)
    return fields


def gemma(keys: ConfigKeys) -> dict[str, object]:
    """gemma2, gemma3_text: RMSNorm before and after attention and the MLP, GeGLU, RoPE, tied
    head; local sliding-window layers interleaved with global ones; Gemma 3 adds QK-norm."""
    mt = keys.model_type
    d_model = keys.integer("hidden_size")
    n_heads = keys.integer("num_attention_heads")
    n_layers = keys.integer("num_hidden_layers")
    act_key = "hidden_activation" if "hidden_activation" in keys.config else "hidden_act"
    require_activation(keys, GELU_NAMES, act_key, "gelu_pytorch_tanh", "a GELU (a GeGLU MLP)")
    refuse_bias(keys)
    return dict(
        vocab_size=keys.integer("vocab_size"),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        head_dim=head_dim_field(keys, d_model, n_heads, default=_GEMMA_HEAD_DIM),
        n_kv_heads=keys.integer(
            "num_key_value_heads", default=n_heads, required=False, positive=True
        ),
        d_ff=keys.integer("intermediate_size"),
        max_seq_len=keys.integer("max_position_embeddings"),
        mlp="swiglu",
        gate_activation="gelu_tanh",
        norm="rmsnorm",
        post_norms=True,
        qk_norm=mt == "gemma3_text",
        position="rope",
        tied_embeddings=keys.boolean("tie_word_embeddings", TIE_DEFAULT[mt]),
        **sliding_fields(
            keys,
            n_layers,
            keys.integer(
                "sliding_window_pattern",
                default=_GEMMA_GLOBAL_EVERY[mt],
                required=False,
                positive=True,
            ),
        ),
    )


def deepseek_v3(keys: ConfigKeys) -> dict[str, object]:
    """deepseek_v3: MLA, first_k_dense_replace dense layers, then DeepSeekMoE layers (routed
    and shared experts) whose router has a per-expert bias under topk_method 'noaux_tc'."""
    require_activation(keys, SILU_NAMES, "hidden_act", "silu", "'silu' (a SwiGLU MLP)")
    refuse_bias(keys)
    if keys.integer("moe_layer_freq", default=1, required=False) != 1:
        raise SpecError(
            keys.field("moe_layer_freq"),
            keys.config["moe_layer_freq"],
            "unsupported: the spec puts experts in every layer after first_k_dense_replace",
        )
    n_heads = keys.integer("num_attention_heads")
    nope = keys.integer("qk_nope_head_dim", positive=True)
    rope = keys.integer("qk_rope_head_dim", positive=True)
    return dict(
        vocab_size=keys.integer("vocab_size"),
        d_model=keys.integer("hidden_size"),
        n_layers=keys.integer("num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=keys.integer(
            "num_key_value_heads", default=n_heads, required=False, positive=True
        ),
        head_dim=nope + rope if isinstance(nope, int) and isinstance(rope, int) else nope,
        q_lora_rank=keys.integer("q_lora_rank", default=0, required=False, positive=True),
        kv_lora_rank=keys.integer("kv_lora_rank", positive=True),
        rope_head_dim=rope,
        v_head_dim=keys.integer("v_head_dim", positive=True),
        d_ff=keys.integer("intermediate_size"),
        max_seq_len=keys.integer("max_position_embeddings"),
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=keys.boolean("tie_word_embeddings", TIE_DEFAULT["deepseek_v3"]),
        n_experts=keys.integer("n_routed_experts", positive=True),
        experts_per_token=keys.integer("num_experts_per_tok", positive=True),
        n_shared_experts=keys.integer("n_shared_experts", default=1, required=False),
        d_ff_expert=keys.integer("moe_intermediate_size", positive=True),
        n_dense_layers=keys.integer("first_k_dense_replace", default=3, required=False),
        router_bias=keys.string("topk_method", "noaux_tc") == "noaux_tc",
    )


def gpt2(keys: ConfigKeys) -> dict[str, object]:
    """gpt2: LayerNorm with bias, GELU MLP, learned positions, biases everywhere."""
    d_model = keys.integer("n_embd")
    act = keys.string("activation_function", "gelu_new")
    if act not in GELU_NAMES:
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
        tied_embeddings=keys.boolean("tie_word_embeddings", TIE_DEFAULT["gpt2"]),
    )
