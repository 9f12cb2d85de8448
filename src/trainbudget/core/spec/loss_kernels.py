"""Loss kernels as data: what the cross-entropy a framework runs over the logits keeps on the
GPU that holds the head -- saved for its backward and created at its backward's start. A
framework row (`frameworks.Framework.loss_kernel`) names one; the per-GPU phase model
(`core.parallel.memory.gpu_terms`) reads its columns.

Each row cites the code whose behaviour it records."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import unknown_key


@dataclass(frozen=True, kw_only=True)
class LossKernel:
    """What the cross-entropy over the logits (tokens x V/tp, or tokens x V where the head
    gathers them: `whole_vocabulary`) holds: saved for backward and at its backward's start."""

    name: str
    keeps_logits: bool
    """The 16-bit logits stay alive (saved, or held by the caller) until the step ends."""
    saved_fp32_tensors: int
    """fp32 logit-sized tensors saved for backward (log-probabilities, or the softmax)."""
    saved_16bit_tensors: int = 0
    """Logit-sized tensors in the activation dtype saved for backward: the log-probabilities
    of a loss run on the 16-bit logits without a cast to fp32."""
    backward_fp32_tensors: float
    """fp32 logit-sized tensors its backward creates beside them (a fraction where the
    backward runs one chunk of the tokens at a time: each chunk's share)."""
    backward_16bit_tensors: float
    """Logit-sized gradients in the activation dtype its backward creates (as above)."""
    chunk_logits_per_hidden: float = 0.0
    """Logits alive at once in the loss's forward, as a multiple of the head input's elements
    (tokens x d_model), for a kernel that runs the head and the loss over a chunk of tokens at
    a time: Liger sizes a chunk to hold about tokens x d_model 16-bit logits, its gradient
    written over them in place (rows: the next power of two of tokens / ceil(V / d_model),
    so between 0.5 and 1 of that budget; 1 is counted). 0: the kernel holds every logit."""
    whole_vocabulary: bool = False
    """Under tensor parallelism the head's vocabulary-split output is gathered whole to every
    rank before the loss (DTensor's ColwiseParallel(output_layouts=Replicate()), no loss
    parallel), so every logit-sized tensor here spans tokens x V on each rank, not V/tp."""
    head_grads_in_forward: bool = False
    """The loss's forward computes the head's gradients and keeps them for its backward: the
    head input's (tokens x d_model, activation dtype) in place of the input the unfused head
    saves, and the head weight's (V/tp x d_model, weight dtype) from the loss's forward until
    the step's gradients take it (Liger: grad_input and grad_weight saved for backward). Its
    backward only scales them: no logit-sized temporaries, and no GEMM recomputed."""
    source: str


KEMPNERFORGE_LOSS_SOURCE = (
    "KempnerForge 01b461a (github.com/KempnerInstitute/KempnerForge): scripts/train.py runs "
    "F.cross_entropy(logits.view(-1, V), labels.view(-1)) on the model's bf16 logits, no cast, "
    "the logits held by the caller through backward; kempnerforge/distributed/tensor_parallel.py "
    "parallelizes the head as ColwiseParallel(input_layouts=Shard(1), output_layouts="
    "Replicate()), 'split vocab dim, gather to Replicate for loss', so each TP rank holds the "
    "whole vocabulary's logits. On 16-bit logits torch 2.13 saves log_softmax's 16-bit output "
    "(nll_loss saves the same tensor) and its backward makes two 16-bit logit-sized "
    "gradients, nll_loss's and log_softmax's (MemTracker: "
    "tests/core/parallel/memory/test_loss_kernels.py)"
)

TORCHTUNE_OUTPUT_CHUNKS = 8
"""torchtune's LinearCrossEntropyLoss default num_output_chunks."""

