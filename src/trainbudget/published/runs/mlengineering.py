"""Llama 3.1 8B training steps on one node of 8 H200 or 8 B200, 8K to 256K tokens a sequence,
from Stas Bekman's "Machine Learning Engineering Open Book" (github.com/stas00/ml-engineering,
insights/when-to-upgrade-gpus/README.md, "Worked example: meta-llama/Llama-3.1-8B training step,
FA3 vs FA4", August 2026).

The benchmark (benchmark.py beside the page) trains the Hugging Face Llama-3.1-8B with real
weights under DeepSpeed 0.19.2 and torch 2.13: micro-batch 1 on each of 8 GPUs, no
accumulation, one unpacked sequence per GPU, bf16 with AdamW. The long-context configuration is
ZeRO-3, activation checkpointing of every decoder layer, the optimizer offloaded to the CPU
(`offload_optimizer: cpu`) and Liger-Kernel (fused RMSNorm, RoPE, SwiGLU and a fused linear
cross-entropy that never holds the logits); the page also gives one right-sized 8K step per GPU
(ZeRO-2, no checkpointing, no offload). Attention is Hugging Face's `attn_implementation`:
FlashAttention 3 on H200, the FlashAttention 4 beta on B200 (the catalog times B200 with its
default attention rate).

Figures: TFLOP/s per GPU by the script's `estimate_tflos` (FLOP_CONVENTIONS 'arctic-causal',
recomputation not counted), steady state after 2 warm-up steps; the step time here is that
count over the figure. Peak memory: `torch.cuda.max_memory_reserved`, the largest over the ranks
(what the caching allocator holds, an upper bound of the allocated peak).

Start-up: benchmark.py (commit 380e078) builds the model with `from_pretrained(...,
dtype=torch.bfloat16)` on the CPU and passes it to `deepspeed.initialize` with no
`deepspeed.zero.Init`, so DeepSpeed's engine moves the whole bf16 model (8.03B x 2 bytes, 15.0
GiB) onto every GPU before ZeRO-3 shards it; the script never resets the peak statistics
(`reset_peak_memory_stats` only under MEM_DEBUG), so `max_memory_reserved` at each step is at
least that start-up peak (`PublishedRun.whole_model_on_gpu_at_init`). The page's 8K figure,
16.3 GiB on both GPUs where the step itself needs far less, is that peak.
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import GiB
from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

_PAGE = (
    "Bekman, Machine Learning Engineering Open Book, github.com/stas00/ml-engineering "
    "insights/when-to-upgrade-gpus/README.md (commit 2943345, 2026-08-07), section "
    "'Worked example: meta-llama/Llama-3.1-8B training step, FA3 vs FA4'"
)
_FRAMEWORK = (
    "the page: 'bf16, 8 GPUs, DeepSpeed, mbs=1', environment table 'deepspeed 0.19.2'; "
    "benchmark.py: deepspeed.initialize with zero_optimization stage 3 (2 for the 8K "
    "decomposition), offload_optimizer cpu, AdamW"
)
_K = 1024
SEQ_KTOKENS = (8, 32, 64, 128, 192, 256)
"""The 'seqlen' column (K = 1024 tokens: benchmark.py's default 196608 is the 192K row)."""
TFLOPS_STATED = {
    "h200": (141, 324, 391, 420, 422, 419),
    "b200": (167, 524, 719, 836, 852, 852),
}
"""Table 'Results: speedup grows with sequence length', the H200 and B200 TFLOPS columns."""
PEAK_GIB_STATED = {
    "h200": (16.3, 25.8, 37.5, 66.5, 95.7, 124.5),
    "b200": (16.3, 25.9, 37.6, 66.7, 95.7, 124.6),
}
"""Table under 'Does the bigger GPU unlock configs the old one can't run?', peak GiB."""
DECOMPOSITION_TFLOPS_STATED = {"h200": 461, "b200": 778}
"""Table 'Step decomposition @ 8k' (ZeRO-2, no checkpointing, no offload), row 'total'."""


def arctic_flops_per_sequence(model: ModelSpec, seq_len: int) -> float:
    """benchmark.py estimate_tflos x 1e12 for one sequence: 6 x s x (every linear layer's
    weights + one V x h matrix) + 6 x s^2 x heads x head_dim x layers (causal attention)."""
    h, ffn, layers = model.d_model, model.d_ff, model.n_layers
    head_dim = h // model.n_heads
    q, kv = model.n_heads * head_dim, (model.n_kv_heads or model.n_heads) * head_dim
    dense = (3 * h * ffn + h * (2 * q + 2 * kv)) * layers + model.vocab_size * h
    return 6 * dense * seq_len + 6 * seq_len**2 * h * layers


_LONG_CONTEXT_NOTES = (
    "8 x {gpu_name}, one node. Llama 3.1 8B has Llama 3 8B's shapes (preset). Micro-batch 1 "
    "on each of 8 GPUs, no accumulation: 8 sequences a step, one random dense sequence each "
    "(no packing, no padding). ZeRO-3 ('zero_optimization' stage 3, overlap_comm), "
    "gradient checkpointing of every decoder layer (recompute 'full'), AdamW offloaded to "
    "the CPU (offload_optimizer cpu, pinned), Liger-Kernel on (its fused linear "
    "cross-entropy never holds the 128K-vocabulary logits: loss_kernel "
    "'fused-linear-cross-entropy' in place of the deepspeed row's torch cross-entropy). "
    "Step = {flops:.4g} FLOPs (arctic-causal) / {tflops} TFLOP/s = {seconds:.3f} s. Peak "
    "{gib} GiB max_memory_reserved on the worst rank. {kernel}"
)
_KERNEL = {
    "h200": "Attention: FlashAttention 3 ('flash-attn-3 3.0.0', attention_kernel flash3).",
    "b200": "Attention: the FlashAttention 4 beta ('flash-attn-4 4.0.0b22'), which the "
    "catalog lacks: timed at the deepspeed row's kernel and B200's default attention rate.",
}
_GPU_NAME = {"h200": "NVIDIA H200 (141 GB)", "b200": "NVIDIA B200 (180 GB)"}


def _long_context(gpu: str, index: int) -> PublishedRun:
    model = preset("llama-3-8b")
    k, tflops = SEQ_KTOKENS[index], TFLOPS_STATED[gpu][index]
    gib = PEAK_GIB_STATED[gpu][index]
    flops = arctic_flops_per_sequence(model, k * _K)
    return PublishedRun(
        id=f"mleng-llama31-8b-{gpu}-{k}k",
        source=f"{_PAGE}, table 'Results: speedup grows with sequence length' (the {k}K row, "
        f"{gpu.upper()} TFLOPS) and the peak-memory table under 'Does the bigger GPU unlock "
        "configs the old one can't run?'.",
        source_key="bekman-ml-engineering",
        framework="deepspeed-0.19.2",
        framework_source=_FRAMEWORK,
        model=model,
        seq_len=k * _K, gpu=gpu, n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="full", zero=3, micro_batch=1,
            global_batch=8, flash_attention=True, offload_optimizer="cpu",
        ),
        attention_kernel="flash3" if gpu == "h200" else "",
        loss_kernel="fused-linear-cross-entropy",
        whole_model_on_gpu_at_init=True,  # see the module's docstring: start-up's peak
        measured=Measurement(
            iteration_seconds=flops / (tflops * 1e12), tflops_per_second_per_gpu=tflops,
            flops_convention="arctic-causal", memory_bytes_per_gpu=gib * GiB,
            memory_measure="reserved",
            flops_note=f"{flops:.4g} FLOPs a sequence (one a GPU) at {k * _K} tokens",
        ),
        notes=_LONG_CONTEXT_NOTES.format(
            gpu_name=_GPU_NAME[gpu], flops=flops, tflops=tflops,
            seconds=flops / (tflops * 1e12), gib=gib, kernel=_KERNEL[gpu],
        ),
    )  # fmt: skip


