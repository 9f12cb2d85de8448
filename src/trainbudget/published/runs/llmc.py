"""GPT-2 124M and 350M trained by Karpathy's llm.c on one 8 x A100 80GB SXM node, as the
repository's launch scripts state them (github.com/karpathy/llm.c scripts/run_gpt2_124M.sh and
run_gpt2_350M.sh, commit a0d5dbb, 2024-05-30).

llm.c is a C/CUDA trainer (no PyTorch): cuDNN flash attention (`USE_CUDNN=1`), bf16 compute over
fp32 master weights, ZeRO-1 optimizer sharding over MPI + NCCL. Each script's header states the
node, the tokens a step and the step time ("steps in ~300ms/iter"); the mpirun line gives the
layout: `-b` micro-batch, `-t` sequence, `-d` tokens a step, `-r 0` no recomputation,
`-z 1` ZeRO-1.

Left out: scripts/run_gpt3_125M.sh's "~150ms/iter" for the GPT-3 125M (2048 tokens, the same
524,288 tokens a step): 6 x 125M x 524,288 / 0.150 s / 8 GPUs is 328 TFLOP/s a GPU before
attention, above the A100's 312 TFLOP/s peak, so that figure cannot be a measured A100 step
(tests/published/test_llmc.py).
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, preset

_REPO = "github.com/karpathy/llm.c"
TOKENS_PER_STEP = 524288
"""'-d 524288' in both scripts: 64 sequences of 1024 on each of 8 GPUs, no accumulation."""
GPT3_125M_MS_STATED = 150
"""scripts/run_gpt3_125M.sh: 'on 8X A100 80GB SXM ($14/hr) steps in ~150ms/iter' (left out)."""

_FRAMEWORK = (
    "the scripts: 'make train_gpt2cu USE_CUDNN=1', 'mpirun -np 8 ./train_gpt2cu' (llm.c's own "
    "C/CUDA trainer, not PyTorch: framework 'other', the framework-neutral row)"
)
_NOTES = (
    "8 x A100 80GB SXM, one node (the script's header). {model_note} llm.c pads the "
    "vocabulary to 50304. mpirun line: '-b 64 -t 1024 -d 524288' (micro-batch 64 of 1024 "
    "tokens on each of 8 GPUs = 524,288 tokens: no accumulation), '-r 0' (no "
    "recomputation), '-z 1' (ZeRO-1). bf16 compute with fp32 master weights (llm.c's "
    "default), cuDNN flash attention, the loss by fused_classifier (16-bit logits, their "
    "gradient written over them: loss_kernel 'in-place-fused-classifier'). Step "
    "'~{ms}ms/iter' as the header states it: a round figure, not a log average."
)


def _run(run_id: str, script: str, model_name: str, ms: int, model_note: str) -> PublishedRun:
    return PublishedRun(
        id=run_id,
        source=f"Karpathy, llm.c, {_REPO} {script} (commit a0d5dbb, 2024-05-30), the header "
        "comment section and the mpirun command line.",
        source_key="karpathy-llmc",
        framework="other",
        framework_source=_FRAMEWORK,
        model=preset(model_name, vocab_size=50304),
        seq_len=1024, gpu="a100-80gb", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=1, micro_batch=64,
            global_batch=TOKENS_PER_STEP // 1024, flash_attention=True,
        ),
        loss_kernel="in-place-fused-classifier",
        measured=Measurement(iteration_seconds=ms / 1000),
        notes=_NOTES.format(model_note=model_note, ms=ms),
    )  # fmt: skip


# fmt: off
LLMC: tuple[PublishedRun, ...] = (
    # "# GPT-2 (124M) repro on FineWeb", "# 18,865 steps of 524,288 tokens/step",
    # "# on 8X A100 80GB SXM ($14/hr) steps in ~300ms/iter"; '-e "d12"'
    _run("llmc-gpt2-124m-8gpu", "scripts/run_gpt2_124M.sh", "gpt2", 300,
         "GPT-2 124M ('-e \"d12\"': 12 layers, width 768, 12 heads; preset gpt2)."),
    # "# GPT-2 (350M) repro on FineWeb", "# 60K steps on 524,288 tokens/step",
    # "# on 8X A100 80GB SXM ($14/hr) steps in ~820ms/iter"; '-e "d24"'
    _run("llmc-gpt2-350m-8gpu", "scripts/run_gpt2_350M.sh", "gpt2-medium", 820,
         "GPT-2 350M ('-e \"d24\"': 24 layers, width 1024, 16 heads; preset gpt2-medium)."),
)
# fmt: on
