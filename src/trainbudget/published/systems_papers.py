"""Systems papers with a configuration table and a measured throughput on A100s: Zero Bubble
Pipeline Parallelism (its 1F1B baseline) and FlashAttention-2's end-to-end GPT training."""

from __future__ import annotations

from trainbudget.core.units import GB
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

# ----------------------------------------------------------------------------------------------
# Qi et al. 2024, 'Zero Bubble Pipeline Parallelism', ICLR 2024, arXiv:2401.10241, §5.1.
# Table 3 "Models and fixed settings used in experiments":
#   | Model | Layers | Attention Heads | Hidden Size | Sequence Length | Pipelines (GPUs) |
#     Microbatch Size | Number of Microbatches |
#   | 1.5B | 22 | 24 | 2304 | 1024 | 8 | 6 | 24 / 32 / 64 |
#   | 6.2B | 30 | 32 | 4096 | 1024 | 8 | 3 | 24 / 32 / 64 |
#   | 14.6B | 46 | 40 | 5120 | 1024 | 16 | 1 | 48 / 64 / 128 |
#   | 28.3B | 62 | 48 | 6144 | 1024 | 32 | 1 | 96 / 128 / 256 |
# Table 4 "Experiment result details", row 1F1B:
#   Samples per GPU per second: 11.8 12.5 13.6 | 3.50 3.70 4.03 | 1.40 1.49 1.64 |
#     0.76 0.80 0.88;  Memory (GB): 30 30 30 | 39 39 39 | 32 32 32 | 43 43 43
# "We base our implementation on the open-source Megatron-LM project"; "both the initial and
#  final pipeline stages possess one fewer transformer layer compared to the intermediate
#  stages"; "up to 32 NVIDIA A100 SXM 80G GPUs distributed across 4 nodes interconnected by a
#  RoCE RDMA network. The running time of each iteration is recorded after several warm-up
#  iterations."
# ----------------------------------------------------------------------------------------------
_ZB_SRC = (
    "Qi et al. 2024, 'Zero Bubble Pipeline Parallelism', ICLR 2024, arXiv:2401.10241, §5.1, "
    "Table 3 (models and settings) and Table 4 (row 1F1B: samples per GPU per second, memory)."
)
_ZB_NOTES = (
    "A100 SXM 80GB, 8 per node, RoCE between nodes. Pure pipeline parallelism: the GPU count "
    "is the number of stages (tp = dp = 1), Megatron's non-interleaved 1F1B schedule (the "
    "baseline the paper compares with). The first and last stages hold one layer fewer "
    "(stated), so the split is layout.pp_layers: (L + 2) / p layers on the middle stages "
    "and one fewer on the first and last. Global batch = micro-batch size x number of "
    "micro-batches. Not stated, assumed: "
    "the Megatron GPT defaults (GPT-2 BPE padded to 50304 for tp = 1, learned positions, "
    "tied embeddings, biases, 4h GeLU MLP, attention and hidden dropout 0.1), no activation "
    "recomputation, Megatron's unfused "
    "attention (FlashAttention is opt-in in Megatron), bf16 with Adam. Memory is Table 4's "
    "'Memory (GB)' row, read as 1e9 bytes (the paper does not say GB or GiB) for the most "
    "loaded GPU. What it measures is not stated either: read as the allocated peak (assumed), "
    "the live activations and weights the paper's schedules reason about (its §3 memory "
    "limits count activations), not what the allocator or the device holds."
)
_ZB_ASSUMED = frozenset({
    "model.dropout",
    "model.vocab_size", "model.position", "model.tied_embeddings", "model.bias",
    "layout.recompute", "layout.flash_attention", "measured.memory_bytes_per_gpu",
    "measured.memory_measure",
})  # fmt: skip


def _zb_model(size: str, n_layers: int, n_heads: int, d_model: int):
    return architecture(
        name=f"zero-bubble-gpt-{size}",
        source=f"{_ZB_SRC.split(',')[0]}, Table 3 ({size}); Megatron GPT defaults otherwise",
        vocab_size=50304, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=4 * d_model, max_seq_len=1024, mlp="gelu", norm="layernorm",
        position="learned", tied_embeddings=True, bias=True, dropout=True,
    )  # fmt: skip