def _decomposition(gpu: str) -> PublishedRun:
    model = preset("llama-3-8b")
    tflops = DECOMPOSITION_TFLOPS_STATED[gpu]
    flops = arctic_flops_per_sequence(model, 8 * _K)
    return PublishedRun(
        id=f"mleng-llama31-8b-{gpu}-8k-zero2",
        source=f"{_PAGE}, section 'Where the dense-path deficit comes from', table 'Step "
        f"decomposition @ 8k', row 'total' ({gpu.upper()} TFLOPS).",
        source_key="bekman-ml-engineering",
        framework="deepspeed-0.19.2",
        framework_source=_FRAMEWORK,
        model=model,
        seq_len=8 * _K, gpu=gpu, n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=2, micro_batch=1,
            global_batch=8, flash_attention=True,
        ),
        attention_kernel="flash3" if gpu == "h200" else "",
        measured=Measurement(
            iteration_seconds=flops / (tflops * 1e12), tflops_per_second_per_gpu=tflops,
            flops_convention="arctic-causal",
            flops_note=f"{flops:.4g} FLOPs a sequence at 8192 tokens",
        ),
        notes=(
            f"8 x {_GPU_NAME[gpu]}. The page's 'right-sized' 8K step: 'ZeRO-2, no activation "
            "checkpointing, right-sized for short context', no offload ('ZeRO-2, no activation "
            "checkpointing/offload'), micro-batch 1 on 8 GPUs, 'the measured wall-clock step "
            f"time'. Step = {flops:.4g} FLOPs / {tflops} TFLOP/s = "
            f"{flops / (tflops * 1e12):.3f} s. Its peak memory is not recorded: the page gives "
            "99 GiB without Liger-Kernel and 80 GiB with it for this step, and does not say "
            f"which the table's run used. {_KERNEL[gpu]}"
        ),
    )  # fmt: skip


MLENGINEERING: tuple[PublishedRun, ...] = (
    *(_long_context(gpu, i) for gpu in ("h200", "b200") for i in range(len(SEQ_KTOKENS))),
    _decomposition("h200"),
    _decomposition("b200"),
)
"""Llama 3.1 8B on 8 H200 / 8 B200: six sequence lengths in the long-context configuration on
each GPU, and the right-sized 8K step on each."""
