"""NVIDIA's published NeMo performance pages on DGX H100 and DGX B200, FP8: the NeMo 24.07
"Performance Benchmarks" table here; the NeMo "Long Sequence Performance" page
(`nemo_long_context`) and the Megatron-Bridge "Performance" summary (`megatron_bridge`) beside
it, on this module's FLOP count and layout helper.

Three pages, three source keys (each is held out on its own), one family: NeMo on Megatron-Core
with Transformer Engine FP8 (per-tensor delayed scaling in 24.x, "FP8-CS" current scaling in
25.x). Every table states the model, GPU count, global and micro batch, sequence length and
the TP / PP / CP / VP layout; sequence parallelism, recomputation and the optimizer sharding come
from the recipe files NVIDIA ships beside each page (named in each run's notes).

The pages give tokens/s/GPU (scored) and "Model TFLOP/s/GPU". Their FLOP count is NeMo's
formula (`nemo_flops_per_token` below, FLOP_CONVENTIONS 'nemo-dgxc'); from August 2025 (NeMo
commit 6251117f4c, "Discount FLOPs in dot-product att") NeMo and Megatron-Bridge halve its
attention term for causal masks ('nemo-causal'). The long-sequence page gives TFLOP/s/GPU only:
its runs are recorded in that unit and need validation.py to convert 'nemo-dgxc' (the test
checks the formula against every 24.07 row, where both figures are given).
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

# NeMo's own vocabulary in its FLOP formulas (nemo/collections/common/parts/perf_metrics_utils.py
# LLM_VOCAB_SIZE_MAP), whatever the executed (padded) vocabulary.
NEMO_FLOPS_VOCAB = {"gpt3": 51200, "llama2": 32000, "llama3": 128256, "nemotron": 256000}


def nemo_flops_per_token(
    model: ModelSpec, seq_len: int, *, vocab: int | None = None, causal: bool = False
) -> float:
    """NeMo's model FLOPs per token, forward and backward (nemo/utils/flops_formulas.py, the
    'llama2'/'llama3'/'nemotron'/'gpt3' functions, which are one formula):
    12*l*h^2*(1 + kv/heads + s/h) + 3*2*l*(ffn matrices)*h + 6*V*h, with the s/h attention term
    halved when `causal` (NeMo from 2025-08-09, Megatron-Bridge). Gated MLPs have three d_ff x h
    matrices (18*l*ffn*h), non-gated two (12*l*ffn*h); V is NeMo's vocabulary for the family."""
    h, layers, ffn = model.d_model, model.n_layers, model.d_ff
    kv_ratio = (model.n_kv_heads or model.n_heads) / model.n_heads
    attention = 12 * layers * h * h * (1 + kv_ratio + (0.5 if causal else 1.0) * seq_len / h)
    mlp = (18 if model.mlp == "swiglu" else 12) * layers * ffn * h
    return attention + mlp + 6 * (vocab or model.vocab_size) * h


def nemo_layout(
    tp: int,
    pp: int,
    dp: int,
    *,
    cp: int = 1,
    vpp: int = 1,
    micro: int = 1,
    batch: int,
    recompute: str = "none",
    zero: int = 1,
    embedding_and_loss_in_split: bool = False,
) -> Layout:
    """A NeMo layout: sequence parallelism exactly when TP > 1 (every recipe here), fused
    attention (Transformer Engine), the distributed optimizer (zero=1) unless stated; the
    embedding and the loss counted as layers of the pipeline split where the recipe says so."""
    return Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sp=tp > 1, recompute=recompute, zero=zero,
        micro_batch=micro, global_batch=batch, flash_attention=True,
        embedding_in_pp_split=embedding_and_loss_in_split,
        loss_in_pp_split=embedding_and_loss_in_split,
    )  # fmt: skip


NEMO_FRAMEWORK = (
    "the page's title and setup: 'NVIDIA NeMo Framework', NeMo container (Megatron-Core)"
)

# ---- models the presets lack (NeMo-Framework-Launcher launcher_scripts/conf/training/*.yaml) --
_LAUNCHER = "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training"


def _nemo_gpt3(size: str, n_layers: int, d_model: int, n_heads: int, vocab: int) -> ModelSpec:
    return architecture(
        name=f"nemo-gpt3-{size}",
        source=f"{_LAUNCHER}/gpt3/{size}.yaml (num_layers, hidden_size, num_attention_heads, "
        "ffn 4h, GPT2BPETokenizer padded to a multiple of 128*TP); NeMo megatron_gpt "
        "defaults: learned_absolute positions, LayerNorm, biases, tied embeddings, dropout 0.1",
        vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=4 * d_model, max_seq_len=2048, mlp="gelu", norm="layernorm",
        position="learned", tied_embeddings=True, bias=True, dropout=True,
    )  # fmt: skip


