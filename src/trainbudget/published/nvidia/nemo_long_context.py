"""NVIDIA NeMo's "Long Sequence Performance" page, FP8: Llama 2 7B on DGX H100 and Llama 3 8B on
DGX B200 at 4K-1024K tokens with context parallelism (source key nvidia-nemo-long-context), on
`nemo_perf`'s FLOP count and layout helper."""

from __future__ import annotations

from trainbudget.published.nvidia.nemo_perf import (
    NEMO_FLOPS_VOCAB,
    NEMO_FRAMEWORK,
    nemo_flops_per_token,
    nemo_layout,
)
from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

# ==============================================================================================
# 2. NeMo "Long Sequence Performance", FP8 (docs/source/performance/performance_long_sequence.md).
# LLAMA2-7B on DGX-H100, container NeMo24.03.01 (file at commit 19fadb67b0, 2025-05-08):
#   SeqLen (K) | # of GPUs | Batch Size | Without CP: TFLOPS/GPU | With CP: TP PP DP CP TFLOPS/GPU
#   4 | 4 | 1024 | 768 | 1 1 4 1 | 768
#   8 | 8 | 512 | 730 | 1 2 4 1 | 730
#   16 | 16 | 256 | 660 | 2 1 8 1 | 660
#   32 | 32 | 128 | 595 | 2 1 8 2 | 610
#   64 | 64 | 64 | 534 | 4 1 8 2 | 574
#   128 | 128 | 32 | 424 | 4 1 8 4 | 555
#   256 | 256 | 16 | 392 | 4 1 8 8 | 549
#   512 | 512 | 8 | 104 | 8 1 4 16 | 549
#   1024 | 1024 | 4 | 26.5 | 8 1 4 32 | 536
# LLAMA3-8B on DGX-B200, container NeMo25.04.rc2 (file at commit 14d427f575, 2025-04-28):
#   | SeqLen (K) | # of GPUs | Batch Size | TP | CP | DP | TFLOPS / GPU |
#   | 8 | 2 | 512 | 1 | 1 | 2 | 1,671 |      | 16 | 4 | 256 | 1 | 1 | 4 | 1,717 |
#   | 32 | 8 | 128 | 1 | 2 | 4 | 1,624 |     | 64 | 16 | 64 | 1 | 4 | 4 | 1,600 |
#   | 128 | 32 | 32 | 2 | 4 | 4 | 1,588 |   | 256 | 64 | 16 | 4 | 4 | 4 | 1,590 |
#   | 512 | 128 | 8 | 4 | 8 | 4 | 1,619 |   | 1024 | 256 | 4 | 4 | 16 | 4 | 1,608 |
# (the 2025-05-08 version prints '# of GPUs' = the sequence length in K for the B200 rows, which
#  contradicts its own TP*PP*DP*CP; the 2025-04-28 version is consistent and is used).
# ==============================================================================================
_LC_SRC = (
    "NVIDIA NeMo 'Long Sequence Performance' page, github.com/NVIDIA/NeMo "
    "docs/source/performance/performance_long_sequence.md, {table} ({commit}), row "
    "SeqLen {k}K, 'With CP' columns."
)
_LC_NOTES = (
    "{gpu}, 8 per node (runs under 8 GPUs use part of one node), FP8 (the table title). "
    "Sequence, GPUs, batch size, TP, PP, DP, CP and "
    "TFLOP/s/GPU from the row (GPUs = TP*PP*DP*CP checked); micro-batch 1 (GA = batch / DP). "
    "Not stated, assumed: sequence parallelism with TP > 1, no activation recomputation, the "
    "distributed optimizer (NeMo defaults), and that 'TFLOPS / GPU' counts NeMo's model FLOPs "
    "without a causal discount (nemo-dgxc: NeMo's formula until August 2025, and the 4K row of "
    "the H100 table, 768 TFLOP/s, agrees with the 24.07 table's 780 under it). Only TFLOP/s is "
    "given: validation.py must convert nemo-dgxc to score the row (flops_note gives the "
    "per-token count). TP communication overlap not stated: left off. The optimizer's "
    "dtypes are not stated: the H100 table's NeMo 24.03 is NeMo 1.x, taken as the launcher "
    "yaml's Apex distributed_fused_adam with fp32 gradients (framework row nemo-1); the B200 "
    "table's NeMo 25.04 is NeMo 2 (megatron row). {extra}"
)
_LC_ASSUMED = frozenset({
    "layout.micro_batch", "layout.sp", "layout.recompute", "layout.zero",
    "measured.flops_convention", "framework",
})  # fmt: skip