def _zero_bubble(
    size: str,
    model_dims: tuple[int, int, int],
    *,
    stages: int,
    micro: int,
    rows: tuple[tuple[int, float], ...],
    memory_gb: float,
) -> tuple[PublishedRun, ...]:
    """Table 4's 1F1B cells for one model: rows = ((micro-batches, samples/GPU/s), ...)."""
    model = _zb_model(size, *model_dims)
    middle = (model.n_layers + 2) // stages  # the first and last stage hold one layer fewer
    split = (middle - 1, *(middle,) * (stages - 2), middle - 1)
    return tuple(
        PublishedRun(
            id=f"zero-bubble-1f1b-{size}-m{n_micro}",
            source=_ZB_SRC,
            source_key="qi-2024-zero-bubble",
            framework="megatron",
            framework_source="§5.1: 'We base our implementation on the open-source Megatron-LM "
            "project'; the 1F1B baseline is 'with implementation from Megatron-LM'",
            model=model,
            seq_len=1024,
            gpu="a100-80gb",
            n_gpus=stages,
            gpus_per_node=8,
            layout=Layout(
                tp=1,
                pp=stages,
                pp_layers=split,
                dp=1,
                sp=False,
                recompute="none",
                zero=0,
                micro_batch=micro,
                global_batch=micro * n_micro,
                flash_attention=False,
            ),
            measured=Measurement(
                samples_per_second_per_gpu=samples,
                memory_bytes_per_gpu=memory_gb * GB,
                memory_measure="allocated",
            ),
            assumed=_ZB_ASSUMED,
            notes=_ZB_NOTES,
        )
        for n_micro, samples in rows
    )


ZERO_BUBBLE: tuple[PublishedRun, ...] = (
    # (layers, heads, hidden) from Table 3; (micro-batches, 1F1B samples/GPU/s) from Table 4
    *_zero_bubble("1.5b", (22, 24, 2304), stages=8, micro=6,
                  rows=((24, 11.8), (32, 12.5), (64, 13.6)), memory_gb=30),
    *_zero_bubble("6.2b", (30, 32, 4096), stages=8, micro=3,
                  rows=((24, 3.50), (32, 3.70), (64, 4.03)), memory_gb=39),
    *_zero_bubble("14.6b", (46, 40, 5120), stages=16, micro=1,
                  rows=((48, 1.40), (64, 1.49), (128, 1.64)), memory_gb=32),
    *_zero_bubble("28.3b", (62, 48, 6144), stages=32, micro=1,
                  rows=((96, 0.76), (128, 0.80), (256, 0.88)), memory_gb=43),
)  # fmt: skip