def _nemotron(size: str, n_layers: int, d_model: int, n_heads: int, n_kv: int) -> ModelSpec:
    return architecture(
        name=f"nemotron-{size}",
        source=f"{_LAUNCHER}/nemotron/nemotron_{size}.yaml: squared-relu 4h MLP (two "
        "matrices: mlp='gelu'), layernorm1p, rope (rotary_percentage 0.5), bias false, "
        "untied, num_query_groups as given, Nemotron 256k SentencePiece vocabulary",
        vocab_size=256000, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv, d_ff=4 * d_model, max_seq_len=4096, mlp="gelu", norm="layernorm",
        position="rope", tied_embeddings=False, bias=False, dropout=False,
    )  # fmt: skip


# ==============================================================================================
# 1. NeMo 24.07 "Performance Benchmarks", Pretraining, FP8, DGX-H100.
# NVIDIA/NeMo docs/source/performance/performance_summary.md at commit 8e3d65dcfe (2024-09-09,
# "24.07 perf numbers"; the page's last version before it moved to docs.nvidia.com):
# "The results in the table below show pre-training performance for various tasks at FP8
#  precision. Container: NeMo24.07, System: DGX-H100"
# | Model | #-GPUs | GBS | MBS | Sequence Length | TP | PP | CP | VP | Tokens / sec / GPU |
#   Model TFLOP / sec / GPU | Est. time to train ...
# | GPT3-5B | 64 | 2048 | 4 | 2048 | 1 | 1 | 1 | 1 | 23406 | 765 |
# | GPT3-20B | 64 | 256 | 2 | 2048 | 2 | 1 | 1 | 1 | 5851 | 750 |
# | GPT3-175B | 128 | 256 | 1 | 2048 | 4 | 8 | 1 | 6 | 716 | 771 |
# | LLAMA2-7B | 8 | 128 | 1 | 4096 | 1 | 1 | 1 | 1 | 16934 | 780 |
# | LLAMA2-13B | 16 | 128 | 1 | 4096 | 1 | 4 | 1 | 10 | 8715 | 760 |
# | LLAMA2-70B | 64 | 128 | 1 | 4096 | 4 | 4 | 1 | 20 | 1728 | 768 |
# | Nemotron-8B | 64 | 256 | 4 | 4096 | 2 | 1 | 1 | 1 | 12507 | 643 |
# | Nemotron-22B | 64 | 256 | 2 | 4096 | 2 | 4 | 1 | 10 | 4312 | 562 |
# | Nemotron-340B | 128 | 32 | 1 | 4096 | 8 | 8 | 1 | 12 | 326 | 686 |
# | LLAMA3-8B | 8 | 128 | 1 | 8192 | 1 | 1 | 2 | 1 | 12273 | 711 |
# | LLAMA3-70B | 64 | 128 | 1 | 8192 | 4 | 4 | 2 | 5 | 1524 | 734 |
# Left out: the GPT3-175B 512-GPU row, whose TFLOP/s links to MLPerf (a held-out source).
# ==============================================================================================
_P2407_SRC = (
    "NVIDIA NeMo 24.07 'Performance Benchmarks', Pretraining table (FP8, DGX-H100), "
    "github.com/NVIDIA/NeMo docs/source/performance/performance_summary.md at commit "
    "8e3d65dcfe (2024-09-09), row '{row}'."
)
_P2407_NOTES = (
    "H100 SXM 80GB, 8 per node (DGX-H100). GPUs, GBS, MBS, sequence, TP, PP, CP, VP, tokens/s "
    "and TFLOP/s from the table; DP = GPUs / (TP*PP*CP), GA = GBS / (MBS*DP). FP8 (Transformer "
    "Engine, hybrid E4M3/E5M2) as the table's caption states. Not stated, taken from the "
    "matching NeMo-Framework-Launcher training yaml (launcher_scripts/conf/training/...): "
    "sequence_parallel (true exactly when TP > 1), activations_checkpoint_granularity (null "
    "unless said), optim distributed_fused_adam (Apex's DistributedFusedAdam, zero=1; the "
    "launcher moved to mcore_distributed_optim only in December 2024), ub_tp_comm_overlap (TP "
    "communication overlap: tp_comm_overlap). The optimizer's dtypes (framework row): "
    "grad_sync_dtype bf16 as the launcher's H100 FP8 example scripts for GPT-3 and Llama pass "
    "it (examples/training/*/h100/*_fp8*.sh, tag 24.07; nemo-1-bf16-grads), fp32 for Nemotron "
    "8B/22B whose scripts do not (nemo-1), bf16 state for Nemotron 340B as its yaml sets "
    "(nemo-1-bf16-adam). The yaml's GBS differs from the "
    "table's (the table was run with its own GBS). TFLOP/s/GPU counts NeMo's non-causal "
    "formula (nemo-dgxc; the test checks it against tokens/s for every row)."
)
_P2407_ASSUMED = frozenset(
    {"layout.sp", "layout.recompute", "layout.zero", "tp_comm_overlap", "framework"}
)

