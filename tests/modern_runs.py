"""The newer sources' rows (published/nemo_perf.py, nemo_long_context.py, megatron_bridge.py,
automodel.py, nanotron.py, speedrun.py, and for item 6 internlm.py, nanochat.py,
mlengineering.py, llmc.py, accelerate_fp8.py and flagperf.py) and the per-row tables that
tests/published/test_published_runs.py checks every row against."""

from trainbudget.published.automodel import AUTOMODEL
from trainbudget.published.nanotron import NANOTRON
from trainbudget.published.nvidia.megatron_bridge import BRIDGE_PERF
from trainbudget.published.nvidia.nemo_long_context import NEMO_LONG_CONTEXT
from trainbudget.published.nvidia.nemo_perf import NEMO_PERF_2407
from trainbudget.published.runs.accelerate_fp8 import ACCELERATE_FP8
from trainbudget.published.runs.flagperf import FLAGPERF
from trainbudget.published.runs.internlm import INTERNLM
from trainbudget.published.runs.kempnerforge import KEMPNERFORGE
from trainbudget.published.runs.llmc import LLMC
from trainbudget.published.runs.mlengineering import MLENGINEERING
from trainbudget.published.runs.nanochat import NANOCHAT
from trainbudget.published.runs.xtuner import XTUNER
from trainbudget.published.speedrun import SPEEDRUN

# the rows tests/published/test_modern_runs.py counts (issue "Right on runs nobody tuned for")
MODERN = (*NEMO_PERF_2407, *NEMO_LONG_CONTEXT, *BRIDGE_PERF, *AUTOMODEL, *NANOTRON, *SPEEDRUN)
# the rows added for its item 6, each source with its own tests file in tests/published/
ITEM6 = (
    *INTERNLM,
    *NANOCHAT,
    *MLENGINEERING,
    *LLMC,
    *ACCELERATE_FP8,
    *FLAGPERF,
    *XTUNER,
    *KEMPNERFORGE,
)
NEW = (*MODERN, *ITEM6)

