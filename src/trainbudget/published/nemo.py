"""NVIDIA NeMo / Megatron-Core on DGX H100: Nemotron-4 training and the dgxc benchmarks."""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

# Nemotron-4: squared-ReLU non-gated MLP (mlp='gelu': the same matmul shapes), LayerNorm
# ('layernorm1p', zero-centred gamma), RoPE on half of each head (rotary_percentage 0.5), no
# bias, untied embeddings, vocab 256,000, sequence 4096 (NeMo configs below).
_NEMOTRON_NEMO = "normalization: layernorm1p, position_embedding_type: rope, bias: false"
_NEMOTRON4_15B = architecture(
    name="nemotron-4-15b",
    source="Parmar et al. 2024, arXiv:2402.16819, Table 1; d_ff from NeMo-Framework-Launcher "
    f"nemotron_15b.yaml; {_NEMOTRON_NEMO} (NeMo nemotron configs)",
    vocab_size=256000, d_model=6144, n_layers=32, n_heads=48, n_kv_heads=8, d_ff=24576,
    max_seq_len=4096, mlp="gelu", norm="layernorm", position="rope",
    tied_embeddings=False, bias=False, dropout=False,
)  # fmt: skip
_NEMOTRON4_340B = architecture(
    name="nemotron-4-340b",
    source="NeMo-Framework-Launcher nemotron_340b.yaml and dgxc-benchmarking "
    f"nemotron/nemotron4-340b-synth.yaml ({_NEMOTRON_NEMO})",
    vocab_size=256000, d_model=18432, n_layers=96, n_heads=96, n_kv_heads=8, d_ff=73728,
    max_seq_len=4096, mlp="gelu", norm="layernorm", position="rope",
    tied_embeddings=False, bias=False, dropout=False,
)  # fmt: skip


def _h100(tp: int, pp: int, dp: int, *, cp: int = 1, vpp: int = 1, micro: int = 1, batch: int):
    """A NeMo H100 layout: sequence parallelism, no recomputation, distributed optimizer."""
    return Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sp=True, recompute="none", zero=1,
        micro_batch=micro, global_batch=batch, flash_attention=True,
    )  # fmt: skip


_NEMO_ASSUMED = frozenset({"layout.micro_batch", "layout.sp", "layout.recompute", "framework"})
_NEMOTRON_FRAMEWORK = (
    "not read in the report: NVIDIA's NeMo, whose NeMo-Framework-Launcher configs describe "
    "these models (the layout assumptions come from them too)"
)

