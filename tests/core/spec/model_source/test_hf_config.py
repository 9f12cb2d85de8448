"""Hugging Face config.json -> ModelSpec: real configs give the published counts; bad ones fail."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_source.hf_config import load_hf_config, spec_from_hf_config
from trainbudget.core.spec.presets import PRESETS

DATA = Path(__file__).resolve().parents[3] / "data" / "hf"


def _config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


# Fixture -> (the preset it must equal, published total); sources on each line.
REAL = {
    "llama-2-7b": ("llama-2-7b", 6_738_415_616),  # KerasHub llama2_7b_en "params"
    "mistral-7b": ("mistral-7b", 7_241_732_096),  # KerasHub mistral_7b_en "params"
    "mixtral-8x7b": ("mixtral-8x7b", 46_702_792_704),  # KerasHub mixtral_8_7b_en "params"
    "gpt2": ("gpt2", 124_439_808),  # KerasHub gpt2_base_en "params"
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_config_matches_preset_and_published_count(name):
    preset, published = REAL[name]
    spec = load_hf_config(str(DATA / f"{name}.json"))
    assert spec.name == name
    # sources and name aside, the same architecture; the pre-training length is the paper's
    # where the config has no rope_scaling (Mistral 7B: 8192, arXiv:2310.06825 Table 1)
    assert spec == replace(PRESETS[preset], pretrain_seq_len=spec.pretrain_seq_len)
    assert count_params(spec).total == published


# Fixtures of current open models -> the preset they must equal (their counts, as the model
# cards state them, are checked against the presets in test_presets.py).
MODERN = ["qwen3-8b", "gemma-2-9b", "gemma-3-1b", "mistral-nemo", "deepseek-v3"]


@pytest.mark.parametrize("name", MODERN)
def test_modern_config_matches_preset(name):
    spec = load_hf_config(str(DATA / f"{name}.json"))
    # a config without rope_scaling cannot state the pre-training length: the preset takes it
    # from the model's report (Qwen3, Mistral NeMo); DeepSeek-V3's comes from its config
    assert spec == replace(PRESETS[name], pretrain_seq_len=spec.pretrain_seq_len)


def test_pretraining_length_from_rope_scaling():
    """Issue 13, point 2: a Llama 3.1 config (context 131072, pre-trained at 8192) and
    DeepSeek-V3's (163840, pre-trained at 4096) give their pre-training lengths, which every
    estimate then uses by default."""
    deepseek = load_hf_config(str(DATA / "deepseek-v3.json"))
    assert (deepseek.max_seq_len, deepseek.pretrain_seq_len) == (163840, 4096)
    llama31 = {**_config("qwen3-8b"), "model_type": "llama", "max_position_embeddings": 131072}
    llama31["rope_scaling"] = {"rope_type": "llama3", "original_max_position_embeddings": 8192}
    assert spec_from_hf_config(llama31, "l").pretrain_seq_len == 8192
    llama31["rope_scaling"] = None
    assert spec_from_hf_config(llama31, "l").pretrain_seq_len == 0
    llama31["rope_scaling"] = {"original_max_position_embeddings": "8k"}
    with pytest.raises(SpecError, match="rope_scaling:original_max_position_embeddings"):
        spec_from_hf_config(llama31, "l")


def test_explicit_head_dim_qk_norm_and_post_norms():
    qwen3 = load_hf_config(str(DATA / "qwen3-8b.json"))
    assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.head_dim == 0  # 128 = 4096 / 32
    nemo = load_hf_config(str(DATA / "mistral-nemo.json"))
    assert (nemo.d_head, nemo.d_q, nemo.d_model) == (128, 4096, 5120)
    assert nemo.sliding_window == 0  # "sliding_window": null
    gemma2 = load_hf_config(str(DATA / "gemma-2-9b.json"))
    assert gemma2.post_norms and not gemma2.qk_norm and gemma2.tied_embeddings  # no tie key
    assert gemma2.gate_activation == "gelu_tanh"
    # Gemma2Config's default head_dim is 256, not hidden_size / heads (224)
    assert spec_from_hf_config(_without(_config("gemma-2-9b"), "head_dim"), "g").d_head == 256


def test_sliding_window_layers():
    mistral = load_hf_config(str(DATA / "mistral-7b.json"))
    assert (mistral.sliding_window, mistral.n_sliding_layers) == (4096, 32)
    gemma2 = load_hf_config(str(DATA / "gemma-2-9b.json"))
    assert (gemma2.sliding_window, gemma2.global_every, gemma2.n_sliding_layers) == (4096, 2, 21)
    assert gemma2.is_sliding_layer(0) and not gemma2.is_sliding_layer(1)  # layer 0 slides
    gemma3 = load_hf_config(str(DATA / "gemma-3-1b.json"))
    global_layers = [i for i in range(26) if not gemma3.is_sliding_layer(i)]
    assert global_layers == [5, 11, 17, 23] and gemma3.n_sliding_layers == 22
    # transformers >= 4.53 writes the same pattern as layer_types
    types = ["full_attention" if i in global_layers else "sliding_attention" for i in range(26)]
    as_types = {**_without(_config("gemma-3-1b"), "sliding_window_pattern"), "layer_types": types}
    assert spec_from_hf_config(as_types, "gemma-3-1b") == gemma3
    # Qwen ignores sliding_window unless use_sliding_window
    qwen = {**_config("qwen3-8b"), "sliding_window": 4096}
    assert spec_from_hf_config(qwen, "q").sliding_window == 0


def test_deepseek_v3_shapes():
    spec = load_hf_config(str(DATA / "deepseek-v3.json"))
    assert spec.is_mla and (spec.d_head, spec.d_rope, spec.d_v_head) == (192, 64, 128)
    assert (spec.q_lora_rank, spec.kv_lora_rank) == (1536, 512)
    assert (spec.n_dense_layers, spec.n_moe_layers) == (3, 58)
    assert (spec.d_ff, spec.d_ff_expert, spec.n_experts, spec.experts_per_token) == (
        18432,
        2048,
        256,
        8,
    )
    assert spec.n_shared_experts == 1 and spec.router_bias
    no_q_lora = spec_from_hf_config({**_config("deepseek-v3"), "q_lora_rank": None}, "v2-like")
    assert no_q_lora.q_lora_rank == 0
    greedy = spec_from_hf_config({**_config("deepseek-v3"), "topk_method": "greedy"}, "g")
    assert count_params(spec).total - count_params(greedy).total == 58 * 256  # router biases


def test_qwen2_0_5b_published_count_with_tied_embeddings_and_qkv_bias():
    # Qwen/Qwen2-0.5B: 494,032,768 parameters (HF safetensors; same shapes and count as
    # KerasHub qwen2.5_0.5b_en "params" 494032768, keras_hub/src/models/qwen/qwen_presets.py).
    spec = load_hf_config(str(DATA / "qwen2-0.5b.json"))
    assert spec.tied_embeddings and spec.qkv_bias and not spec.bias
    assert (spec.n_heads, spec.n_kv_heads, spec.d_head) == (14, 2, 64)
    p = count_params(spec)
    assert p.total == 494_032_768
    assert p.head == 0
    untied = spec_from_hf_config({**_config("qwen2-0.5b"), "tie_word_embeddings": False}, "q")
    assert count_params(untied).total == 494_032_768 + 151936 * 896


def test_sources_record_the_path():
    spec = load_hf_config(str(DATA / "gpt2.json"))
    assert spec.sources == (str(DATA / "gpt2.json"),)


def test_directory_holding_config_json(tmp_path):
    folder = tmp_path / "Llama-2-7b-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config("llama-2-7b")), encoding="utf-8")
    for path in (folder, folder / "config.json"):
        spec = load_hf_config(str(path))
        assert spec.name == "Llama-2-7b-hf"
        assert count_params(spec).total == 6_738_415_616


def test_family_defaults_follow_transformers():
    gpt2 = _config("gpt2")
    assert "tie_word_embeddings" not in gpt2 and "n_inner" not in gpt2
    spec = spec_from_hf_config(gpt2, "gpt2")
    assert spec.tied_embeddings and spec.d_ff == 4 * 768  # PretrainedConfig ties by default
    assert spec_from_hf_config({**gpt2, "n_inner": None}, "g").d_ff == 3072
    assert spec_from_hf_config({**gpt2, "n_inner": 1000}, "g").d_ff == 1000
    for name in ("llama-2-7b", "qwen2-0.5b"):
        config = _config(name)
        del config["tie_word_embeddings"]
        assert not spec_from_hf_config(config, name).tied_embeddings  # LlamaConfig/Qwen2Config
    llama = _config("llama-2-7b")
    del llama["num_key_value_heads"]
    assert spec_from_hf_config(llama, "l").n_kv_heads == 32
    assert spec_from_hf_config({**llama, "num_key_value_heads": None}, "l").n_kv_heads == 32
    assert spec_from_hf_config({**llama, "head_dim": 128}, "l").d_head == 128
    assert spec_from_hf_config({**llama, "head_dim": None}, "l").d_head == 128


def test_llama_with_attention_and_mlp_bias_counts_every_bias():
    llama = _config("llama-2-7b")
    biased = spec_from_hf_config({**llama, "attention_bias": True, "mlp_bias": True}, "b")
    assert biased.bias
    d, d_ff, n_layers = 4096, 11008, 32
    per_layer = 3 * d + d + 2 * d_ff + d  # q,k,v + o + gate,up + down
    assert count_params(biased).total == 6_738_415_616 + n_layers * per_layer


def _bad(config: dict) -> SpecError:
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(config, "bad")
    return err.value


def _without(config: dict, key: str) -> dict:
    return {k: v for k, v in config.items() if k != key}


LLAMA = _config("llama-2-7b")
GPT2 = _config("gpt2")
MIXTRAL = _config("mixtral-8x7b")

# (case, config, key the error must name)
MALFORMED = [
    ("missing hidden_size", _without(LLAMA, "hidden_size"), "hidden_size"),
    ("missing intermediate_size", _without(LLAMA, "intermediate_size"), "intermediate_size"),
    ("missing n_embd", _without(GPT2, "n_embd"), "n_embd"),
    ("missing num_local_experts", _without(MIXTRAL, "num_local_experts"), "num_local_experts"),
    ("string hidden_size", {**LLAMA, "hidden_size": "4096"}, "hidden_size"),
    ("float vocab_size", {**LLAMA, "vocab_size": 32000.0}, "vocab_size"),
    ("bool num_hidden_layers", {**LLAMA, "num_hidden_layers": True}, "num_hidden_layers"),
    ("null vocab_size", {**LLAMA, "vocab_size": None}, "vocab_size"),
    ("negative layers", {**LLAMA, "num_hidden_layers": -2}, "num_hidden_layers"),
    ("zero kv heads", {**LLAMA, "num_key_value_heads": 0}, "num_key_value_heads"),
    ("kv heads not dividing", {**LLAMA, "num_key_value_heads": 5}, "num_key_value_heads"),
    ("heads not dividing", {**LLAMA, "num_attention_heads": 30}, "num_attention_heads"),
    ("gpt2 heads not dividing", {**GPT2, "n_head": 7}, "n_head"),
    ("head_dim zero", {**LLAMA, "head_dim": 0}, "head_dim"),
    ("attention_bias only", {**LLAMA, "attention_bias": True}, "attention_bias"),
    ("mlp_bias only", {**LLAMA, "mlp_bias": True}, "mlp_bias"),
    ("tie not bool", {**LLAMA, "tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ("hidden_act gelu", {**LLAMA, "hidden_act": "gelu"}, "hidden_act"),
    ("gpt2 relu", {**GPT2, "activation_function": "relu"}, "activation_function"),
    ("gpt2 cross-attention", {**GPT2, "add_cross_attention": True}, "add_cross_attention"),
    ("top-k above experts", {**MIXTRAL, "num_experts_per_tok": 9}, "num_experts_per_tok"),
    ("zero experts", {**MIXTRAL, "num_local_experts": 0}, "num_local_experts"),
    ("missing model_type", _without(LLAMA, "model_type"), "model_type"),
    ("unknown model_type", {**LLAMA, "model_type": "bert"}, "model_type"),
]


QWEN3 = _config("qwen3-8b")
GEMMA3 = _config("gemma-3-1b")
DEEPSEEK = _config("deepseek-v3")
_TYPES = ["sliding_attention"] * 26
MALFORMED += [
    ("qwen3 attention bias", {**QWEN3, "attention_bias": True}, "attention_bias"),
    ("qwen3 sliding", {**QWEN3, "use_sliding_window": True}, "use_sliding_window"),
    ("gemma relu", {**GEMMA3, "hidden_activation": "relu"}, "hidden_activation"),
    ("layer_types short", {**GEMMA3, "layer_types": _TYPES[:3]}, "layer_types"),
    (
        "layer_types irregular",
        {
            **GEMMA3,
            "layer_types": [
                *_TYPES[:2],
                "full_attention",
                *_TYPES[3:8],
                "full_attention",
                *_TYPES[9:],
            ],
        },
        "layer_types[5]",
    ),
    ("mla kv heads", {**DEEPSEEK, "num_key_value_heads": 16}, "num_key_value_heads"),
    ("moe every other layer", {**DEEPSEEK, "moe_layer_freq": 2}, "moe_layer_freq"),
    ("missing kv_lora_rank", _without(DEEPSEEK, "kv_lora_rank"), "kv_lora_rank"),
    ("all layers dense", {**DEEPSEEK, "first_k_dense_replace": 61}, "first_k_dense_replace"),
    ("rope wider than head", {**DEEPSEEK, "qk_rope_head_dim": 0}, "qk_rope_head_dim"),
    ("gemma3 multimodal", {**GEMMA3, "model_type": "gemma3"}, "model_type"),
]


@pytest.mark.parametrize(("case", "config", "key"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_config_names_the_key(case, config, key):
    err = _bad(config)
    assert err.field == f"config.json:{key}", case
    assert key in str(err)


def test_wrong_type_message_reads_well():
    err = _bad({**LLAMA, "hidden_size": "4096"})
    assert str(err) == "config.json:hidden_size = '4096': must be an integer"


def test_model_type_errors_list_supported_families():
    for config in (_without(LLAMA, "model_type"), {**LLAMA, "model_type": "bert"}):
        message = str(_bad(config))
        for family in ("gpt2", "llama", "mistral", "mixtral", "qwen2"):
            assert family in message


def test_not_a_mapping():
    with pytest.raises(SpecError):
        spec_from_hf_config([1, 2], "x")  # type: ignore[arg-type]


def _load_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_hf_config(str(path))
    return err.value


def test_file_missing(tmp_path):
    err = _load_error(tmp_path / "nope.json")
    assert "not found" in str(err) and "nope.json" in str(err)


def test_not_json_says_line_and_column(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096\n  "x": 1\n}\n')
    message = str(_load_error(path))
    assert "line 4" in message and "column 3" in message


def test_not_an_object(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2, 3]")
    assert "JSON object" in str(_load_error(path))


def test_not_utf8_and_empty_and_directory_without_config(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe\x00{")
    assert "UTF-8" in str(_load_error(bad)) or "JSON" in str(_load_error(bad))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert "line 1" in str(_load_error(empty))
    assert "not found" in str(_load_error(tmp_path))


def test_key_errors_from_a_file_name_the_file(tmp_path):
    path = tmp_path / "my-model.json"
    path.write_text(json.dumps(_without(LLAMA, "hidden_size")))
    err = _load_error(path)
    assert err.field == "my-model.json:hidden_size"