LOSS_KERNELS = MappingProxyType(
    {
        k.name: k
        for k in (
            LossKernel(
                name="torch-cross-entropy",
                keeps_logits=True,
                saved_fp32_tensors=1,
                backward_fp32_tensors=2,
                backward_16bit_tensors=0,
                source="torch.nn.functional.cross_entropy on the logits cast to fp32: "
                "log_softmax's fp32 output saved, its backward's fp32 gradients of the "
                "log-probabilities and of the logits (the reference model; MemTracker: the "
                "profile matrix)",
            ),
            LossKernel(
                name="gathered-16bit-cross-entropy",
                keeps_logits=True,
                saved_fp32_tensors=0,
                saved_16bit_tensors=1,
                backward_fp32_tensors=0,
                backward_16bit_tensors=2,
                whole_vocabulary=True,
                source=KEMPNERFORGE_LOSS_SOURCE,
            ),
            LossKernel(
                name="megatron-vocab-parallel",
                keeps_logits=False,
                saved_fp32_tensors=1,
                backward_fp32_tensors=0,
                backward_16bit_tensors=1,
                source="Megatron-Core tensor_parallel/cross_entropy.py "
                "_VocabParallelCrossEntropy: the logits cast to fp32 once (.float()), "
                "exponentiated and normalised in place, the softmax saved; its backward turns "
                "that softmax into the gradient in place; the 16-bit logits are not kept, "
                "and the cast's backward makes one 16-bit gradient",
            ),
            LossKernel(
                name="fused-linear-cross-entropy",
                keeps_logits=False,
                saved_fp32_tensors=0,
                backward_fp32_tensors=0,
                backward_16bit_tensors=0,
                chunk_logits_per_hidden=1.0,
                head_grads_in_forward=True,
                source="Liger-Kernel LigerFusedLinearCrossEntropyLoss "
                "(src/liger_kernel/ops/fused_linear_cross_entropy.py, "
                "fused_linear_cross_entropy_forward): the tokens cut into chunks of "
                "next_power_of_2(cdiv(BT, cdiv(V, H))) rows so a chunk's 16-bit logits are about "
                "BT x H elements; the cross-entropy kernel writes each chunk's gradient over its "
                "logits, which two GEMMs turn into grad_input (BT x H, the input's dtype) and "
                "grad_weight (V x H, the weight's dtype, accumulated over chunks); both saved "
                "for backward, which only scales them by the loss's gradient (no logits kept, "
                "no fp32 logit-sized tensor, the head's GEMMs not recomputed)",
            ),
            LossKernel(
                name="in-place-fused-classifier",
                keeps_logits=True,
                saved_fp32_tensors=0,
                backward_fp32_tensors=0,
                backward_16bit_tensors=0,
                source="llm.c train_gpt2.cu gpt2_forward: 'fused classifier: does the forward "
                "pass and first part of the backward pass' -- fused_classifier reads the 16-bit "
                "logits in acts.output (B x T x Vp, kept for the step) and writes their "
                "gradient over them in place; only the per-token fp32 losses (B x T) beside",
            ),
            LossKernel(
                name="chunked-cross-entropy",
                keeps_logits=False,
                saved_fp32_tensors=1,
                backward_fp32_tensors=2 / TORCHTUNE_OUTPUT_CHUNKS,
                backward_16bit_tensors=1 / TORCHTUNE_OUTPUT_CHUNKS,
                source="torchtune torchtune/modules/loss/cross_entropy_loss.py "
                "LinearCrossEntropyLoss (num_output_chunks=8), eager: the hidden states split "
                "into 8 chunks along the sequence, each projected by the head and passed to "
                "F.cross_entropy(logits.float()); the 16-bit logits of a chunk are freed once "
                "cast (the head saves its input, the cast nothing), every chunk's fp32 "
                "log-probabilities are saved, and the backward runs chunk by chunk: two fp32 "
                "gradients and one 16-bit gradient of one chunk at a time",
            ),
        )
    }
)


def get_loss_kernel(name: str) -> LossKernel:
    if name not in LOSS_KERNELS:
        raise unknown_key("loss kernel", name, list(LOSS_KERNELS))
    return LOSS_KERNELS[name]
