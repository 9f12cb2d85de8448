"""Llama-3-shaped models of 8B, 14.8B and 70.6B parameters on 1 to 32 H200 (4 a node) with
FSDP2 and DTensor tensor parallelism, with throughput, step time and peak memory per GPU, from
the Kempner Institute's KempnerForge MFU benchmark (github.com/KempnerInstitute/KempnerForge
benchmarks/mfu_scaling/mfu_scaling.md, "KempnerForge MFU Benchmark Report", 2026-04-05, table
"Full Results Table"; added in commit 9f3f03a with its driver mfu_bench.sh).

KempnerForge is a PyTorch-native trainer (scripts/train.py at the report's commit 01b461a):
tensor parallelism by DTensor with SequenceParallel norms, full activation checkpointing of every
block, FSDP2 `fully_shard` per block over the data-parallel mesh (reshard after forward, fp32
reduce-scatter), torch.compile, SDPA causal attention, `F.cross_entropy` on the full logits and
fused AdamW. The model is cast to bf16 before sharding (`Transformer(...).to(dtype=bf16)`), so
weights, gradients and AdamW's moments are all bf16: precision 'bf16'. Gradient accumulation
skips the reduction until the last micro-batch (`maybe_no_sync`: FSDP2's
set_requires_gradient_sync(False)), so FSDP2 keeps every unsharded gradient, upcast to its fp32
reduce dtype, across the micro-batches; the TP head gathers the whole vocabulary's logits to
every rank for the loss; and the token embedding stays out of the TP plan, whole on every TP
rank. All three are the 'kempnerforge' framework row's (core.spec.frameworks), not
torchtitan's (a reduce-scatter every micro-batch, loss parallel, a vocabulary-parallel
embedding).

Each row gives tok/s (all GPUs), MFU, 'Mem/GPU' and the step time. The memory is the tracker's
`peak_gb`, torch.cuda.max_memory_allocated in GiB (metrics/memory.py: 'gb = 1024**3'), logged by
rank 0. The MFU column is 6 P + 12 L D S per token (P every parameter, S = 4096) over 989 TFLOP/s
a GPU and reproduces from tok/s (tests); the step time times tok/s is each config's tokens.
"""

from __future__ import annotations

from trainbudget.core.units import GiB
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

SEQ_LEN = 4096
_REPORT = (
    "KempnerForge MFU Benchmark Report, github.com/KempnerInstitute/KempnerForge "
    "benchmarks/mfu_scaling/mfu_scaling.md (2026-04-05, commit 9f3f03a; Git 01b461a), table "
    "'Full Results Table', row {exp}; the run's flags from benchmarks/mfu_scaling/mfu_bench.sh "
    "({name})."
)
_FRAMEWORK = (
    "scripts/train.py: build_parallel_model applies DTensor tensor parallelism, activation "
    "checkpointing and FSDP2 'fully_shard' (kempnerforge/distributed/parallel.py, 'Applies "
    "parallelism ... TP, AC, FSDP2'), then torch.compile"
)
KF_13B = architecture(
    name="kempnerforge-13b",
    source="KempnerForge mfu_bench.sh M13B: --model.dim=5120 --model.n_layers=40 "
    "--model.n_heads=40 --model.n_kv_heads=8 --model.vocab_size=128256 "
    "--model.ffn_dim_multiplier=1.3 (schema.py computed_ffn_hidden_dim: 256 x ceil(int(4 x "
    "5120 x 2/3 x 1.3) / 256) = 17920); the report's 'Models' table: 13B, 14.84B parameters",
    vocab_size=128256, d_model=5120, n_layers=40, n_heads=40, n_kv_heads=8, d_ff=17920,
    max_seq_len=SEQ_LEN, mlp="swiglu", norm="rmsnorm", position="rope",
    tied_embeddings=False, bias=False, dropout=False,
)  # fmt: skip
MODELS = {"7b": preset("llama-3-8b"), "13b": KF_13B, "70b": preset("llama-3-70b")}
"""The report's names: '7B' has Llama 3 8B's shapes (8.03B: dim 4096, 32 layers, 8 kv heads,
ffn 14336 by the same rounding), '70B' Llama 3 70B's (70.55B, ffn_hidden_dim 28672)."""

