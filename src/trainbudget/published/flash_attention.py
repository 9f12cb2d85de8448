"""FlashAttention's GPT-3 training benchmark on one DGX A100 node (Dao-AILab/flash-attention).

training/README.md (commit 88173a1, 2023-01-17), section 'Training speed' / 'GPT3 (sequence
length 2048)': "We measure the wallclock training speed on one node with 8 x A100 80GB SXM4
80GB (400W) with NVLink." and the table

    | Model     | Batch size (tokens) | Through put (tokens/sec) | Hours / 1B tokens |
    | GPT3-125M | 0.5M                | 1310k                    |              0.21 |
    | GPT3-355M | 0.5M                | 503k                     |              0.55 |
    | GPT3-760M | 0.5M                | 245k                     |              1.13 |
    | GPT3-1.3B | 1M                  | 169k                     |              1.64 |
    | GPT3-2.7B | 1M                  | 85k                      |              3.27 |

The throughput is for the whole node: tokens/s/GPU = throughput / 8. Each row's model and
layout are the repo's training/configs/experiment/pile/<name>.yaml (read at the same tree):
GPT-2 blocks (learned positions, LayerNorm, 4h GeLU MLP, biases, tied head) from
configs/model/gpt2.yaml, sequence 2048 (pile/base.yaml `max_length: 2048`), vocab 50257 padded
to a multiple of 8 (`pad_vocab_size_multiple: 8` -> 50264), bf16, FlashAttention, no activation
checkpointing ("we don't need any activation checkpointing").

The README at that commit predates FlashAttention-2 (July 2023): its rows ran the first
FlashAttention kernel. FlashAttention-2's paper (systems_papers.py, Table 1) reports the 1.3B and
2.7B models on the same 8 GPUs with the new kernel, and the 2.7B there with 32 heads (head dim
80), not this table's 20: no row here repeats one of those measurements. Both come from the same
authors and training code, so they share one `source_key` (FLASH_ATTENTION_SOURCE_KEY).
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, preset
from trainbudget.published.systems_papers import FLASH_ATTENTION_SOURCE_KEY

N_GPUS = 8
PADDED_VOCAB = 50264  # 50257 rounded up to a multiple of 8

_SRC = (
    "Dao-AILab/flash-attention training/README.md (commit 88173a1), section 'Training speed', "
    "GPT3 table (8 x A100 80GB SXM4), row '{row}'; model and layout from "
    "training/configs/experiment/pile/{config}.yaml."
)
_NOTES = (
    "One DGX A100 node, 8 x A100 80GB SXM4 at 400 W, NVLink. Node throughput {total:,} "
    "tokens/s / 8 GPUs. The config's per-GPU micro-batch is an expression of the GPU's memory "
    "(`train.gpu_mem` = nvidia-smi memory.total / 1000, rounded: 82 on an 80GB A100, "
    "81920 MiB), which gives micro_batch {micro}; GA = global batch / (8 x micro). {extra}"
)


def _run(
    run_id: str,
    row: str,
    config: str,
    model_name: str,
    *,
    total_tokens_per_second: float,
    global_batch: int,
    micro: int,
    zero: int,
    n_heads: int | None = None,
    extra: str,
) -> PublishedRun:
    overrides: dict[str, object] = {"vocab_size": PADDED_VOCAB}
    if n_heads is not None:
        overrides |= {"n_heads": n_heads, "n_kv_heads": n_heads}  # multi-head attention
    return PublishedRun(
        id=run_id,
        source=_SRC.format(row=row, config=config),
        source_key=FLASH_ATTENTION_SOURCE_KEY,
        framework="other",
        framework_source="the repository's training code: training/src/train.py builds a "
        "PyTorch Lightning Trainer, with Lightning's DDPStrategy where the config sets no "
        "strategy, else the config's (DDPStrategyZero1)",
        model=preset(model_name, **overrides),
        seq_len=2048, gpu="a100-80gb", n_gpus=N_GPUS, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=N_GPUS, sp=False, recompute="none", zero=zero,
            micro_batch=micro, global_batch=global_batch, flash_attention=True,
        ),
        measured=Measurement(tokens_per_second_per_gpu=total_tokens_per_second / N_GPUS),
        attention_kernel="flash1",
        assumed=frozenset({"layout.micro_batch"}),
        notes=_NOTES.format(total=int(total_tokens_per_second), micro=micro, extra=extra),
    )  # fmt: skip


_DDP = "Plain DDP (pile/base.yaml `strategy: null`, 8 devices): zero=0."
_ZERO1 = (
    "`optimizer: adamw-zero` with `strategy: src.utils.ddp_zero1.DDPStrategyZero1` "
    "(optimizer states sharded over the 8 ranks): zero=1."
)

# fmt: off
FLASH_ATTENTION: tuple[PublishedRun, ...] = (
    # gpt3s-flash.yaml: gpt2-small (768, 12 heads, 12 layers); batch_size 32 when gpu_mem >= 40;
    # base.yaml global_batch_size 256 (= 0.5M tokens)
    _run("flashattn-gpt3-125m-8gpu", "GPT3-125M", "gpt3s-flash", "gpt3-125m",
         total_tokens_per_second=1310e3, global_batch=256, micro=32, zero=0, extra=_DDP),
    # gpt3m-flash.yaml: gpt2-medium (1024, 16, 24); batch_size 32 when gpu_mem >= 80
    _run("flashattn-gpt3-355m-8gpu", "GPT3-355M", "gpt3m-flash", "gpt3-350m",
         total_tokens_per_second=503e3, global_batch=256, micro=32, zero=0,
         extra=_DDP + " The repo's '355M' is GPT-3 Medium (the preset 'gpt3-350m')."),
    # gpt3l-flash.yaml: n_embd 1536, n_head 16, n_layer 24; batch_size 16 when gpu_mem >= 80
    _run("flashattn-gpt3-760m-8gpu", "GPT3-760M", "gpt3l-flash", "gpt3-760m",
         total_tokens_per_second=245e3, global_batch=256, micro=16, zero=1, extra=_ZERO1),
    # gpt3xl-flash.yaml: n_embd 2048, n_head 16, n_layer 24; batch_size 8 when gpu_mem >= 80;
    # global_batch_size 512 (= 1M tokens)
    _run("flashattn-gpt3-1.3b-8gpu", "GPT3-1.3B", "gpt3xl-flash", "gpt3-1.3b",
         total_tokens_per_second=169e3, global_batch=512, micro=8, zero=1, extra=_ZERO1),
    # gpt3-2.7B-flash-hdim128.yaml: n_embd 2560, n_head 20 ("Headdim 128 is faster than headdim
    # 80"), n_layer 32; batch_size 4 when gpu_mem >= 80; inherits gpt3xl's 512 and ZeRO-1
    _run("flashattn-gpt3-2.7b-8gpu", "GPT3-2.7B", "gpt3-2.7B-flash-hdim128", "gpt3-2.7b",
         total_tokens_per_second=85e3, global_batch=512, micro=4, zero=1, n_heads=20,
         extra=_ZERO1 + " README: 'For the GPT3-2.7B model, we set head dimension to 128 "
         "(instead of 80)': 20 heads, not GPT-3's 32."),
)
# fmt: on
