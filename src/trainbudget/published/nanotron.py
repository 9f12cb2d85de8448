"""Hugging Face nanotron's scaling benchmarks on H100 (the Ultra-Scale Playbook's sweep): the
best configuration found for each of four Llama-style models on 1 to 64 nodes of 8 H100, with
its MFU and peak memory.

Source: github.com/huggingface/nanotron, docs/benchmark_summary.svg (commit c2528430,
2025-03-10, "add benchs"; shown in the README's "Benchmarks" section: "the best configurations
we discovered for each model size and node count in nanotron v0.5, highlighting optimal MFU
(Model FLOPS Utilization) and memory usage"). The figure is a matplotlib SVG whose text is kept
as comments: two heat maps over (model size, number of nodes), the left one "MFU and Memory Usage
for Best Configurations" (MFU in %, then memory in GB), the right one "Best Configuration by
Model Size and Number of Nodes" (DP, TP, PP, GAS, MBS, ZeRO stage). The cell positions in the
SVG tie each number to its model and node count (the test re-reads them).

The four models are those of the sweep script that generated the runs (scripts/scaling_
benchmarks.py, commit e24d2483): (layers, hidden, heads, ffn) = (16, 2048, 32, 8192) "1.34B",
(28, 3072, 32, 8192) "3.57B", (32, 4096, 32, 14336) "8.86B", (80, 8192, 64, 28672) "80B";
multi-head attention (NUM_KEY_VALUE_HEADS = None), vocabulary 131072, embeddings tied below
d_ff 10000, sequence 4096; its estimate_num_params gives 1.342B, 3.573B, 8.859B and 80.0B, the
figure's axis labels. Every best configuration has DP*GAS*MBS = 256 sequences: the Playbook's
1M-token batch (256 x 4096).

MFU is nanotron's model FLOPs (nanotron/models/llama.py get_flops: 3 x (decoder matmuls + the
attention's two s x s products, non-causal + the LM head) per token, i.e. PaLM's 6N + 12*l*h*s
with N the matmul parameters) over the H100's dense BF16 peak: FLOP_CONVENTIONS 'palm'.
"""

from __future__ import annotations

import itertools

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import GiB
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture

VOCAB = 131072
SEQ_LEN = 4096
# name -> (layers, hidden, heads, ffn), scripts/scaling_benchmarks.py model_configs comments
MODEL_SHAPES = {
    "1.34b": (16, 2048, 32, 8192),
    "3.57b": (28, 3072, 32, 8192),
    "8.86b": (32, 4096, 32, 14336),
    "80b": (80, 8192, 64, 28672),
}


def _model(size: str) -> ModelSpec:
    layers, hidden, heads, ffn = MODEL_SHAPES[size]
    return architecture(
        name=f"nanotron-bench-{size}",
        source="huggingface/nanotron scripts/scaling_benchmarks.py (model_configs, "
        "NUM_KEY_VALUE_HEADS None, VOCAB_SIZES [131072], tie_word_embeddings when "
        "intermediate_size < 10000) on examples/config_tiny_llama_bench.yaml (Llama: RMSNorm, "
        "RoPE, SiLU-gated MLP, no biases)",
        vocab_size=VOCAB, d_model=hidden, n_layers=layers, n_heads=heads, n_kv_heads=heads,
        d_ff=ffn, max_seq_len=SEQ_LEN, mlp="swiglu", norm="rmsnorm", position="rope",
        tied_embeddings=ffn < 10_000, bias=False, dropout=False,
    )  # fmt: skip