# experiment -> (model, GPUs, TP, FSDP (data-parallel shards), micro-batch, accumulation,
#   torch.compile, tok/s, MFU %, Mem/GPU GiB, step time s): the table's row and the
#   driver's --train.batch_size / --train.grad_accum_steps / --train.compile_model
ROWS_STATED = {
    "01_1gpu_7b": ("7b", 1, 1, 1, 2, 4, True, 10_471, 57.8, 80.7, 3.13),
    "02_2gpu_7b_fsdp2": ("7b", 2, 1, 2, 2, 4, True, 18_728, 51.7, 62.4, 3.50),
    "03_2gpu_7b_tp2": ("7b", 2, 2, 1, 4, 2, True, 13_163, 36.4, 57.8, 2.49),
    "04_4gpu_7b_fsdp4": ("7b", 4, 1, 4, 4, 2, True, 38_983, 53.8, 61.1, 3.36),
    "05_4gpu_7b_tp4": ("7b", 4, 4, 1, 4, 2, True, 25_135, 34.7, 39.4, 1.30),
    "06_4gpu_7b_tp2_fsdp2": ("7b", 4, 2, 2, 4, 2, True, 25_980, 35.9, 45.9, 2.52),
    "07_8gpu_7b_tp4_fsdp2": ("7b", 8, 4, 2, 4, 2, True, 44_299, 30.6, 32.7, 1.48),
    "08_8gpu_13b_fsdp8": ("13b", 8, 1, 8, 4, 4, False, 35_405, 44.4, 88.5, 14.81),
    "09_8gpu_13b_tp4_fsdp2": ("13b", 8, 4, 2, 4, 4, True, 27_345, 34.3, 45.1, 4.79),
    "10_16gpu_7b_tp4_fsdp4": ("7b", 16, 4, 4, 4, 2, True, 82_988, 28.6, 29.4, 1.58),
    "11_16gpu_13b_tp4_fsdp4": ("13b", 16, 4, 4, 4, 4, True, 53_814, 33.7, 39.2, 4.87),
    "12_32gpu_7b_tp4_fsdp8": ("7b", 32, 4, 8, 4, 2, True, 155_917, 26.9, 27.6, 1.68),
    "13_32gpu_13b_tp4_fsdp8": ("13b", 32, 4, 8, 4, 4, True, 104_309, 32.7, 36.3, 5.03),
    "14_32gpu_70b_tp4_fsdp8": ("70b", 32, 4, 8, 2, 4, True, 17_657, 25.4, 93.2, 14.85),
}
_SCRIPT_BATCH_DIFFERS = {"01_1gpu_7b", "02_2gpu_7b_fsdp2"}
"""The report's 'Batch Configuration' table gives 7B as batch 4 x accumulation 2; the driver
runs these two as 2 x 4 (the same 32,768 tokens a data-parallel rank)."""

