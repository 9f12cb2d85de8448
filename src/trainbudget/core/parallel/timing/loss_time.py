"""Memory traffic of the cross-entropy over the logits, by the loss kernel a framework runs
(`core.spec.engines.LOSS_KERNELS`): the loss is memory-bound, so its time is its bytes at the
HBM rate, and what differs between kernels is how many passes over logit-sized tensors they make.

Every kernel reads the 16-bit logits once and writes their 16-bit gradient once (the head's
GEMMs write the one and read the other). An unfused loss adds fp32 logit-sized tensors: its
log-probabilities (or softmax) written forward and read backward, and its fp32 gradient written
and read by the cast back to 16 bits. A fused kernel keeps every intermediate in registers.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from trainbudget.core.errors import unknown_key
from trainbudget.core.ops import Ops
from trainbudget.core.single.activations import FP32_BYTES

UNFUSED_FP32_BYTES_PER_LOGIT = 4 * FP32_BYTES
"""fp32 log-probabilities written and read, fp32 gradient written and read: 16 bytes."""

LOSS_FP32_BYTES_PER_LOGIT: Mapping[str, float] = MappingProxyType(
    {
        # F.cross_entropy(logits.float()): log_softmax's fp32 output saved for backward, its
        # backward's fp32 gradient, cast back to 16 bits
        "torch-cross-entropy": UNFUSED_FP32_BYTES_PER_LOGIT,
        # Megatron-Core tensor_parallel/cross_entropy.py: the logits cast to fp32, the softmax
        # normalised in place and saved, its backward's gradient written over it, then cast;
        # its in-place max-subtract and exp passes are not counted (a lower bound)
        "megatron-vocab-parallel": UNFUSED_FP32_BYTES_PER_LOGIT,
        # torchtune's chunked loss runs F.cross_entropy(logits.float()) chunk by chunk: the
        # same traffic, in smaller pieces
        "chunked-cross-entropy": UNFUSED_FP32_BYTES_PER_LOGIT,
        # KempnerForge's F.cross_entropy on the bf16 logits, uncast: its 16-bit
        # log-probabilities written and read, nll_loss's 16-bit gradient written and read
        # (16-bit passes, not fp32: 4 x 2 bytes)
        "gathered-16bit-cross-entropy": 4 * 2.0,
        # Liger's fused linear cross-entropy: one Triton kernel reads a chunk's 16-bit logits
        # and writes their gradient over them in place (fused_linear_cross_entropy_forward)
        "fused-linear-cross-entropy": 0.0,
        # llm.c's fused_classifier: one kernel computes softmax, loss and the logits' gradient,
        # written over the 16-bit logits in place (train_gpt2.cu, 'fused classifier: does the
        # forward pass and first part of the backward pass')
        "in-place-fused-classifier": 0.0,
    }
)
"""Loss kernel -> bytes it moves per logit beyond the 16-bit logits read and gradient written,
forward and backward together: the unfused kernels' fp32 passes (the name's 'FP32'), or the
16-bit passes of a loss that never casts."""


COMPILED_LOSS_KERNEL = "torch-cross-entropy"
"""The loss torch.compile fuses: F.cross_entropy(logits.float(), targets) inside the compiled
model. Inductor (torch 2.13, its C++ back end on CPU; the fusion decisions are its scheduler's,
shared with the CUDA back end) generates one forward kernel, fused '_log_softmax', '_to_copy'
and 'nll_loss_forward', that allocates only per-row fp32 buffers (max and log-sum-exp), and one
backward kernel that recomputes the softmax from the 16-bit logits and those rows and writes the
16-bit gradient: no fp32 logit-sized tensor, one more read of the logits
(tests/model/test_inductor_kernels.py compiles it and reads the buffers)."""


def loss_fp32_bytes_per_logit(loss_kernel: str) -> float:
    """The extra traffic per logit of `loss_kernel` (`LOSS_FP32_BYTES_PER_LOGIT`); an unknown
    name lists the known ones."""
    if loss_kernel not in LOSS_FP32_BYTES_PER_LOGIT:
        raise unknown_key("loss kernel", loss_kernel, list(LOSS_FP32_BYTES_PER_LOGIT))
    return LOSS_FP32_BYTES_PER_LOGIT[loss_kernel]


def loss_extra_bytes_per_logit(loss_kernel: str, compiled: bool, e: int) -> float:
    """Bytes per logit the loss moves beyond the 16-bit logits read once and their gradient
    written once: the kernel's fp32 traffic, or, for the eager cross-entropy under
    torch.compile (`COMPILED_LOSS_KERNEL`), the backward's second read of the logits (`e`
    bytes each)."""
    fp32 = loss_fp32_bytes_per_logit(loss_kernel)
    return e if compiled and loss_kernel == COMPILED_LOSS_KERNEL else fp32


def loss_seconds(logits: Any, e: int, extra_bytes_per_logit: float, hbm_rate: float) -> Any:
    """Seconds of the loss over `logits` elements on one GPU, both passes: the 16-bit logits
    read and their gradient written (e bytes each), and the kernel's extra traffic
    (`loss_extra_bytes_per_logit`), at the achievable HBM rate `hbm_rate` (numbers or arrays)."""
    return logits * (2 * e + extra_bytes_per_logit) / hbm_rate


def loss_logits(tokens: Any, vocab: int, tp: Any, whole_vocabulary: bool) -> Any:
    """Logit elements the loss runs over on one GPU: tokens x V / tp where the loss runs on the
    vocabulary-parallel logits, tokens x V where the head gathers them whole to every TP rank
    (`LossKernel.whole_vocabulary`: every rank then runs the same loss over all of them)."""
    return tokens * vocab / (1 if whole_vocabulary else tp)


def gathered_logits_copy_seconds(
    tokens: Any, vocab: int, tp: Any, e: int, hbm_rate: float, xp: Ops
) -> Any:
    """Seconds of the copies DTensor adds around the gather of the head's vocabulary-split
    logits (ColwiseParallel(output_layouts=Replicate()), torch 2.13): forward, Shard(-1) ->
    Replicate runs `funcol.all_gather_single(gather_dim=-1)`, whose NCCL all-gather stacks the
    shards along dim 0, so `_maybe_view_chunk_cat` re-lays them along the vocabulary with a
    torch.cat (tokens x V read and written; the view shortcut needs a leading dim of tp and
    nothing between it and the vocabulary); backward, the Replicate gradient goes back to
    Shard(-1) by `Shard._replicate_to_shard`, a local chunk cloned (tokens x V / tp read and
    written), no collective. None with one TP rank (nothing is redistributed)."""
    moved = 2 * tokens * vocab * e * (1 + 1 / tp)  # cat forward, cloned slice backward
    return xp.where(tp > 1, moved / hbm_rate, 0.0)
