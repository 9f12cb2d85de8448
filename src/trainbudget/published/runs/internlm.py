"""InternLM's scaling benchmark of its 7B model on 8-1024 A100 80GB GPUs (Shanghai AI Laboratory,
github.com/InternLM/InternLM doc/en/train_performance.md, "Training Performance", section
"FLOPS Testing"): the same model, data parallel only, with and without activation
checkpointing, at a fixed 2048-token sequence.

InternLM trains with its own PyTorch trainer (later InternEvo): flash-attention kernels, apex
fused ops, and "Hybrid Zero", ZeRO-1 whose optimizer-state shards span a group of `zero1` GPUs
(here 8, one node) and are replicated across the groups. Every row states the GPU count, TP,
zero1 group, sequence, micro-batch size and count and the global batch in tokens, and gives
tokens per GPU per second (TGS, recorded and scored) and TFLOP/s by "the FLOPS calculation
method described in the Megatron paper" (tests check that formula reproduces it from TGS).

Left out: the page's first table ("Throughput Measurement"), measured with
`pack_sample_into_one=False`, where packed samples of real, varying lengths each attend within
themselves; the FLOPS tables use `pack_sample_into_one=True`, whose packs are cut into fixed
2048-token sequences (InternLM's PackedDatasetWithoutCuSeqlen sets cu_seqlens to multiples of
the sample length), so attention spans exactly 2048 tokens as recorded.
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

_SOURCE = (
    "InternLM team (Shanghai AI Laboratory), 'Training Performance', github.com/InternLM/"
    "InternLM doc/en/train_performance.md (commit 20fe5ac2), section 'FLOPS Testing', {table}, "
    "row '{n_gpus} GPUs, Micro Bsz {micro}, Micro Num {accum}'."
)
_TABLE = {
    "full": "the table 'When Activation Ckpt is enabled'",
    "none": "the table 'When Activation Ckpt is turned off'",
}
ROCE_BYTES_PER_SECOND_PER_GPU = 4 * 100e9 / 8 / 8
"""The page's hardware table: 4 x 100 Gb/s RoCE a node of 8 GPUs, 6.25 GB/s each."""
_FRAMEWORK = (
    "the page: 'InternLM deeply integrates Flash-Attention, Apex ... building the Hybrid Zero "
    "technique' (InternLM's own PyTorch trainer; 'Zero1 8': optimizer states sharded within "
    "8 GPUs, replicated across nodes)"
)

# (activation ckpt, GPUs, micro bsz, micro num, TGS), copied from the two FLOPS tables in the
# page's order. Every row: TP 1, Zero1 8, Pack Sample Into One TRUE, Seq Len 2048; TFLOP/s in
# _TFLOPS_STATED (same order) for the formula check.
_ROWS = (
    ("full", 8, 8, 1, 3314), ("full", 16, 8, 1, 3268), ("full", 32, 8, 1, 3323),
    ("full", 64, 8, 1, 3217), ("full", 128, 8, 1, 3260), ("full", 256, 8, 1, 3215),
    ("full", 512, 8, 1, 3199), ("full", 1024, 8, 1, 3163), ("full", 512, 4, 1, 2963),
    ("full", 1024, 2, 1, 2341), ("full", 1024, 4, 1, 2796),
    ("none", 8, 2, 4, 4103), ("none", 16, 2, 4, 3939), ("none", 32, 2, 4, 3919),
    ("none", 64, 2, 4, 3944), ("none", 128, 2, 4, 3928), ("none", 256, 2, 4, 3920),
    ("none", 512, 2, 4, 3900), ("none", 1024, 2, 4, 3625), ("none", 512, 2, 2, 3084),
    ("none", 1024, 2, 1, 2346), ("none", 1024, 2, 2, 2817),
)  # fmt: skip
TFLOPS_STATED = (
    193, 191, 188, 188, 187, 187, 186, 184, 173, 136, 160,
    183, 177, 176, 174, 173, 173, 173, 160, 139, 105, 124,
)  # fmt: skip
"""The pages' TFLOPS column, row for row with the records (Megatron's formula: with
checkpointing 96Bslh^2(...), without 72Bslh^2(...)); tests/published check it against TGS."""
GLOBAL_BATCH_MTOKENS_STATED = (
    0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 4, 4, 8,
    0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 4, 4, 8,
)  # fmt: skip
"""The 'Global Bsz' column, 'the total number of processed tokens with all GPUs in a step', as
the page writes it ('0.125M': M = 2^20 tokens); tests check it equals GPUs x micro bsz x micro
num x 2048."""

SEQ_LEN = 2048


def _layout(recompute: str, n_gpus: int, micro: int, accum: int) -> Layout:
    """Data parallel only, ZeRO-1 within each node's 8 GPUs (zero1=8), flash attention."""
    return Layout(
        tp=1, pp=1, dp=n_gpus, sp=False, recompute=recompute, zero=1, zero_shard=8,
        micro_batch=micro, global_batch=n_gpus * micro * accum, flash_attention=True,
    )  # fmt: skip


def _run(recompute: str, n_gpus: int, micro: int, accum: int, tgs: int) -> PublishedRun:
    ckpt = "ckpt" if recompute == "full" else "nockpt"
    return PublishedRun(
        id=f"internlm-7b-{ckpt}-{n_gpus}gpu-mb{micro}x{accum}",
        source=_SOURCE.format(table=_TABLE[recompute], n_gpus=n_gpus, micro=micro, accum=accum),
        source_key="internlm-train-performance",
        framework="internlm-2023",
        framework_source=_FRAMEWORK,
        model=preset("llama-2-7b", vocab_size=103168),
        seq_len=SEQ_LEN,
        gpu="a100-80gb",
        n_gpus=n_gpus,
        gpus_per_node=8,
        layout=_layout(recompute, n_gpus, micro, accum),
        measured=Measurement(tokens_per_second_per_gpu=tgs),
        nic_bytes_per_second=ROCE_BYTES_PER_SECOND_PER_GPU,
        assumed=frozenset({"precision", "model.bias"}),
        notes=(
            "GPU 'nvidia_a100-sxm4-80gb', 8 a node, 4 x 100Gb RoCE between nodes (the page's "
            "hardware table). TP 1, Zero1 8 (ZeRO-1 within each node's 8 GPUs: zero=1, "
            "zero_shard=8), sequence 2048, micro-batch size and count as the row states, "
            "activation checkpointing as the table says (InternLM's checkpoint=True recomputes "
            "every layer: 'full'). The row's Global Bsz (tokens) equals GPUs x micro bsz x "
            "micro num x 2048 (tests). Model: InternLM-7B, the page's '7B model': 32 layers, "
            "hidden 4096, 32 heads, MLP ratio 8/3 (11008), RMSNorm, rotary, untied, vocabulary "
            "103168 (InternLM configs/7B_sft.py): Llama 2 7B's shapes with its vocabulary. "
            "Assumed: no biases (InternLM-7B's released checkpoint has q/k/v/o biases, 4h a "
            "layer, a rounding error) and bf16 weights with fp32 master weights and Adam "
            "state (the page: 'dtype=torch.bfloat16'; InternLM keeps fp32 master copies in "
            "its hybrid ZeRO optimizer). Measured figure: TGS, scored as seconds per step = "
            "global batch x 2048 / (TGS x GPUs)."
        ),
    )


INTERNLM: tuple[PublishedRun, ...] = tuple(_run(*row) for row in _ROWS)
"""InternLM 7B on A100 80GB: 11 rows with full recomputation, 11 without."""
