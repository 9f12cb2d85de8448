"""Llama 3.1 8B under FSDP2 on 8 x H100 SXM in bf16 and in FP8 (torchao Float8Linear), from
Hugging Face Accelerate's example (github.com/huggingface/accelerate
examples/torch_native_parallelism/README.md, section "FSDP2 + ao Float8Linear", and its script
fsdp2_fp8.py; the README at commit 1d57b830).

The README states the result in prose over its charts: "this improves performance by ~25%
compared to `bf16`, reaching ~10000 tokens per second, per device on 8x H100 GPUs, compared to
~8000 tokens per second using `bf16`", "generated on 8x H100 SXM GPUs, with 8192 sequence
length and 1000 steps". The figures are round readings of the charts; the script pins the run:
FSDP2 over the 8 GPUs, one packed 8192-token sequence per GPU and step, no activation
checkpointing, regional torch.compile, AdamW on bf16 weights, SDPA attention (Hugging Face's
default), and for FP8 torchao's Float8Linear with FP8 all-gather of the weights.
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

_SOURCE = (
    "Hugging Face Accelerate, github.com/huggingface/accelerate "
    "examples/torch_native_parallelism/README.md (commit 1d57b830), section 'FSDP2 + ao "
    "Float8Linear', the text on the figures 'TPS per device, BF16 vs FP8'; the run's setup "
    "from the section's script fsdp2_fp8.py and utils.py."
)
_FRAMEWORK = (
    "fsdp2_fp8.py: 'FullyShardedDataParallelPlugin(fsdp_version=2, ...)', "
    "'TorchDynamoPlugin(backend=\"inductor\", use_regional_compilation=True)', Accelerate's "
    "FSDP2 (PyTorch fully_shard)"
)
SEQ_LEN = 8192
TOKENS_PER_SECOND_PER_GPU_STATED = {"bf16": 8000, "fp8": 10000}
"""'~8000 tokens per second using bf16', '~10000 tokens per second, per device' with FP8."""

_NOTES = (
    "8 x H100 SXM ('generated on 8x H100 SXM GPUs'). Model: "
    "NousResearch/Hermes-3-Llama-3.1-8B's config (fsdp2_fp8.py MODEL_ID), Llama 3.1 8B's "
    "shapes (preset llama-3-8b), built from_config with torch_dtype=bfloat16. Data: "
    "TinyStories packed into 8192-token sequences without document masks (utils.py "
    "create_packed_sequences; the collate passes no position ids): full causal attention over "
    "8192. DataLoader batch_size=1 on each of 8 ranks, one optimizer step per batch: 8 "
    "sequences a step. FSDP2 over all 8 GPUs (zero=3), no activation checkpointing (none is "
    "set), regional torch.compile. AdamW (torch.optim, lr 1e-5) over bf16 weights: the "
    "weights and optimizer state are bf16 ({precision_note}). Figure: '~{tps} tokens per "
    "second, per device', a round reading of the README's chart, as tokens of one rank over "
    "the wall time after 5 warm-up steps (utils.py PerformanceTracker); step = 8192 / "
    "{tps} s. Attention: SDPA, Hugging Face's default (PyTorch's flash kernel on H100)."
)


def _run(precision: str) -> PublishedRun:
    tps = TOKENS_PER_SECOND_PER_GPU_STATED[precision]
    fp8 = precision == "fp8"
    return PublishedRun(
        id=f"accelerate-llama31-8b-fsdp2-{precision}-8gpu",
        source=_SOURCE,
        source_key="huggingface-accelerate-fsdp2-fp8",
        framework="pytorch-fsdp2",
        framework_source=_FRAMEWORK,
        model=preset("llama-3-8b"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=3, micro_batch=1,
            global_batch=8, flash_attention=True,
        ),
        precision="fp8" if fp8 else "bf16",
        measured=Measurement(tokens_per_second_per_gpu=tps),
        assumed=frozenset({"precision"}) if fp8 else frozenset(),
        notes=_NOTES.format(
            tps=tps,
            precision_note=(
                "precision 'fp8' assumed for the record: torchao Float8Linear on the linear "
                "layers Accelerate's AORecipeKwargs converts, enable_fsdp_float8_all_gather="
                "True, over bf16 master weights the catalog's fp8 row does not describe"
                if fp8 else "precision 'bf16': set_mixed_precision('bf16') over bf16 weights"
            ),
        ),
    )  # fmt: skip


ACCELERATE_FP8: tuple[PublishedRun, ...] = (_run("bf16"), _run("fp8"))
"""The README's two runs: bf16, and FP8 through torchao's Float8Linear."""