def nanotron_pp_split(size: str, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline stage as nanotron places them (nanotron/models/base.py
    build_model): pipeline blocks in order [embedding, L decoder layers, final norm, lm_head,
    cast, loss] with costs from LlamaModel.get_block_compute_costs (a decoder layer
    4*heads*d_head*h + 3*ffn*h, the lm_head V*h, the rest 0); a block goes to the current rank,
    which moves on once the running cost passes that rank's share of the total."""
    layers, hidden, heads, ffn = MODEL_SHAPES[size]
    layer_cost = 4 * heads * (hidden // heads) * hidden + 3 * ffn * hidden
    costs = [0] + [layer_cost] * layers + [0, VOCAB * hidden, 0, 0]
    is_layer = [False] + [True] * layers + [False] * 4
    total = sum(costs)
    counts = [0] * pp
    rank = 0
    for cumulative, layer in zip(itertools.accumulate(costs), is_layer, strict=True):
        counts[rank] += layer
        if cumulative > total * (rank + 1) / pp:
            rank += 1
    return tuple(counts)


# (nodes, model, DP, TP, PP, GAS, MBS, ZeRO, MFU %, memory GB) in the figure's row order (64
# nodes at the top, the models left to right); the 80B model has no cell at 1 and 2 nodes.
SUMMARY = (
    (64, "1.34b", 128, 2, 2, 1, 2, 1, 5.25, 8.40),
    (64, "3.57b", 128, 4, 1, 1, 2, 1, 10.49, 16.42),
    (64, "8.86b", 128, 4, 1, 1, 2, 0, 18.69, 57.76),
    (64, "80b", 32, 16, 1, 4, 2, 1, 17.79, 53.46),
    (32, "1.34b", 64, 4, 1, 1, 4, 0, 23.20, 19.57),
    (32, "3.57b", 64, 4, 1, 1, 4, 0, 26.77, 38.98),
    (32, "8.86b", 32, 8, 1, 1, 8, 0, 32.71, 63.39),
    (32, "80b", 4, 4, 16, 64, 1, 1, 30.75, 64.21),
    (16, "1.34b", 64, 2, 1, 1, 4, 0, 29.46, 38.84),
    (16, "3.57b", 32, 4, 1, 1, 8, 0, 34.59, 66.20),
    (16, "8.86b", 16, 8, 1, 2, 8, 0, 36.33, 66.88),
    (16, "80b", 1, 4, 32, 256, 1, 0, 34.29, 61.18),
    (8, "1.34b", 32, 1, 2, 8, 1, 1, 32.47, 16.27),
    (8, "3.57b", 32, 1, 2, 8, 1, 1, 35.53, 36.73),
    (8, "8.86b", 32, 1, 2, 8, 1, 1, 39.50, 59.09),
    (8, "80b", 1, 4, 16, 256, 1, 0, 30.65, 63.07),
    (4, "1.34b", 16, 1, 2, 16, 1, 1, 38.38, 16.39),
    (4, "3.57b", 16, 1, 2, 8, 2, 1, 40.39, 53.33),
    (4, "8.86b", 16, 1, 2, 16, 1, 1, 43.31, 61.10),
    (4, "80b", 1, 8, 4, 256, 1, 0, 14.76, 65.97),
    (2, "1.34b", 8, 1, 2, 32, 1, 1, 41.59, 19.45),
    (2, "3.57b", 8, 1, 2, 16, 2, 1, 43.77, 54.31),
    (2, "8.86b", 4, 4, 1, 16, 4, 1, 43.94, 58.34),
    (1, "1.34b", 4, 1, 2, 16, 4, 1, 44.32, 41.76),
    (1, "3.57b", 4, 1, 2, 32, 2, 1, 46.68, 56.87),
    (1, "8.86b", 2, 1, 4, 128, 1, 1, 45.22, 63.07),
)

_SOURCE = (
    "Hugging Face nanotron scaling benchmarks (Ultra-Scale Playbook sweep), "
    "github.com/huggingface/nanotron docs/benchmark_summary.svg (commit c2528430), Figure "
    "panels 'MFU and Memory Usage for Best Configurations' and 'Best Configuration by Model "
    "Size and Number of Nodes', cell ({size} model, {nodes} node{s})."
)
_FRAMEWORK_SOURCE = (
    "the README's 'Benchmarks' section: 'benchmarking of Nanotron ... best configurations we "
    "discovered for each model size and node count in nanotron v0.5'"
)
_NOTES = (
    "H100 80GB, 8 per node (the sweep's SLURM partition 'hopper-prod', GPUS_PER_NODE=8). DP, "
    "TP, PP, GAS, MBS and ZeRO stage from the figure's right panel; MFU and memory from the "
    "left. Global batch DP*GAS*MBS = 256 sequences. Not stated in the figure, taken from the "
    "sweep script and its base config (assumed): sequence 4096 (SEQUENCE_LENGTHS = [4096]; "
    "256 x 4096 = the Playbook's 1M-token batch), the model shapes and vocabulary 131072, "
    "tp_mode REDUCE_SCATTER (sequence parallelism, with async TP communication), no "
    "activation recomputation (recompute_layer unset), 1F1B pipeline engine, bf16 weights "
    "with fp32 gradient accumulation and fused AdamW, flash-attn. The pipeline split is "
    "nanotron's cost-balanced placement, recomputed with its algorithm (nanotron_pp_split; "
    "the LM head sits on the last stage). Memory is read as GiB (nanotron logs "
    "torch.cuda.max_memory_allocated() / 1024**3 and max_memory_reserved() / 1024**3, both "
    "labelled GB, of rank 0 -- the first pipeline stage; the figure does not say which). "
    "Read as reserved (assumed): the trainer's per-step log keeps max_memory_reserved as its "
    "one peak figure "
    "('cuda_max_memory_reserved', src/nanotron/trainer.py; its allocated figure there is the "
    "current one), and a sweep for the best configuration that fits is about what the "
    "process holds; tests/published show the error under either reading. "
    "MFU convention: nanotron's get_flops equals PaLM's per token (embedding lookup not "
    "counted, LM head counted once); the peak it divides by is not printed, taken as the "
    "H100's 989.5 TFLOP/s."
)
_ASSUMED = frozenset({
    "seq_len", "gpus_per_node", "model.vocab_size", "layout.sp", "layout.recompute",
    "layout.pp_layers", "measured.memory_bytes_per_gpu", "measured.memory_measure",
})  # fmt: skip


def _run(
    nodes: int,
    size: str,
    dp: int,
    tp: int,
    pp: int,
    gas: int,
    mbs: int,
    zero: int,
    mfu_percent: float,
    memory_gb: float,
) -> PublishedRun:
    layout = Layout(
        tp=tp, pp=pp, dp=dp, sp=tp > 1, recompute="none", zero=zero, micro_batch=mbs,
        global_batch=dp * gas * mbs, flash_attention=True,
        pp_layers=nanotron_pp_split(size, pp) if pp > 1 else (),
    )  # fmt: skip
    return PublishedRun(
        id=f"nanotron-{size}-{nodes}n",
        source=_SOURCE.format(size=size.upper(), nodes=nodes, s="" if nodes == 1 else "s"),
        source_key="huggingface-nanotron-bench",
        framework="nanotron",
        framework_source=_FRAMEWORK_SOURCE,
        model=_model(size),
        seq_len=SEQ_LEN,
        gpu="h100-sxm",
        n_gpus=nodes * 8,
        gpus_per_node=8,
        layout=layout,
        measured=Measurement(
            mfu=mfu_percent / 100,
            flops_convention="palm",
            flops_note="nanotron get_flops: 3 x (2 x matmul params + 4*l*h*s) per token",
            memory_bytes_per_gpu=memory_gb * GiB,
            memory_measure="reserved",
        ),
        assumed=_ASSUMED,
        notes=_NOTES + f" Pipeline split: {layout.pp_layers or 'none (pp 1)'}.",
    )


NANOTRON: tuple[PublishedRun, ...] = tuple(_run(*row) for row in SUMMARY)