_GPT3_5B = _nemo_gpt3("5b", 24, 4096, 32, 50304)
_GPT3_20B = _nemo_gpt3("20b", 44, 6144, 48, 50432)
# Nemotron-3 8B has GPT-3 6.7B's shapes (32 layers, 4096 wide, 32 heads, ffn 16384): that preset,
# with Nemotron's vocabulary, RoPE, no biases and an untied head (nemotron/nemotron_8b.yaml).
_NEMOTRON_8B = preset(
    "gpt3-6.7b", vocab_size=256000, max_seq_len=4096, position="rope", tied_embeddings=False,
    bias=False,
)  # fmt: skip
_NEMOTRON_22B = _nemotron("22b", 40, 6144, 48, 48)
_NEMOTRON_340B = _nemotron("340b", 96, 18432, 96, 8)


def _p2407(
    run_id: str,
    row: str,
    model: ModelSpec,
    seq_len: int,
    n_gpus: int,
    layout: Layout,
    tokens: float,
    tflops: float,
    note: str,
    assumed: frozenset[str] = frozenset(),
    *,
    tp_overlap: bool = False,
    framework: str = "nemo-1-bf16-grads",
) -> PublishedRun:
    return PublishedRun(
        id=run_id, source=_P2407_SRC.format(row=row), source_key="nvidia-nemo-perf-2407",
        framework=framework, framework_source=NEMO_FRAMEWORK, model=model, seq_len=seq_len,
        gpu="h100-sxm", n_gpus=n_gpus, gpus_per_node=8, layout=layout, precision="fp8",
        tp_comm_overlap=tp_overlap,
        measured=Measurement(
            tokens_per_second_per_gpu=tokens, tflops_per_second_per_gpu=tflops,
            flops_convention="nemo-dgxc",
        ),
        assumed=_P2407_ASSUMED | assumed, notes=_P2407_NOTES + " " + note,
    )  # fmt: skip


_GPT3_NOTE = (
    "Model from {yaml}: GPT-2 BPE 50257 padded to a multiple of 128*TP = {v} (derived from "
    "make_vocab_size_divisible_by 128); positions, norm, biases, tying and dropout 0.1 are "
    "NeMo megatron_gpt defaults the yaml does not override."
)
_LLAMA_NOTE = "Model: the {p} preset (the yaml's shapes: {yaml})."
_NEMOTRON_NOTE = (
    "Model from {yaml} (MHA unless num_query_groups is set); vocabulary 256000 is the "
    "Nemotron tokenizer (the yaml names no size; NeMo's FLOP formula uses 256000)."
)