# fmt: off
NEMOTRON4: tuple[PublishedRun, ...] = (
    # ------------------------------------------------------------------------------------------
    # Nemotron-4 15B (Parmar et al. 2024, arXiv:2402.16819), §2, Table 2:
    # "We used a combination of 8-way tensor parallelism ... and data parallelism to train
    #  the model; we also use a distributed optimizer to shard the optimizer state over the
    #  data-parallel replicas."
    # "Data-parallel size | GPUs | Iteration time (secs) | MFU (%) | Batch size | Tokens (B)"
    # "96 | 768 | 0.57 | 34.3 | 384 | 200"; "288 | 2,304 | 0.64 | 30.5 | 1,152 | 7,600"
    # ------------------------------------------------------------------------------------------
    PublishedRun(
        id="nemotron4-15b-768gpu",
        source_key="parmar-2024-nemotron4-15b",
        framework="nemo",
        framework_source=_NEMOTRON_FRAMEWORK,
        source=(
            "Parmar et al. 2024, 'Nemotron-4 15B Technical Report', arXiv:2402.16819, §2 "
            "'Pre-training' and Table 2 (text read from a stored conversion of the paper)."
        ),
        model=_NEMOTRON4_15B, seq_len=4096, gpu="h100-sxm", n_gpus=768, gpus_per_node=8,
        layout=_h100(8, 1, 96, batch=384),
        measured=Measurement(iteration_seconds=0.57, mfu=0.343),
        tp_comm_overlap=True,
        assumed=_NEMO_ASSUMED | {"model.d_ff", "tp_comm_overlap"},
        notes=(
            "384 DGX H100 nodes (H100 80GB SXM5, 8x 400 Gb/s IB per node). Paper Table 1: "
            "32 layers, 6144 hidden, 48 heads, 8 KV heads, seq 4096, vocab 256,000; "
            "squared-ReLU non-gated MLP (mlp='gelu' = same matmul shapes), no bias, untied "
            "embeddings, RoPE. d_ff=24576 from NeMo-Framework-Launcher nemotron_15b.yaml "
            "(paper does not state it). Not stated, assumed: micro_batch=1 (4 sequences per "
            "DP rank per step), sequence parallelism on (Megatron default with TP, and on "
            "in the NeMo config), no recompute (NeMo config has none). MFU per Chowdhery "
            "et al. / Korthikanti et al. over 989 TFLOP/s. TP communication overlap "
            "assumed on: the launcher config nemotron_15b.yaml sets ub_tp_comm_overlap: True."
        ),
    ),
    # Table 2: "288 | 2,304 | 0.64 | 30.5 | 1,152 | 7,600 | 11.9"
    PublishedRun(
        id="nemotron4-15b-2304gpu",
        source_key="parmar-2024-nemotron4-15b",
        framework="nemo",
        framework_source=_NEMOTRON_FRAMEWORK,
        source="Parmar et al. 2024, arXiv:2402.16819, Table 2, third row.",
        model=_NEMOTRON4_15B, seq_len=4096, gpu="h100-sxm", n_gpus=2304, gpus_per_node=8,
        layout=_h100(8, 1, 288, batch=1152),
        measured=Measurement(iteration_seconds=0.64, mfu=0.305),
        tp_comm_overlap=True,
        assumed=_NEMO_ASSUMED | {"model.d_ff", "tp_comm_overlap"},
        notes=(
            "Same assumptions as nemotron4-15b-768gpu. The middle row (DP 192, 1,536 GPUs, "
            "0.58 s, 33.3%, batch 768) is also published."
        ),
    ),
    # ------------------------------------------------------------------------------------------
    # Nemotron-4 340B (NVIDIA 2024, arXiv:2406.11704), Table 2, last stage:
    # "the largest stage used all 6144 GPUs with a batch size of 2304 and an iteration time
    #  (time per batch) of 8.0 seconds" (aiportalx.com/nvidia/nemotron-4-340b, quoting the
    #  technical report's Table 2; MFU "41-42%").
    # ------------------------------------------------------------------------------------------
    PublishedRun(
        id="nemotron4-340b-6144gpu",
        source_key="nvidia-2024-nemotron4-340b",
        framework="nemo",
        framework_source=_NEMOTRON_FRAMEWORK,
        source=(
            "NVIDIA 2024, 'Nemotron-4 340B Technical Report', arXiv:2406.11704, §3 / Table 2 "
            "(batch-size ramp), last stage; as quoted by aiportalx.com/nvidia/nemotron-4-340b."
        ),
        model=_NEMOTRON4_340B, seq_len=4096, gpu="h100-sxm", n_gpus=6144, gpus_per_node=8,
        layout=_h100(8, 12, 64, vpp=8, batch=2304),
        measured=Measurement(iteration_seconds=8.0),
        assumed=_NEMO_ASSUMED | {"layout.tp", "layout.pp", "layout.vpp", "layout.zero"},
        notes=(
            "WEAKEST-SOURCED ENTRY: only GPUs=6144, batch=2304 and 8.0 s are verified (via a "
            "third-party quote of the report). TP=8 / PP=12 with interleaving is the "
            "report's stated layout as recalled and as used by third-party calibrations; "
            "vpp=8 comes from a third-party summary of NVIDIA's Megatron-Core blog (96 "
            "layers / 12 / 8 = 1 layer per chunk); not verified here. Model from "
            "NeMo-Framework-Launcher nemotron_340b.yaml: 96 layers, 18432 hidden, "
            "ffn 4h, 96 heads, 8 query groups, squared-ReLU, no bias, untied, vocab "
            "256000, seq 4096. Micro-batch 1, SP on, no recompute, distributed optimizer "
            "taken from that yaml (a benchmark config, not necessarily the training run). "
            "Published MFU for this stage is ~41%."
        ),
    ),
)
# fmt: on

_DGXC_SRC = (
    "NVIDIA dgxc-benchmarking (github.com/NVIDIA/dgxc-benchmarking), '{path}', "
    "'Expected Performance' table, NeMo {fw} container, DGX H100."
)
_DGXC_NOTES = (
    "H100 SXM 80GB, 8/node. Step time is the last logged train_step_timing of a 50/100-step "
    "run. Layout fields from the table header; sequence_parallel=true, no activation "
    "checkpointing, distributed (ZeRO-1-like) optimizer, TP comm overlap from the matching "
    "NeMo-Framework-Launcher conf/training yaml (may differ in detail from the container's "
    "copy). The optimizer is Apex's distributed_fused_adam with grad_sync_dtype bf16 in "
    "dgxc-benchmarking's own yaml of each recipe (v24.11.1), Nemotron's also with dtype bf16 "
    "(framework rows nemo-1-bf16-grads, nemo-1-bf16-adam). MFU is the README's own number "
    "(nemo-dgxc FLOPs / 989 TFLOP/s)."
)
_DGXC_ASSUMED = frozenset({"layout.sp", "layout.recompute", "layout.zero"})