_NOTES = (
    "{gpus} x NVIDIA H200 141 GB ('8 nodes, 4x NVIDIA H200 (141 GB) per node, NVLink "
    "intra-node, InfiniBand inter-node'), {nodes}; the SXM part (catalog h200) assumed: the "
    "report names no variant. Layout from the row ('{par}') and the driver: tp {tp}"
    "{sp_note}, dp_shard {dp} ({fsdp_note}), micro-batch {mb} x {acc} accumulation steps x "
    "{dp} = {gb} sequences of 4096 tokens ({tokens:,} tokens; tok/s x step time = "
    "{check:,.0f}). {batch_note}Full activation checkpointing (--train.activation_"
    "checkpointing=full: every TransformerBlock), torch.compile {compile}, SDPA "
    "is_causal=True, F.cross_entropy on the full logits (the TP output head gathers them to "
    "every rank), fused AdamW, all in bf16 (precision 'bf16'). {sync_note}Figures: tok/s "
    "{tps:,} over {gpus} GPUs = {per_gpu:.1f} tokens/s/GPU (scored); MFU {mfu} % (6 P + 12 L "
    "D S over 989 TFLOP/s, tests); Mem/GPU {mem} GiB, max_memory_allocated on rank 0; step "
    "time {step} s. Data: FineWeb-Edu, Llama 3 tokens, 4096-token windows (causal over the "
    "window, no document masks). Model: {model_note}."
)
_SYNC = (
    "Accumulation reduces once a step (maybe_no_sync: set_requires_gradient_sync(False)), so "
    "FSDP2 holds the unsharded gradients in fp32 (its reduce dtype) until the last "
    "micro-batch: framework row 'kempnerforge'. "
)
_MODEL_NOTE = {
    "7b": "the report's '7B', Llama 3 8B's shapes (preset llama-3-8b)",
    "13b": "the report's '13B' (14.84B), spelled out: 40 layers, 5120 wide, 40 heads with 8 "
    "key-value heads, SwiGLU 17920, vocabulary 128256",
    "70b": "the report's '70B', Llama 3 70B's shapes (preset llama-3-70b)",
}


def _run(exp: str) -> PublishedRun:
    name, gpus, tp, dp, mb, acc, compiled, tps, mfu, mem, step = ROWS_STATED[exp]
    gb = mb * acc * dp
    par = "+".join(p for p in (f"TP={tp}" * (tp > 1), f"FSDP={dp}" * (dp > 1)) if p) or "—"
    label = par.lower().replace("=", "").replace("+", "-") if gpus > 1 else "single"
    assumed = {"gpu"} | ({"layout.micro_batch"} if exp in _SCRIPT_BATCH_DIFFERS else set())
    return PublishedRun(
        id=f"kforge-{name}-{label}-{gpus}gpu",
        source=_REPORT.format(exp=exp[:2], name=exp),
        source_key="kempner-forge-mfu",
        framework="kempnerforge",
        framework_source=_FRAMEWORK,
        model=MODELS[name],
        seq_len=SEQ_LEN, gpu="h200", n_gpus=gpus, gpus_per_node=min(gpus, 4),
        layout=Layout(
            tp=tp, pp=1, dp=dp, sp=tp > 1, recompute="full", zero=3 if dp > 1 else 0,
            micro_batch=mb, global_batch=gb, flash_attention=True,
        ),
        precision="bf16",
        compiled=compiled,
        measured=Measurement(
            tokens_per_second_per_gpu=tps / gpus, memory_bytes_per_gpu=mem * GiB,
            memory_measure="allocated",
        ),
        assumed=frozenset(assumed),
        notes=_NOTES.format(
            gpus=gpus, nodes=f"{max(gpus // 4, 1)} node{'s' if gpus > 4 else ''}", par=par,
            tp=tp, sp_note=" with SequenceParallel norms (sp)" if tp > 1 else "", dp=dp,
            fsdp_note="FSDP2 full shard, zero 3" if dp > 1 else "no data parallelism",
            mb=mb, acc=acc, gb=gb, tokens=gb * SEQ_LEN, check=tps * step,
            batch_note="The report's batch table says 4 x 2 for 7B; the driver's 2 x 4 is "
            "used (the memory column fits it). " if exp in _SCRIPT_BATCH_DIFFERS else "",
            compile="off (--train.compile_model=false)" if not compiled else "on",
            sync_note=_SYNC if dp > 1 and acc > 1 else "", tps=tps, per_gpu=tps / gpus,
            mfu=mfu, mem=mem, step=step, model_note=_MODEL_NOTE[name],
        ),
    )  # fmt: skip


KEMPNERFORGE: tuple[PublishedRun, ...] = tuple(_run(exp) for exp in ROWS_STATED)
"""The fourteen rows: the 8B on 1-32 GPUs, the 14.8B on 8-32, the 70.6B on 32; each with its
peak memory."""