# fmt: off
NEMO_PERF_2407: tuple[PublishedRun, ...] = (
    _p2407("nemo2407-gpt3-5b-64gpu", "GPT3-5B", _GPT3_5B, 2048, 64,
           nemo_layout(1, 1, 64, micro=4, batch=2048), 23406, 765,
           _GPT3_NOTE.format(yaml="gpt3/5b.yaml", v=50304) + " GA = 2048 / (4*64) = 8.",
           frozenset({"model.position", "model.bias", "model.tied_embeddings",
                      "model.dropout"})),
    _p2407("nemo2407-gpt3-20b-64gpu", "GPT3-20B", _GPT3_20B, 2048, 64,
           nemo_layout(2, 1, 32, micro=2, batch=256), 5851, 750,
           _GPT3_NOTE.format(yaml="gpt3/20b.yaml", v=50432) + " GA = 256 / (2*32) = 4. The "
           "yaml sets ub_tp_comm_overlap: True (TP communication overlap).",
           frozenset({"model.position", "model.bias", "model.tied_embeddings",
                      "model.dropout"}),
           tp_overlap=True),
    _p2407("nemo2407-gpt3-175b-128gpu", "GPT3-175B", preset("gpt3-175b", vocab_size=50688),
           2048, 128, nemo_layout(4, 8, 4, vpp=6, batch=256), 716, 771,
           "GPT-3 175B's dimensions (preset) with GPT-2 BPE padded to a multiple of 128*TP = "
           "512 -> 50688; learned positions, LayerNorm, biases, tied embeddings as NeMo's "
           "gpt3/175b.yaml leaves them. DP 4, GA 64, 96 / (8*6) = 2 layers per chunk.",
           frozenset({"model.position", "model.bias", "model.tied_embeddings"})),
    _p2407("nemo2407-llama2-7b-8gpu", "LLAMA2-7B", preset("llama-2-7b"), 4096, 8,
           nemo_layout(1, 1, 8, batch=128), 16934, 780,
           _LLAMA_NOTE.format(p="llama-2-7b", yaml="llama/llama2_7b.yaml") + " GA 16."),
    _p2407("nemo2407-llama2-13b-16gpu", "LLAMA2-13B", preset("llama-2-13b"), 4096, 16,
           nemo_layout(1, 4, 4, vpp=10, batch=128), 8715, 760,
           _LLAMA_NOTE.format(p="llama-2-13b", yaml="llama/llama2_13b.yaml")
           + " DP 4, GA 32, one layer per virtual stage (40 / (4*10))."),
    _p2407("nemo2407-llama2-70b-64gpu", "LLAMA2-70B", preset("llama-2-70b"), 4096, 64,
           nemo_layout(4, 4, 4, vpp=20, batch=128), 1728, 768,
           _LLAMA_NOTE.format(p="llama-2-70b", yaml="llama/llama2_70b.yaml")
           + " DP 4, GA 32, one layer per virtual stage; ub_tp_comm_overlap true in the yaml.",
           tp_overlap=True),
    _p2407("nemo2407-nemotron-8b-64gpu", "Nemotron-8B", _NEMOTRON_8B, 4096, 64,
           nemo_layout(2, 1, 32, micro=4, batch=256), 12507, 643,
           _NEMOTRON_NOTE.format(yaml="nemotron/nemotron_8b.yaml") + " DP 32, GA 2.",
           frozenset({"model.vocab_size"}),
           tp_overlap=True, framework="nemo-1"),
    _p2407("nemo2407-nemotron-22b-64gpu", "Nemotron-22B", _NEMOTRON_22B, 4096, 64,
           nemo_layout(2, 4, 8, vpp=10, micro=2, batch=256), 4312, 562,
           _NEMOTRON_NOTE.format(yaml="nemotron/nemotron_22b.yaml") + " DP 8, GA 16.",
           frozenset({"model.vocab_size"}),
           tp_overlap=True, framework="nemo-1"),
    _p2407("nemo2407-nemotron-340b-128gpu", "Nemotron-340B", _NEMOTRON_340B, 4096, 128,
           nemo_layout(8, 8, 2, vpp=12, batch=32, recompute="selective"), 326, 686,
           _NEMOTRON_NOTE.format(yaml="nemotron/nemotron_340b.yaml") + " 8 query groups; the "
           "yaml sets activations_checkpoint_granularity: selective. DP 2, GA 16.",
           frozenset({"model.vocab_size"}),
           tp_overlap=True, framework="nemo-1-bf16-adam"),
    _p2407("nemo2407-llama3-8b-8gpu", "LLAMA3-8B", preset("llama-3-8b"), 8192, 8,
           nemo_layout(1, 1, 4, cp=2, batch=128), 12273, 711,
           _LLAMA_NOTE.format(p="llama-3-8b", yaml="llama/llama3_8b.yaml")
           + " CP 2, DP 4, GA 32."),
    _p2407("nemo2407-llama3-70b-64gpu", "LLAMA3-70B", preset("llama-3-70b"), 8192, 64,
           nemo_layout(4, 4, 2, cp=2, vpp=5, batch=128), 1524, 734,
           _LLAMA_NOTE.format(p="llama-3-70b", yaml="llama/llama3_70b.yaml")
           + " CP 2, DP 2, GA 64, 4 layers per virtual stage.",
           tp_overlap=True),
)
# fmt: on