# fmt: off
DGXC: tuple[PublishedRun, ...] = (
    # ------------------------------------------------------------------------------------------
    # NVIDIA dgxc-benchmarking, nemo_megatron/README_175b.md:
    # "| NeMo Megatron BF16 (TP=4,PP=8, MBS=1, VP=12, SEQ=2048) | 128x H100 GPUs (GBS=256)"
    # "| Training step time (seconds per step) | 8.309 |"; "| Model flops utilization |
    #  53.54% |"; "The model flops for GPT 3 175b for GBS=1 is 2.20E+15."
    # gpt3_175b_hydra.yaml: "sequence_parallel: true", "activations_checkpoint_granularity:
    #  null", "optim: name: distributed_fused_adam", "num_layers: 96", "hidden_size: 12288",
    #  "ffn_hidden_size: 49152", "num_attention_heads: 96", "GPT2BPETokenizer"
    # ------------------------------------------------------------------------------------------
    PublishedRun(
        id="dgxc-gpt3-175b-bf16-128gpu",
        source_key="nvidia-dgxc-benchmarking", framework="nemo-1-bf16-grads",
        framework_source="the README's setup: the NeMo container named in the source; "
        "optimizer dtypes from dgxc-benchmarking v24.11.1 (35a9aec) "
        "nemo_megatron/gpt3_175b_hydra.yaml",
        source=_DGXC_SRC.format(path="nemo_megatron/README_175b.md", fw="(DGXC 24.x)")
        + " Config: nemo_megatron/gpt3_175b_hydra.yaml.",
        # GPT-3 175B's dimensions (the preset) with the executed, padded vocabulary
        model=preset("gpt3-175b", vocab_size=50688),
        seq_len=2048, gpu="h100-sxm", n_gpus=128, gpus_per_node=8,
        layout=_h100(4, 8, 4, vpp=12, batch=256),
        measured=Measurement(
            iteration_seconds=8.309, mfu=0.5354, flops_convention="nemo-dgxc",
            flops_note="2.20e15 FLOPs/sequence, V=51200",
        ),
        assumed=frozenset({"model.tied_embeddings", "model.bias", "model.position"}),
        notes=_DGXC_NOTES
        + (
            " Layout and SP/recompute/optimizer from this recipe's own gpt3_175b_hydra.yaml. "
            "Vocab: GPT-2 BPE 50257 padded to a multiple of 128*TP=512 -> 50688 (derived "
            "from make_vocab_size_divisible_by: 128; the README's FLOP count uses 51200). "
            "Tied embeddings and biases are NeMo GPT defaults (not in the yaml), and so are "
            "learned absolute positions and LayerNorm (the yaml sets no "
            "position_embedding_type or normalization; NeMo's megatron_gpt default is "
            "learned_absolute). Other scales in the same table: 256 GPUs 8.408 s, 512: "
            "8.42 s, 1024: 8.453 s, 2048: 8.49 s (GBS = 2 x GPUs)."
        ),
    ),
    # llama3.1/README_70b.md: "| Llama 3.1 70b 24.09 BF16 (TP=4, PP=4, CP=2, VP=5, MBS=1,
    #  GA=64) | Throughput on 64x H100 GPUs (GBS=128) |"; "| Training step time (seconds per
    #  step) | 14.72 |"; "| Model flops utilization | 54.10% |"
    PublishedRun(
        id="dgxc-llama31-70b-bf16-64gpu",
        source_key="nvidia-dgxc-benchmarking", framework="nemo-1-bf16-grads",
        framework_source="the README's setup: the NeMo container named in the source; "
        "optimizer dtypes from dgxc-benchmarking v24.11.1 (35a9aec) llama3.1/llama3.1_70b.yaml",
        source=_DGXC_SRC.format(path="llama3.1/README_70b.md", fw="24.09")
        + " Config: NeMo-Framework-Launcher conf/training/llama/llama3_1_70b.yaml.",
        model=preset("llama-3-70b"),  # Llama 3.1 70B has Llama 3 70B's shapes
        seq_len=8192, gpu="h100-sxm", n_gpus=64, gpus_per_node=8,
        layout=_h100(4, 4, 2, cp=2, vpp=5, batch=128),
        measured=Measurement(
            iteration_seconds=14.72, mfu=0.5410, flops_convention="nemo-dgxc",
            flops_note="3.94e15 FLOPs/sequence",
        ),
        assumed=_DGXC_ASSUMED,
        notes=_DGXC_NOTES
        + (
            " DP = 64/(4*4*2) = 2, GA = 128/(2*1) = 64 as stated. Other scales: 128 GPUs "
            "14.73 s, 256: 14.8, 512: 14.89, 1024: 14.92, 2048: 14.98 (GBS = 2 x GPUs)."
        ),
    ),
    # llama3.1/README_405b.md: "| Llama 3.1 405b 24.09 BF16 (TP=8, PP=9, CP=2, VP=7, MBS=1,
    #  GA=63) |"; 576x H100 column: "| GBS | 252 |", "| Training step time (seconds per
    #  step) | 17.20 |", "| Model flops utilization | 55.78% |";
    # "Note that Llama3.1 405B uses the GPT2BPETokenizer as a proxy."
    PublishedRun(
        id="dgxc-llama31-405b-bf16-576gpu",
        source_key="nvidia-dgxc-benchmarking", framework="nemo-1-bf16-grads",
        framework_source="the README's setup: the NeMo container named in the source; "
        "optimizer dtypes from dgxc-benchmarking v24.11.1 (35a9aec) llama3.1/llama3.1_405b.yaml",
        source=_DGXC_SRC.format(path="llama3.1/README_405b.md", fw="24.09")
        + " Config: NeMo-Framework-Launcher conf/training/llama/llama3_1_405b.yaml.",
        # the NeMo config's query groups and the executed proxy vocabulary (notes)
        model=preset("llama-3-405b", n_kv_heads=16, vocab_size=51200),
        seq_len=8192, gpu="h100-sxm", n_gpus=576, gpus_per_node=8,
        layout=_h100(8, 9, 4, cp=2, vpp=7, batch=252),
        measured=Measurement(
            iteration_seconds=17.20, mfu=0.5578, flops_convention="nemo-dgxc",
            flops_note="2.17e16 FLOPs/sequence, V=128256",
        ),
        assumed=_DGXC_ASSUMED,
        notes=_DGXC_NOTES
        + (
            " The NeMo 405B config uses num_query_groups: 16 (the released model has 8) and "
            "the README's FLOP formula uses 16/128, so n_kv_heads=16 here. Synthetic data "
            "with the GPT-2 BPE tokenizer as proxy: executed vocab = 50257 padded to a "
            "multiple of 128*TP=1024 -> 51200 (derived), while the README's MFU counts "
            "V=128256. DP = 576/(8*9*2) = 4, GA = 252/4 = 63. 1152 GPUs (GBS 504): 17.52 s; "
            "2304 GPUs (GBS 1008): 17.62 s."
        ),
    ),
    # nemotron/README_340b.md: "| Nemotron4 340b 24.11 BF16 (TP=8, PP=8, MBS=1, GA=16, VP=12)
    #  | Throughput on 128x H100 GPUs (GBS=32) |"; "| Training step time (seconds per step)
    #  |  4.61 |"; "| Model flops utilization | 55.38% |"
    PublishedRun(
        id="dgxc-nemotron4-340b-bf16-128gpu",
        source_key="nvidia-dgxc-benchmarking", framework="nemo-1-bf16-adam",
        framework_source="the README's setup: the NeMo container named in the source; "
        "optimizer dtypes from dgxc-benchmarking v24.11.1 (35a9aec) "
        "nemotron/nemotron4-340b-synth.yaml",
        source=_DGXC_SRC.format(path="nemotron/README_340b.md", fw="24.09/24.11")
        + " Config: NeMo-Framework-Launcher conf/training/nemotron/nemotron_340b.yaml.",
        model=_NEMOTRON4_340B, seq_len=4096, gpu="h100-sxm", n_gpus=128, gpus_per_node=8,
        layout=_h100(8, 8, 2, vpp=12, batch=32),
        measured=Measurement(
            iteration_seconds=4.61, mfu=0.5538, flops_convention="nemo-dgxc",
            flops_note="1.01e16 FLOPs/sequence, MHA, 4h MLP",
        ),
        assumed=_DGXC_ASSUMED,
        notes=_DGXC_NOTES
        + (
            " Table header says 24.11 while the setup text says nemo:24.09. Squared-ReLU "
            "non-gated MLP (mlp='gelu'), 8 query groups, rotary_percentage 0.5, no bias, "
            "untied, vocab 256000 (synthetic data). The README's FLOP formula ignores GQA. "
            "The README's worked example quotes 4.77 s for this point; the table says 4.61 "
            "(table value used). Other scales: 256 GPUs 4.67 s, 512: 4.7, 1024: 4.73, "
            "2048: 4.84 (GBS = GPUs / 4). dgxc-benchmarking's own "
            "nemotron/nemotron4-340b-synth.yaml (commit 8f5cbb3, 384 GPUs, GBS 96) sets "
            "activations_checkpoint_granularity: selective; whether the README's run used "
            "it is not stated, so recompute='none' stays an assumption."
        ),
    ),
)
# fmt: on
