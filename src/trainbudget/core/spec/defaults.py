"""The defaults every command shares, each with its reason: one question, one answer.

`estimate`, `plan`, `report` and `fit` read their unstated inputs from here, and print the
choice and its source in their summary and assumptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import ModelSpec

DEFAULT_PRECISION = "bf16-mixed"
"""bf16 matmuls with fp32 master weights and AdamW state: what Llama 2/3, OLMo and the Megatron
and torchtitan recipes train with."""

DEFAULT_OPTIMIZER = "adamw"
"""AdamW (Loshchilov & Hutter 2019): the optimizer of every open LLM pre-training report."""

DEFAULT_GPU = "h100-sxm"
"""The accelerator of every command that takes --gpu without requiring it: the H100 SXM, the
most common GPU of the published training runs this project is checked against."""

DEFAULT_FLASH_ATTENTION = True
"""FlashAttention (or PyTorch SDPA's fused kernels): no s x s score matrix stored; the default
of PyTorch >= 2.0, Megatron-LM and torchtitan. `--no-flash-attention` stores it."""

DEFAULT_MEMORY_HEADROOM: float | None = None
"""No flat headroom: a plan fits by the device rule (core.parallel.fits), its peak plus the CUDA
context and NCCL buffers, times the model's median memory error on similar published runs, at
most the memory the device gives the process. `--memory-headroom F` sets the flat rule
instead: the allocated peak at most F of that memory."""

DEFAULT_TOKENS_PER_BATCH = 4 * 2**20
"""Tokens per optimizer step when no global batch is given. Llama 1 trained every size on
batches of 4M tokens (Touvron et al. 2023, arXiv:2302.13971, Table 2: 2,048 sequences of 2,048)
and so did Llama 2 (arXiv:2307.09288, Table 1: "All models are trained with a global
batch-size of 4M tokens", 1,024 sequences of 4,096)."""


@dataclass(frozen=True)
class Chosen:
    """A default: its value and where it came from, for the summary and the assumptions."""

    value: int
    source: str


def default_seq_len(model: ModelSpec) -> Chosen:
    """The model's pre-training sequence length: pretrain_seq_len when the model was trained
    shorter than the context it was extended to, else max_seq_len."""
    if model.pretrain_seq_len:
        return Chosen(
            model.pretrain_seq_len,
            f"{model.name}'s pre-training length, its context being {model.max_seq_len:,}; "
            "--seq-len to change",
        )
    return Chosen(model.max_seq_len, f"{model.name}'s context length; --seq-len to change")


def default_global_batch(seq_len: int) -> Chosen:
    """Sequences per step: about DEFAULT_TOKENS_PER_BATCH tokens, as the power of two nearest it
    on a log scale, so that the usual data-parallel degrees divide it (512 sequences at 8192,
    2,048 at 2048); at least one sequence."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    batch = 2 ** max(0, round(math.log2(DEFAULT_TOKENS_PER_BATCH / seq_len)))
    return Chosen(
        batch,
        f"{batch * seq_len:,} tokens per step, the power of two of sequences nearest "
        f"{DEFAULT_TOKENS_PER_BATCH / 2**20:g}M tokens as Llama 1/2 trained; --global-batch "
        "to change",
    )