def _long_context(
    gpu: str, model_key: str, k: int, layout: Layout, tflops: float, extra: str
) -> PublishedRun:
    h100 = gpu == "h100-sxm"
    model = preset(model_key)
    seq = k * 1024
    family = "llama2" if h100 else "llama3"
    per_token = nemo_flops_per_token(model, seq, vocab=NEMO_FLOPS_VOCAB[family])
    return PublishedRun(
        id=f"nemo-longctx-{'llama2-7b-h100' if h100 else 'llama3-8b-b200'}-{k}k",
        source=_LC_SRC.format(
            table="'LLAMA2-7B (FP8) - H100' table, container NeMo24.03.01" if h100
            else "'LLAMA3-8B (FP8) - B200' table, container NeMo25.04.rc2",
            commit="commit 19fadb67b0" if h100 else "commit 14d427f575", k=k,
        ),
        source_key="nvidia-nemo-long-context",
        # NeMo 24.03.01 is NeMo 1.x (Apex's DistributedFusedAdam, the launcher's fp32
        # gradients); NeMo 25.04 is NeMo 2 (Megatron-Core's distributed optimizer)
        framework="nemo-1" if h100 else "nemo",
        framework_source=NEMO_FRAMEWORK, model=model, seq_len=seq, gpu=gpu,
        n_gpus=layout.n_gpus, gpus_per_node=min(8, layout.n_gpus), layout=layout,
        precision="fp8",
        measured=Measurement(
            tflops_per_second_per_gpu=tflops, flops_convention="nemo-dgxc",
            flops_note=f"nemo-dgxc {per_token:.4g} FLOPs/token at this sequence",
        ),
        assumed=_LC_ASSUMED,
        notes=_LC_NOTES.format(gpu="H100 SXM 80GB" if h100 else "B200 180GB", extra=extra),
    )  # fmt: skip


_LC_H100_EXTRA = "Llama 2 7B (preset; RoPE, so no position table to outgrow)."
_LC_B200_EXTRA = "Llama 3 8B (preset)."

# fmt: off
NEMO_LONG_CONTEXT: tuple[PublishedRun, ...] = (
    _long_context("h100-sxm", "llama-2-7b", 4, nemo_layout(1, 1, 4, batch=1024), 768,
                  _LC_H100_EXTRA + " No CP at 4K (CP 1); 4 GPUs of one node."),
    _long_context("h100-sxm", "llama-2-7b", 8, nemo_layout(1, 2, 4, batch=512), 730,
                  _LC_H100_EXTRA + " No CP at 8K (CP 1)."),
    _long_context("h100-sxm", "llama-2-7b", 16, nemo_layout(2, 1, 8, batch=256), 660,
                  _LC_H100_EXTRA + " No CP at 16K (CP 1)."),
    _long_context("h100-sxm", "llama-2-7b", 32, nemo_layout(2, 1, 8, cp=2, batch=128), 610,
                  _LC_H100_EXTRA + " Without CP the best was 595 TFLOP/s/GPU."),
    _long_context("h100-sxm", "llama-2-7b", 64, nemo_layout(4, 1, 8, cp=2, batch=64), 574,
                  _LC_H100_EXTRA + " Without CP: 534."),
    _long_context("h100-sxm", "llama-2-7b", 128, nemo_layout(4, 1, 8, cp=4, batch=32), 555,
                  _LC_H100_EXTRA + " Without CP: 424."),
    _long_context("h100-sxm", "llama-2-7b", 256, nemo_layout(4, 1, 8, cp=8, batch=16), 549,
                  _LC_H100_EXTRA + " Without CP: 392."),
    _long_context("h100-sxm", "llama-2-7b", 512, nemo_layout(8, 1, 4, cp=16, batch=8), 549,
                  _LC_H100_EXTRA + " Without CP: 104."),
    _long_context("h100-sxm", "llama-2-7b", 1024, nemo_layout(8, 1, 4, cp=32, batch=4), 536,
                  _LC_H100_EXTRA + " Without CP: 26.5."),
    _long_context("b200", "llama-3-8b", 8, nemo_layout(1, 1, 2, batch=512), 1671,
                  _LC_B200_EXTRA + " No CP at 8K; 2 GPUs of one node."),
    _long_context("b200", "llama-3-8b", 16, nemo_layout(1, 1, 4, batch=256), 1717,
                  _LC_B200_EXTRA + " No CP at 16K; 4 GPUs of one node."),
    _long_context("b200", "llama-3-8b", 32, nemo_layout(1, 1, 4, cp=2, batch=128), 1624,
                  _LC_B200_EXTRA),
    _long_context("b200", "llama-3-8b", 64, nemo_layout(1, 1, 4, cp=4, batch=64), 1600,
                  _LC_B200_EXTRA),
    _long_context("b200", "llama-3-8b", 128, nemo_layout(2, 1, 4, cp=4, batch=32), 1588,
                  _LC_B200_EXTRA),
    _long_context("b200", "llama-3-8b", 256, nemo_layout(4, 1, 4, cp=4, batch=16), 1590,
                  _LC_B200_EXTRA),
    _long_context("b200", "llama-3-8b", 512, nemo_layout(4, 1, 4, cp=8, batch=8), 1619,
                  _LC_B200_EXTRA),
    _long_context("b200", "llama-3-8b", 1024, nemo_layout(4, 1, 4, cp=16, batch=4), 1608,
                  _LC_B200_EXTRA + " Without CP this length does not fit (the page's note 1)."),
)
# fmt: on