# ----------------------------------------------------------------------------------------------
# Dao 2023, 'FlashAttention-2: Faster Attention with Better Parallelism and Work
# Partitioning', arXiv:2307.08691, §4.2: "We measure the training throughput of GPT-style
# models with either 1.3B or 2.7B parameters, on 8xA100 80GB SXM"; Table 1 "Training speed
# (TFLOPs/s/GPU) of GPT-style models on 8xA100 GPUs", column FlashAttention-2:
#   | GPT3-1.3B 2k context | ... | 196 TFLOPs/s |   | GPT3-1.3B 8k context | ... | 220 TFLOPs/s |
#   | GPT3-2.7B 2k context | ... | 205 TFLOPs/s |   | GPT3-2.7B 8k context | ... | 225 TFLOPs/s |
# FLOPs "calculated by the formula ... 6 * seqlen * number of params + 12 * number of layers *
# hidden dim * seqlen^2".
# The layout is not in the paper: it is taken from the paper's training code, Dao-AILab/
# flash-attention training/configs/experiment/pile/: gpt3xl-flash.yaml (n_embd 2048, n_head 16,
# n_layer 24; global_batch_size 512; batch_size 8 per GPU at 80 GB; strategy DDPStrategyZero1),
# gpt3xl-flash-8k.yaml (max_length 8192, batch_size 4, global_batch_size 128),
# gpt3-2.7B-flash.yaml (n_embd 2560, n_head 32, n_layer 32, mlp_checkpoint_lvl 0, batch_size
# 4), gpt3-2.7B-flash-8k.yaml (batch_size 4); gpt3s-flash.yaml (use_flash_attn, fused MLP,
# pad_vocab_size_multiple 8); base.yaml (8 devices, 1 node, precision bf16).
# ----------------------------------------------------------------------------------------------
FLASH_ATTENTION_SOURCE_KEY = "dao-flashattention"
"""FlashAttention's authors and codebase: these rows and the repository's own training table
(flash_attention.py) are one source for leave-one-source-out, not two independent ones."""
_FA2_SRC = (
    "Dao 2023, 'FlashAttention-2: Faster Attention with Better Parallelism and Work "
    "Partitioning', arXiv:2307.08691, §4.2 and Table 1 (column FlashAttention-2)."
)
_FA2_NOTES = (
    "One node of 8 A100 80GB SXM. Layout from the paper's training configs (Dao-AILab/"
    "flash-attention training/configs/experiment/pile, the comment above this table), not "
    "from the paper: data parallelism over 8 GPUs with the optimizer state sharded "
    "(DDPStrategyZero1 -> zero=1), no activation checkpointing (mlp_checkpoint_lvl 0), bf16, "
    "per-GPU micro-batch and global batch as the configs set them for 80 GB GPUs. The model is "
    "flash-attention's GPT-2 implementation at GPT-3's shape: learned positions sized to the "
    "context, LayerNorm, 4h GeLU, biases, tied embeddings, GPT-2 BPE padded to a multiple of "
    "8 (50264). The FlashAttention-1 column (189/170/189/175) is not a separate run here: the "
    "step-time model has one fused-attention speed; the 'without FlashAttention' baseline's "
    "implementation is not stated."
)
_FA2_ASSUMED = frozenset({
    "layout.zero", "layout.micro_batch", "layout.global_batch", "layout.recompute",
    "model.vocab_size", "gpus_per_node", "framework",
})  # fmt: skip


def _fa2(size: str, preset_name: str, seq_len: int, *, micro: int, batch: int, tflops: float):
    """One FlashAttention-2 cell of Table 1: 8-way data parallelism on one node."""
    return PublishedRun(
        id=f"flashattn2-gpt3-{size}-{seq_len // 1024}k",
        source=_FA2_SRC,
        source_key=FLASH_ATTENTION_SOURCE_KEY,
        framework="other",
        framework_source="the paper's own training scripts (flash-attention training/, PyTorch "
        "Lightning with DDP and a ZeRO-1 optimizer), named by the configs, not by the paper",
        model=preset(preset_name, vocab_size=50264, max_seq_len=seq_len),
        seq_len=seq_len, gpu="a100-80gb", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=1,
            micro_batch=micro, global_batch=batch, flash_attention=True,
        ),
        measured=Measurement(
            tflops_per_second_per_gpu=tflops, flops_convention="flash-attention-2",
        ),
        attention_kernel="flash2",
        assumed=_FA2_ASSUMED,
        notes=_FA2_NOTES,
    )  # fmt: skip


FLASH_ATTN2: tuple[PublishedRun, ...] = (
    _fa2("1.3b", "gpt3-1.3b", 2048, micro=8, batch=512, tflops=196),
    _fa2("1.3b", "gpt3-1.3b", 8192, micro=4, batch=128, tflops=220),
    _fa2("2.7b", "gpt3-2.7b", 2048, micro=4, batch=512, tflops=205),
    # gpt3-2.7B-flash-8k.yaml inherits its global batch from a config not in the stored copy of
    # the repository: 128, as the 1.3B 8k config, is assumed (the notes' list covers it)
    _fa2("2.7b", "gpt3-2.7b", 8192, micro=4, batch=128, tflops=225),
)
