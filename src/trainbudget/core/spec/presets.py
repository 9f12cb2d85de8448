"""Named architectures ("gpt2", "llama-2-7b", ...) as `ModelSpec` rows, each with its source.

GPT-2 and the open-weight models are typed from their Hugging Face `config.json`; GPT-3 from
Table 2.1 of Brown et al. 2020. `PUBLISHED_PARAMS` holds the exact published parameter counts
the presets are tested against; `PAPER_ROUNDED_PARAMS` holds GPT-3's rounded names and
`STATED_PARAMS` the counts model cards and reports state, at their printed precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, lookup
from trainbudget.core.spec.model_spec import ModelSpec

_HF = "https://huggingface.co/"
_GPT3_PAPER = "https://arxiv.org/abs/2005.14165"
_KERAS_HUB = "https://github.com/keras-team/keras-hub/blob/master/keras_hub/src/models/"
_HF_API = "https://huggingface.co/api/models/"


def _hf_config(repo: str) -> str:
    return f"{_HF}{repo}/blob/main/config.json"


def _gpt2(name: str, repo: str, d_model: int, n_layers: int, n_heads: int) -> ModelSpec:
    """A Hugging Face GPT-2 checkpoint: n_inner is null, so d_ff = 4 * n_embd."""
    return ModelSpec(
        name=name,
        vocab_size=50257,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        d_ff=4 * d_model,
        max_seq_len=1024,
        mlp="gelu",
        norm="layernorm",
        position="learned",
        tied_embeddings=True,
        bias=True,
        sources=(_hf_config(repo),),
    )


def _gpt3(name: str, n_layers: int, d_model: int, n_heads: int) -> ModelSpec:
    """A GPT-3 row: the GPT-2 architecture at context 2048 (Brown et al. 2020, section 2.1)."""
    return ModelSpec(
        name=name,
        vocab_size=50257,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        d_ff=4 * d_model,
        max_seq_len=2048,
        mlp="gelu",
        norm="layernorm",
        position="learned",
        tied_embeddings=True,
        bias=True,
        sources=(_GPT3_PAPER + " (Table 2.1)",),
    )


def _llama(
    name: str,
    repo: str,
    *,
    vocab: int,
    d_model: int,
    d_ff: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    max_seq_len: int,
    pretrain_seq_len: int = 0,
    n_experts: int = 0,
    experts_per_token: int = 0,
    head_dim: int = 0,
    qk_norm: bool = False,
    sliding_window: int = 0,
) -> ModelSpec:
    """A Llama-style config.json: RMSNorm, SwiGLU, RoPE, untied head, no biases."""
    return ModelSpec(
        name=name,
        vocab_size=vocab,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        max_seq_len=max_seq_len,
        pretrain_seq_len=pretrain_seq_len,
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=False,
        bias=False,
        n_experts=n_experts,
        experts_per_token=experts_per_token,
        head_dim=head_dim,
        qk_norm=qk_norm,
        sliding_window=sliding_window,
        sources=(_hf_config(repo),),
    )


def _gemma(
    name: str,
    repo: str,
    *,
    vocab: int,
    d_model: int,
    d_ff: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    max_seq_len: int,
    sliding_window: int,
    global_every: int,
    qk_norm: bool,
) -> ModelSpec:
    """A Gemma 2/3 config.json: RMSNorm before and after attention and the MLP, GeGLU, RoPE,
    tied head, no biases, local sliding-window layers with every global_every-th one global."""
    return ModelSpec(
        name=name,
        vocab_size=vocab,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        d_ff=d_ff,
        max_seq_len=max_seq_len,
        mlp="swiglu",
        gate_activation="gelu_tanh",
        norm="rmsnorm",
        post_norms=True,
        qk_norm=qk_norm,
        position="rope",
        tied_embeddings=True,
        sliding_window=sliding_window,
        global_every=global_every,
        sources=(_hf_config(repo),),
    )


# DeepSeek-V3 config.json: MLA (q_lora_rank 1536, kv_lora_rank 512, heads of 128 + 64 rotary
# for q and k, 128 for v), 3 dense layers (intermediate_size 18432), then 58 MoE layers of 256
# routed experts (top-8) plus 1 shared, each 2048 wide; topk_method noaux_tc (a router bias).
_DEEPSEEK_V3 = ModelSpec(
    name="deepseek-v3",
    vocab_size=129280,
    d_model=7168,
    n_layers=61,
    n_heads=128,
    n_kv_heads=128,
    head_dim=192,
    q_lora_rank=1536,
    kv_lora_rank=512,
    rope_head_dim=64,
    v_head_dim=128,
    d_ff=18432,
    max_seq_len=163840,
    # pre-trained at 4K, extended by YaRN to 32K then 128K (DeepSeek-V3 report,
    # arXiv:2412.19437, 4.2 and 4.3; config.json rope_scaling.original_max_position_embeddings)
    pretrain_seq_len=4096,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    tied_embeddings=False,
    n_experts=256,
    experts_per_token=8,
    n_shared_experts=1,
    d_ff_expert=2048,
    n_dense_layers=3,
    router_bias=True,
    sources=(_hf_config("deepseek-ai/DeepSeek-V3"),),
)


# fmt: off
_ROWS: tuple[ModelSpec, ...] = (
    # GPT-2: openai-community config.json files (n_embd, n_layer, n_head).
    _gpt2("gpt2", "openai-community/gpt2", 768, 12, 12),
    _gpt2("gpt2-medium", "openai-community/gpt2-medium", 1024, 24, 16),
    _gpt2("gpt2-large", "openai-community/gpt2-large", 1280, 36, 20),
    _gpt2("gpt2-xl", "openai-community/gpt2-xl", 1600, 48, 25),
    # GPT-3, Table 2.1 (n_layers, d_model, n_heads; the table's d_head is d_model / n_heads).
    _gpt3("gpt3-125m", 12, 768, 12),
    _gpt3("gpt3-350m", 24, 1024, 16),
    _gpt3("gpt3-760m", 24, 1536, 16),
    # The table lists 24 heads of d_head 128 for GPT-3 XL, but 24 * 128 = 3072 != d_model 2048.
    # We keep d_head 128 and use 16 heads (16 * 128 = 2048); the head count changes no parameter.
    _gpt3("gpt3-1.3b", 24, 2048, 16),
    _gpt3("gpt3-2.7b", 32, 2560, 32),
    _gpt3("gpt3-6.7b", 32, 4096, 32),
    # The table prints d_model 5140 for 13B, inconsistent with its own 40 heads x d_head 128 =
    # 5120; we use 5120. (The table's "13.0B" is reproduced by 5140: 12.95B; 5120 gives 12.85B.)
    _gpt3("gpt3-13b", 40, 5120, 40),
    _gpt3("gpt3-175b", 96, 12288, 96),
    # Llama 2 (config.json: vocab 32000, max_position_embeddings 4096).
    _llama("llama-2-7b", "meta-llama/Llama-2-7b-hf", vocab=32000, d_model=4096, d_ff=11008,
           n_layers=32, n_heads=32, n_kv_heads=32, max_seq_len=4096),
    _llama("llama-2-13b", "meta-llama/Llama-2-13b-hf", vocab=32000, d_model=5120, d_ff=13824,
           n_layers=40, n_heads=40, n_kv_heads=40, max_seq_len=4096),
    _llama("llama-2-70b", "meta-llama/Llama-2-70b-hf", vocab=32000, d_model=8192, d_ff=28672,
           n_layers=80, n_heads=64, n_kv_heads=8, max_seq_len=4096),
    # Llama 3 (vocab 128256, context 8192); there is no Llama 3.0 405B: that row is Llama 3.1,
    # pre-trained at 8K and extended to 128K at the end (Llama 3 paper, arXiv:2407.21783,
    # 3.4.1-3.4.2; config.json rope_scaling.original_max_position_embeddings 8192).
    _llama("llama-3-8b", "meta-llama/Meta-Llama-3-8B", vocab=128256, d_model=4096, d_ff=14336,
           n_layers=32, n_heads=32, n_kv_heads=8, max_seq_len=8192),
    _llama("llama-3-70b", "meta-llama/Meta-Llama-3-70B", vocab=128256, d_model=8192,
           d_ff=28672, n_layers=80, n_heads=64, n_kv_heads=8, max_seq_len=8192),
    _llama("llama-3-405b", "meta-llama/Llama-3.1-405B", vocab=128256, d_model=16384,
           d_ff=53248, n_layers=126, n_heads=128, n_kv_heads=8, max_seq_len=131072,
           pretrain_seq_len=8192),
    # Mistral (every layer slides over 4096 tokens; no parameter depends on it; trained at a
    # context of 8192, Jiang et al. 2023, arXiv:2310.06825, Table 1) and Mixtral (8 experts,
    # top-2; sliding_window null; trained at 32K, arXiv:2401.04088, section 2).
    _llama("mistral-7b", "mistralai/Mistral-7B-v0.1", vocab=32000, d_model=4096, d_ff=14336,
           n_layers=32, n_heads=32, n_kv_heads=8, max_seq_len=32768, pretrain_seq_len=8192,
           sliding_window=4096),
    _llama("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", vocab=32000, d_model=4096,
           d_ff=14336, n_layers=32, n_heads=32, n_kv_heads=8, max_seq_len=32768,
           n_experts=8, experts_per_token=2),
    # Mistral NeMo: 32 heads of 128 (4096 wide) on a 5120-wide residual stream; "trained with
    # a 128k context window" (model card), though config.json allows 1024000.
    _llama("mistral-nemo", "mistralai/Mistral-Nemo-Base-2407", vocab=131072, d_model=5120,
           d_ff=14336, n_layers=40, n_heads=32, n_kv_heads=8, max_seq_len=1024000,
           pretrain_seq_len=131072, head_dim=128),
    # Qwen3 8B: QK-norm, no q/k/v biases (unlike Qwen2), untied head; pre-trained at 4,096
    # tokens (stages 1-2) before a 32,768-token stage (Qwen3 report, arXiv:2505.09388, 3.2).
    _llama("qwen3-8b", "Qwen/Qwen3-8B", vocab=151936, d_model=4096, d_ff=12288, n_layers=36,
           n_heads=32, n_kv_heads=8, max_seq_len=40960, pretrain_seq_len=4096, qk_norm=True),
    # Gemma 2 9B: sliding window 4096 on every other layer (layer 0 slides).
    _gemma("gemma-2-9b", "google/gemma-2-9b", vocab=256000, d_model=3584, d_ff=14336,
           n_layers=42, n_heads=16, n_kv_heads=8, head_dim=256, max_seq_len=8192,
           sliding_window=4096, global_every=2, qk_norm=False),
    # Gemma 3 1B (text only): 5 local layers of window 512 per global one, QK-norm.
    _gemma("gemma-3-1b", "google/gemma-3-1b-pt", vocab=262144, d_model=1152, d_ff=6912,
           n_layers=26, n_heads=4, n_kv_heads=1, head_dim=256, max_seq_len=32768,
           sliding_window=512, global_every=6, qk_norm=True),
    _DEEPSEEK_V3,
)
# fmt: on

PRESETS: Mapping[str, ModelSpec] = MappingProxyType({spec.name: spec for spec in _ROWS})
"""Preset name -> ModelSpec. Read-only."""


def get_preset(name: str) -> ModelSpec:
    """The preset called `name` (case ignored when unambiguous); an unknown name is a SpecError
    listing the known ones."""
    return lookup("model", name, PRESETS)


# Why two numbers differ from the Hugging Face "safetensors.total" shown on model pages:
# - GPT-2 checkpoints also store each layer's causal-mask buffer `attn.bias` (1024 x 1024),
#   so the page says 137M; the nn.Parameters are 124,439,808.
# - Llama 2 checkpoints also store each layer's rotary `inv_freq` buffer (d_head / 2 = 64
#   values), so safetensors.total is n_layers * 64 higher than the parameter count.
_HF_SAFETENSORS_LLAMA2 = "safetensors.total minus n_layers * 64 stored rotary inv_freq values"

_KH_GPT2 = _KERAS_HUB + "gpt2/gpt2_presets.py"
_KH_LLAMA = _KERAS_HUB + "llama/llama_presets.py"
_KH_LLAMA3 = _KERAS_HUB + "llama3/llama3_presets.py"
_KH_MISTRAL = _KERAS_HUB + "mistral/mistral_presets.py"
_KH_MIXTRAL = _KERAS_HUB + "mixtral/mixtral_presets.py"

# fmt: off
PUBLISHED_PARAMS: Mapping[str, tuple[int, str]] = MappingProxyType({
    "gpt2": (124_439_808, f"{_KH_GPT2} (gpt2_base_en params)"),
    "gpt2-medium": (354_823_168, f"{_KH_GPT2} (gpt2_medium_en params)"),
    "gpt2-large": (774_030_080, f"{_KH_GPT2} (gpt2_large_en params)"),
    "gpt2-xl": (1_557_611_200, f"{_KH_GPT2} (gpt2_extra_large_en params)"),
    "llama-2-7b": (6_738_415_616, f"{_KH_LLAMA} (llama2_7b_en params); {_HF_API}"
                   f"meta-llama/Llama-2-7b-hf: 6,738,417,664 = {_HF_SAFETENSORS_LLAMA2} (32 * 64)"),
    "llama-2-13b": (13_015_864_320, f"{_HF_API}meta-llama/Llama-2-13b-hf: 13,015,866,880 = "
                    f"{_HF_SAFETENSORS_LLAMA2} (40 * 64)"),
    "llama-2-70b": (68_976_648_192, f"{_HF_API}meta-llama/Llama-2-70b-hf: 68,976,653,312 = "
                    f"{_HF_SAFETENSORS_LLAMA2} (80 * 64)"),
    "llama-3-8b": (8_030_261_248, f"{_KH_LLAMA3} (llama3_8b_en params); "
                   f"{_HF_API}meta-llama/Llama-3.1-8B safetensors.total"),
    "llama-3-70b": (70_553_706_496, f"{_HF_API}meta-llama/Llama-3.1-70B safetensors.total "
                    "(same shapes as Meta-Llama-3-70B)"),
    "llama-3-405b": (405_853_388_800, f"{_HF_API}meta-llama/Llama-3.1-405B safetensors.total"),
    "mistral-7b": (7_241_732_096, f"{_KH_MISTRAL} (mistral_7b_en params)"),
    "mixtral-8x7b": (46_702_792_704, f"{_KH_MIXTRAL} (mixtral_8_7b_en params)"),
})
# fmt: on
"""Preset name -> (exact published total parameter count, where it is published)."""

# fmt: off
PAPER_ROUNDED_PARAMS: Mapping[str, tuple[int, int, str]] = MappingProxyType({
    name: (nominal, unit, _GPT3_PAPER + " Table 2.1 n_params " + printed)
    for name, nominal, unit, printed in (
        ("gpt3-125m", 125_000_000, 1_000_000, "125M"),
        ("gpt3-350m", 350_000_000, 1_000_000, "350M"),
        ("gpt3-760m", 760_000_000, 1_000_000, "760M"),
        ("gpt3-1.3b", 1_300_000_000, 100_000_000, "1.3B"),
        ("gpt3-2.7b", 2_700_000_000, 100_000_000, "2.7B"),
        ("gpt3-6.7b", 6_700_000_000, 100_000_000, "6.7B"),
        ("gpt3-13b", 13_000_000_000, 100_000_000, "13.0B"),
        ("gpt3-175b", 175_000_000_000, 100_000_000, "175.0B"),
    )
})
# fmt: on
"""GPT-3 name -> (the paper's rounded n_params, the unit of its last printed digit, source).

The paper publishes no exact counts. Exact counts of the architecture as tabulated round to
the printed value for 125M, 760M, 1.3B, 2.7B and 6.7B, but not for 350M (355.9M), 13.0B
(12.85B with d_model 5120) or 175.0B (174.6B); tests pin those deviations.
"""


@dataclass(frozen=True, kw_only=True)
class StatedCount:
    """A parameter count as a model card or report prints it."""

    part: str
    """What is counted: 'total'; 'non_embedding' (total minus the token embedding and an
    untied head); 'embedding' (the token embedding); 'activated' (the matmul parameters one
    token uses, input embedding excluded, as DeepSeek counts its 37B)."""
    value: int
    """The printed number, in parameters ("8.2B" -> 8_200_000_000)."""
    unit: int
    """The unit of its last printed digit ("8.2B" -> 100_000_000; an exact count -> 1)."""
    source: str


STATED_PARTS = ("total", "non_embedding", "embedding", "activated")

_QWEN3_CARD = _HF + "Qwen/Qwen3-8B (model card, Model Overview)"
_NEMO_CARD = _HF + "mistralai/Mistral-Nemo-Base-2407 (model card: 'of 12B parameters')"
_MISTRAL_CARD = _HF + "mistralai/Mistral-7B-v0.1 (model card: 'with 7 billion parameters')"
_GEMMA2_REPORT = "https://arxiv.org/abs/2408.00118 (Gemma 2 report, Table 1)"
_GEMMA3_REPORT = "https://arxiv.org/abs/2503.19786 (Gemma 3 report, Table 1)"
_DEEPSEEK_WEIGHTS = (
    "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md (main model, "
    "without the 11.5B-parameter MTP module)"
)

# fmt: off
STATED_PARAMS: Mapping[str, tuple[StatedCount, ...]] = MappingProxyType({
    "qwen3-8b": (
        StatedCount(part="total", value=8_200_000_000, unit=100_000_000, source=_QWEN3_CARD),
        StatedCount(part="non_embedding", value=6_950_000_000, unit=10_000_000,
                    source=_QWEN3_CARD),
    ),
    "mistral-nemo": (
        StatedCount(part="total", value=12_000_000_000, unit=1_000_000_000, source=_NEMO_CARD),
    ),
    "mistral-7b": (
        StatedCount(part="total", value=7_000_000_000, unit=1_000_000_000,
                    source=_MISTRAL_CARD),
    ),
    "gemma-2-9b": (
        StatedCount(part="non_embedding", value=8_324_201_984, unit=1, source=_GEMMA2_REPORT),
    ),
    "gemma-3-1b": (
        StatedCount(part="embedding", value=302_000_000, unit=1_000_000, source=_GEMMA3_REPORT),
        StatedCount(part="non_embedding", value=698_000_000, unit=1_000_000,
                    source=_GEMMA3_REPORT),
    ),
    "deepseek-v3": (
        StatedCount(part="total", value=671_000_000_000, unit=1_000_000_000,
                    source=_DEEPSEEK_WEIGHTS),
        StatedCount(part="activated", value=36_600_000_000, unit=100_000_000,
                    source=_DEEPSEEK_WEIGHTS + "; 'including 0.9B for the output Head'"),
    ),
})
# fmt: on
"""Preset name -> the counts its model card or report states, each at its printed precision."""


def _check_table() -> None:
    """Import-time guard: every published/rounded/stated count names a preset."""
    for name, counts in STATED_PARAMS.items():
        for count in counts:
            if count.part not in STATED_PARTS:
                raise SpecError(f"STATED_PARAMS[{name!r}].part", count.part, "unknown part")
    for table in (PUBLISHED_PARAMS, PAPER_ROUNDED_PARAMS, STATED_PARAMS):
        for name in table:
            if name not in PRESETS:
                raise SpecError("presets", name, "count recorded for an unknown preset")


_check_table()
