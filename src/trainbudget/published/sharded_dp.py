"""Sharded data parallelism on A100s: the PyTorch FSDP paper, OPT-175B and BloombergGPT.

Each run's model, layout and figure as its paper states them; what a paper leaves out is named
in `assumed` and reasoned in the notes.
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

# ----------------------------------------------------------------------------------------------
# Zhao et al. 2023, 'PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel',
# arXiv:2304.11277 (VLDB 2023), §5.1 and §5.4:
# "dense parameters were trained using FSDP on 8 to 512 A100 80GB GPUs interconnected by a
#  2Tb/s RoCE network"; "we ran three types of models using Full Sharding with prefetching and
#  rate limiter turned on. Activation checkpointing and BF16 mixed precision are also applied";
#  "minGPT transformer [10]: model size 175B, vocab size 50000, block size 2048, batch size 1
#  and 2 for 128, 192, 256, 384 and 512 GPUs"; "With the 175B model, the experiments achieved
#  more than 173 and 186 TFLOPS per GPU with batch size equal to 1 and 2 respectively as shown
#  in Figure 7 (b) ... the model demonstrated linear scalability from 128 GPUs to 512 GPUs ...
#  Notably, with 128 GPUs, setting the batch size to 2 resulted in a considerably lower
#  per-GPU TFLOPs in comparison to other scenarios."
# ----------------------------------------------------------------------------------------------
_FSDP_SRC = (
    "Zhao et al. 2023, 'PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel', "
    "arXiv:2304.11277, §5.1 (setup) and §5.4 (text on Figure 7(b), GPT-175B)."
)
# minGPT as the authors' benchmark builds it (mrshenli/ptd_benchmark models.py, GPT175BConfig:
# n_layer 96, n_head 96, n_embd 12288): learned positions, LayerNorm, 4h GeLU, biases, and an
# output head apart from the token embedding (nn.Linear(..., bias=False)); GPTConfig sets
# embd_pdrop, resid_pdrop and attn_pdrop to 0.1 (dropout on the scores and the MLP output).
_MINGPT_175B = preset("gpt3-175b", vocab_size=50000, tied_embeddings=False, dropout=True)
_FSDP_NOTES = (
    "A100 80GB, 8 per node (assumed: the paper gives the GPU and the 2 Tb/s RoCE network, i.e. "
    "8 x 200 Gb/s per node). Full sharding (zero=3) over every GPU, full activation "
    "checkpointing, bf16, Adam. 'batch size 1 and 2' is per GPU (a global batch of 1 cannot "
    "span 128 GPUs; the authors' benchmark takes --batch_size per rank): one micro-batch per "
    "step. minGPT's attention materialises the masked score matrix (no fused kernel). The "
    "paper does not define its TFLOPS; the authors' benchmark code (mrshenli/ptd_benchmark "
    "trainer.py calc_flop) counts 96*B*s*l*h^2*(1 + s/6h + V/16lh) per rank, the Megatron "
    "96Bslh2 convention, over the measured iteration time. The figure is a LOWER bound ('more "
    "than'), read from the text, not from Figure 7(b)'s bars; the text says it holds from 128 "
    "to 512 GPUs for batch 1, and for batch 2 except at 128 GPUs."
)
_FSDP_ASSUMED = frozenset({"gpus_per_node", "measured.flops_convention"})


def _fsdp(n_gpus: int, micro: int, tflops: float) -> PublishedRun:
    """One GPT-175B point of §5.4: FSDP full shard, per-GPU batch `micro`, full recompute."""
    return PublishedRun(
        id=f"fsdp-gpt175b-b{micro}-{n_gpus}gpu",
        source=_FSDP_SRC,
        source_key="zhao-2023-fsdp",
        framework="pytorch-fsdp",
        framework_source="the paper is PyTorch FSDP's own evaluation (§5: 'empirical evaluation "
        "of FSDP')",
        model=_MINGPT_175B,
        seq_len=2048, gpu="a100-80gb", n_gpus=n_gpus, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=n_gpus, sp=False, recompute="full", zero=3,
            micro_batch=micro, global_batch=micro * n_gpus, flash_attention=False,
        ),
        measured=Measurement(
            tflops_per_second_per_gpu=tflops, flops_convention="megatron-96Bslh2",
            flops_note="'more than' this many TFLOPS per GPU: a lower bound",
        ),
        assumed=_FSDP_ASSUMED,
        notes=_FSDP_NOTES,
    )  # fmt: skip


FSDP_PAPER: tuple[PublishedRun, ...] = (
    _fsdp(128, 1, 173),  # "more than 173 ... TFLOPS per GPU with batch size equal to 1"
    _fsdp(512, 1, 173),  # "linear scalability from 128 GPUs to 512 GPUs"
    _fsdp(512, 2, 186),  # "... and 186 ... with batch size equal to 2" (128 GPUs excepted)
)

# ----------------------------------------------------------------------------------------------
# Zhang et al. 2022, 'OPT: Open Pre-trained Transformer Language Models', arXiv:2205.01068,
# Table 1: "175B 96 96 12288 1.2e-4 2M" (#L #H d_model LR Batch in tokens); §2.2: "all models
# are trained with ReLU activation and a sequence length of 2048"; §2.4: "We trained OPT-175B
# on 992 80GB A100 GPUs, by utilizing Fully Sharded Data Parallel (Artetxe et al., 2021) with
# Megatron-LM Tensor Parallelism ... We achieve utilization of up to 147 TFLOP/s per GPU."
# Logbook note (metaseq projects/OPT/chronicles/10_percent_update.md): "Batch-size of 2M",
# "8x Tensor Parallelism".
# ----------------------------------------------------------------------------------------------
OPT: tuple[PublishedRun, ...] = (
    PublishedRun(
        id="opt-175b-992gpu",
        source=(
            "Zhang et al. 2022, 'OPT: Open Pre-trained Transformer Language Models', "
            "arXiv:2205.01068, Table 1 and §2.2-2.4; tensor parallelism from the OPT logbook "
            "notes (facebookresearch/metaseq projects/OPT/chronicles/10_percent_update.md)."
        ),
        source_key="zhang-2022-opt",
        framework="pytorch-fsdp",
        framework_source="§2.4: 'Fully Sharded Data Parallel (Artetxe et al., 2021)', FairScale's "
        "FSDP in metaseq, with Megatron tensor parallelism inside each shard group",
        # GPT-3 175B's shape (Table 1); ReLU has GeLU's matmul shapes (mlp='gelu'); GPT-2 BPE
        # vocabulary padded to 50272 (metaseq's OPT configs); learned positions, tied, biases
        model=preset("gpt3-175b", vocab_size=50272, dropout=True),  # §2.2: "dropout of 0.1"
        seq_len=2048, gpu="a100-80gb", n_gpus=992, gpus_per_node=8,
        layout=Layout(
            tp=8, pp=1, dp=124, sp=False, recompute="full", zero=3,
            micro_batch=8, global_batch=992, flash_attention=False,
        ),
        measured=Measurement(
            tflops_per_second_per_gpu=147, flops_convention="megatron-96Bslh2",
            flops_note="'up to 147 TFLOP/s': a peak, its FLOP count not stated",
        ),
        assumed=frozenset({
            "layout.micro_batch", "layout.global_batch", "layout.recompute", "model.vocab_size",
            "measured.flops_convention",
        }),
        notes=(
            "992 = 8-way tensor parallelism x 124 FSDP shards (zero=3). The batch is '2M' "
            "tokens; 2M / 2048 = 1024 sequences do not split over 124 replicas, so 8 sequences "
            "per replica (992 sequences, 2.03M tokens) are assumed. Activation checkpointing "
            "is not stated for OPT-175B (metaseq checkpoints activations at this scale): full "
            "assumed. fp16 weights, fp32 Adam state. The paper does not say how its TFLOP/s "
            "counts FLOPs: the 2021-22 Megatron convention (96Bslh2, recompute included) is "
            "assumed, and 'up to' makes the figure a best case. Not scored (validation.EXCLUDED)."
        ),
    ),
)  # fmt: skip

# ----------------------------------------------------------------------------------------------
# Wu et al. 2023, 'BloombergGPT: A Large Language Model for Finance', arXiv:2303.17564.
# Table 4: "Number of Layers 70 | Number of Heads 40 | Vocabulary Size 131,072 | Hidden
#  Dimension 7,680 | Total Parameters 50.6B ... Hardware 64x8 A100 40GB | Throughput 32.5
#  sec/step | avg. TFLOPs 102". §3.3: sequences of "2,048 tokens"; "in the first 7,200 steps,
#  we use a batch size of 1,024 (2.1M tokens), then switch to a batch size of 2,048 (4.2M
#  tokens) for the remainder of training". §3.4: "stage 3 of ZeRO optimization ... SageMaker
#  Model Parallelism (SMP) library ... We shard a model across 128 GPUs, and we have 4 copies
#  of the model during training"; MiCS; "We apply activation checkpointing to each transformer
#  layer"; "forward and backward passes are done in BF16"; "we use a masked-causal-softmax
#  fused kernel". §3.1: BLOOM's architecture, GELU FFN, ALiBi, tied input/output embeddings,
#  an embedding LayerNorm.
# ----------------------------------------------------------------------------------------------
BLOOMBERG: tuple[PublishedRun, ...] = (
    PublishedRun(
        id="bloomberggpt-50b-512gpu",
        source=(
            "Wu et al. 2023, 'BloombergGPT: A Large Language Model for Finance', "
            "arXiv:2303.17564, Table 4, §3.1, §3.3 and §3.4."
        ),
        source_key="wu-2023-bloomberggpt",
        framework="other",
        framework_source="§3.4: 'the proprietary SageMaker Model Parallelism (SMP) library from "
        "AWS' (ZeRO stage 3 with MiCS)",
        model=architecture(
            name="bloomberggpt-50b",
            source="Wu et al. 2023, Table 4 and §3.1 (BLOOM's block: LayerNorm, GELU FFN, "
            "ALiBi, tied embeddings)",
            vocab_size=131072, d_model=7680, n_layers=70, n_heads=40, n_kv_heads=40,
            d_ff=30720, max_seq_len=2048, mlp="gelu", norm="layernorm", position="alibi",
            tied_embeddings=True, bias=True, dropout=False,
        ),
        seq_len=2048, gpu="other:a100-40gb-aws-p4d-efa", n_gpus=512, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=512, sp=False, recompute="full", zero=3, zero_shard=128,
            micro_batch=4, global_batch=2048, flash_attention=False,
        ),
        measured=Measurement(iteration_seconds=32.5),
        assumed=frozenset({"model.d_ff", "model.bias", "layout.micro_batch"}),
        notes=(
            "NOT SCORED (gpu 'other:'): 64 AWS p4d.24xlarge, 8 A100 40GB each, NVSwitch (600 "
            "GB/s), EFA 400 Gb/s per node. The catalog's a100-40gb row assumes one 200 Gb/s "
            "HDR NIC per GPU (1.6 Tb/s per node, 4x EFA's); a ZeRO-3 run over 512 GPUs is "
            "bound by that link, so it needs its own hardware row. ZeRO-3 sharded over 128 "
            "GPUs, 4 replicas (zero_shard=128). 32.5 s is the paper's per-step figure; batch "
            "2,048 for all but the first 7,200 of 139,200 steps, so global_batch=2048. "
            "d_ff = 4 x 7680 and biases on every linear layer are BLOOM's block (§3.1: the "
            "model is based on BLOOM; Appendix A not read). The micro-batch is not stated: 4 "
            "sequences per GPU in one micro-batch assumed (2048 / 512). The embedding "
            "LayerNorm's 2 x 7680 parameters are not in the ModelSpec. 'avg. TFLOPs 102' "
            "counts the recomputed forward (§3.2: activation checkpointing 'costs us an "
            "additional 0.33x TFLOPs'); the step time is used."
        ),
    ),
)  # fmt: skip
