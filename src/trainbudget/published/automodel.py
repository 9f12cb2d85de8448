"""NVIDIA NeMo AutoModel's pre-training benchmark on DGX-H100: the PyTorch-native stack (FSDP2,
Transformer Engine kernels, torch.compile) on Hugging Face Llama 3.1 70B.

Source: github.com/NVIDIA-NeMo/Automodel docs/performance-summary.md (the table first appears in
commit 2013a4dd6, 2026-04-10, "FSDP2 w weight prefetching and async TP optimization"; kept
unchanged through docs/performance-summary.mdx at HEAD), "Pre-Training Performance, System:
DGX-H100, Precision: BF16". Its other pre-training rows are mixture-of-experts models with
expert parallelism, which the record cannot express; its LoRA rows train adapters only.
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

# | Model | #GPUs | GBS | MBS | LBS | GA | Seq Length | TP | PP | CP | EP | VP | FSDP |
#   Kernel Optimizations | Time per Global Step (s) | Model TFLOPs/sec/GPU | Tokens/sec/GPU |
# | Llama3 70B | 64 | 128 | 1 | 1 | 4 | 8192 | 1 | 1 | 2 | - | - | 32 | TE + fsdp2_prefetch |
#   18.90 | 389 | 866.77 |
# Recipe (the table's 'Configuration Files' list): examples/llm_benchmark/llama3_3/
# custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml at commit dccd977aa (2026-04-10):
# "pretrained_model_name_or_path: meta-llama/Llama-3.1-70B", "torch_dtype: bf16",
# "attn_implementation: sdpa  # required for cp>1", "strategy: fsdp2", "tp_size: 1",
# "cp_size: 2", "sequence_parallel: False", "activation_checkpointing: True",
# "enable_fsdp2_prefetch: True", "enable_compile: True", "global_batch_size: 128",
# "local_batch_size: 1   # dp=32: grad_acc=4 steps per rank", "seq_len: 8192",
# optimizer "transformer_engine.pytorch.optimizers.FusedAdam", benchmark "peak_tflops: 989".
# fmt: off
AUTOMODEL: tuple[PublishedRun, ...] = (
    PublishedRun(
        id="automodel-llama31-70b-h100-64gpu",
        source=(
            "NVIDIA NeMo AutoModel 'Performance Summary', github.com/NVIDIA-NeMo/Automodel "
            "docs/performance-summary.md (commit 2013a4dd6), table 'Pre-Training Performance "
            "/ System: DGX-H100, Precision: BF16', row 'Llama3 70B'; layout details from the "
            "recipe examples/llm_benchmark/llama3_3/"
            "custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml."
        ),
        source_key="nvidia-automodel-perf",
        framework="pytorch-fsdp2",
        framework_source="the page: 'NeMo AutoModel with the PyTorch backend'; recipe "
        "'strategy: fsdp2', 'enable_fsdp2_prefetch: True', 'enable_compile: True'",
        model=preset("llama-3-70b"),
        seq_len=8192,
        gpu="h100-sxm",
        n_gpus=64,
        gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=32, cp=2, sp=False, recompute="full", zero=3, micro_batch=1,
            global_batch=128, flash_attention=True,
        ),
        measured=Measurement(
            iteration_seconds=18.90, tokens_per_second_per_gpu=866.77,
            tflops_per_second_per_gpu=389, flops_convention="nemo-causal",
            flops_note="389e12 / 866.77 = 4.49e11 FLOPs/token: NeMo's causal formula",
        ),
        assumed=frozenset({"precision"}),
        notes=(
            "H100 SXM 80GB, 8 nodes of 8 (recipe 'num_nodes: 8'). GPUs, GBS 128, MBS 1, GA 4, "
            "sequence 8192, TP 1, PP 1, CP 2, FSDP 32 and the step time, TFLOP/s and tokens/s "
            "from the table; 128 x 8192 / 18.90 s / 64 = 866.9 tokens/s/GPU agrees with the "
            "table's 866.77. From the recipe: FSDP2 full sharding over the 32 data-parallel "
            "ranks (zero=3), full activation checkpointing, no sequence parallelism, SDPA "
            "attention (fused; required for CP), torch.compile, TE FusedAdam. Llama 3.1 70B "
            "has Llama 3 70B's shapes (preset). Mock data, full sequences without padding "
            "(the page). Precision assumed bf16 weights with fp32 optimizer state "
            "(bf16-mixed): the recipe loads weights with torch_dtype bf16 and does not show "
            "FSDP2's mixed-precision policy."
        ),
    ),
)
# fmt: on