# run id prefix -> source key (for test_published_runs.SOURCE_KEYS)
SOURCE_KEYS_NEW = {
    "nemo2407-": "nvidia-nemo-perf-2407",
    "nemo-longctx-": "nvidia-nemo-long-context",
    "mbridge-": "nvidia-megatron-bridge-perf",
    "automodel-": "nvidia-automodel-perf",
    "nanotron-": "huggingface-nanotron-bench",
    "speedrun-": "jordan-modded-nanogpt",
    "internlm-": "internlm-train-performance",
    "nanochat-": "karpathy-nanochat",
    "mleng-": "bekman-ml-engineering",
    "llmc-": "karpathy-llmc",
    "accelerate-": "huggingface-accelerate-fsdp2-fp8",
    "flagperf-": "baai-flagperf",
}
# run id prefix -> (position, norm) (for test_published_runs.POSITION_NORM)
POSITION_NORM_NEW = {
    "nemo2407-gpt3-": ("learned", "layernorm"),  # NeMo megatron_gpt learned_absolute default
    "nemo2407-nemotron-": ("rope", "layernorm"),  # layernorm1p, rotary_percentage 0.5
    "nemo2407-llama": ("rope", "rmsnorm"),
    "nemo-longctx-": ("rope", "rmsnorm"),
    "mbridge-": ("rope", "rmsnorm"),
    "automodel-": ("rope", "rmsnorm"),
    "nanotron-": ("rope", "rmsnorm"),  # nanotron LlamaModel
    "speedrun-llmc-": ("learned", "layernorm"),  # llm.c GPT-2
    "speedrun-adamw-": ("rope", "rmsnorm"),  # weightless F.rms_norm, rotary
    "speedrun-muon-": ("rope", "rmsnorm"),
    "internlm-": ("rope", "rmsnorm"),  # InternLM configs: norm_type="rmsnorm", rotary
    "nanochat-": ("rope", "rmsnorm"),  # weightless F.rms_norm, rotary
    "mleng-": ("rope", "rmsnorm"),  # Hugging Face Llama-3.1-8B
    "llmc-": ("learned", "layernorm"),  # llm.c GPT-2
    "accelerate-": ("rope", "rmsnorm"),  # Hugging Face Llama
    "flagperf-": ("rope", "rmsnorm"),  # Megatron-Core --normalization RMSNorm, rotary
}
# run -> (n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab, mlp, tied, bias) for the runs that
# reuse a preset (for test_published_runs.SOURCE_DIMS), and the fields overriding it (OVERRIDES)
_L2_7B = (32, 4096, 32, 32, 11008, 32000, "swiglu", False, False)
_L3_8B = (32, 4096, 32, 8, 14336, 128256, "swiglu", False, False)
_L3_70B = (80, 8192, 64, 8, 28672, 128256, "swiglu", False, False)
# meta-llama/Llama-3.1-405B config.json: 126 layers, hidden 16384, 128 heads, 8 kv heads,
# intermediate 53248
_L31_405B = (126, 16384, 128, 8, 53248, 128256, "swiglu", False, False)
SOURCE_DIMS_NEW = {
    # gpt3_175b.yaml; GPT-2 BPE padded to a multiple of 128 * TP 4
    "nemo2407-gpt3-175b-128gpu": (96, 12288, 96, 96, 49152, 50688, "gelu", True, True),
    "nemo2407-llama2-7b-8gpu": _L2_7B,
    "nemo2407-llama2-13b-16gpu": (40, 5120, 40, 40, 13824, 32000, "swiglu", False, False),
    "nemo2407-llama2-70b-64gpu": (80, 8192, 64, 8, 28672, 32000, "swiglu", False, False),
    # nemotron_8b.yaml: GPT-3 6.7B's shapes, Nemotron vocabulary, untied, no bias
    "nemo2407-nemotron-8b-64gpu": (32, 4096, 32, 32, 16384, 256000, "gelu", False, False),
    "nemo2407-llama3-8b-8gpu": _L3_8B,
    "nemo2407-llama3-70b-64gpu": _L3_70B,
    **{r.id: _L2_7B for r in NEMO_LONG_CONTEXT if "llama2" in r.id},
    **{r.id: _L3_8B for r in NEMO_LONG_CONTEXT if "llama3" in r.id},
    "mbridge-2511-llama3-8b-h100-8gpu": _L3_8B,
    "mbridge-2511-llama3-70b-h100-64gpu": _L3_70B,
    "mbridge-2511-llama3-8b-b200-8gpu": _L3_8B,
    "mbridge-2604-llama3-70b-h100-64gpu": _L3_70B,
    "mbridge-2511-llama31-405b-h100-1024gpu": _L31_405B,
    "mbridge-2511-llama31-405b-b200-128gpu": _L31_405B,
    "mbridge-2606-llama31-405b-h100-1024gpu": _L31_405B,
    "automodel-llama31-70b-h100-64gpu": _L3_70B,
    # llm.c pads GPT-2's 50257 to 50304
    "speedrun-llmc-gpt2-124m-8gpu": (12, 768, 12, 12, 3072, 50304, "gelu", True, True),
    # InternLM configs/7B_sft.py: Llama 2 7B's shapes (MLP ratio 8/3 -> 11008), vocabulary 103168
    **{r.id: (32, 4096, 32, 32, 11008, 103168, "swiglu", False, False) for r in INTERNLM},
    **{r.id: _L3_8B for r in MLENGINEERING},  # Llama 3.1 8B: Llama 3 8B's shapes
    # llm.c pads GPT-2's 50257 to 50304
    "llmc-gpt2-124m-8gpu": (12, 768, 12, 12, 3072, 50304, "gelu", True, True),
    "llmc-gpt2-350m-8gpu": (24, 1024, 16, 16, 4096, 50304, "gelu", True, True),
    **{r.id: _L3_8B for r in ACCELERATE_FP8},  # Hermes-3-Llama-3.1-8B's config
    **{r.id: _L3_8B if "-8b-" in r.id else _L3_70B for r in FLAGPERF},  # pretrain_llama3.sh
}
OVERRIDES_NEW = {
    "nemo2407-gpt3-175b-128gpu": {"vocab_size"},
    "nemo2407-nemotron-8b-64gpu": {
        "vocab_size", "max_seq_len", "position", "tied_embeddings", "bias",
    },
    "speedrun-llmc-gpt2-124m-8gpu": {"vocab_size"},
    **{r.id: {"vocab_size"} for r in INTERNLM},
    **{r.id: {"vocab_size"} for r in LLMC},
}  # fmt: skip
