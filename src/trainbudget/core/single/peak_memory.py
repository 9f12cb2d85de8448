"""The peak of one training step, phase by phase, for the project's reference implementation
(trainbudget.model: gradients set to None between steps, torch's single-tensor optimizers,
master weights updated one tensor at a time, the loss taken in fp32).

Where `memory.training_memory` adds every part (an upper bound), this finds when the step
peaks and what is alive then. Three moments compete (measured with torch's MemTracker on
fake tensors; the profile tests hold this model to those measurements):

- backward start: all activations, the logits and their fp32 log-probabilities, and the two
  fp32 vocabulary-sized gradients the loss backward creates (of the log-probabilities, then of
  the logits); no parameter gradients yet;
- backward end: every gradient, and, for a tied embedding, the head's gradient waiting in a
  buffer while the embedding's dense gradient is added to it (three V x d tensors at once);
- optimizer step: every gradient plus the update's temporaries, the size of the largest tensor
  (the fp32 gradient copy under master weights, and the optimizer's own scratch).
Through all three the caller still holds the logits the forward returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.single.activations import FP32_BYTES, ActivationMemory, activation_memory
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.spec.engines import LossKernel, get_loss_kernel
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import (
    Optimizer,
    Precision,
    get_precision,
    get_trainable_optimizer,
)

LAYERNORM_STATS_BYTES = 2 * FP32_BYTES  # mean and rstd per token, fp32
RMSNORM_STATS_BYTES = FP32_BYTES  # rstd per token, fp32


@dataclass(frozen=True, kw_only=True)
class PhaseMemory:
    phase: str
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    """fp32 master weights and optimizer state."""
    activations_bytes: float
    temporaries_bytes: float
    buffers_bytes: float = 0.0
    """A data-parallel engine's own buffers (gradient buckets, gathered parameters:
    core.parallel.memory.rank_peak); none on one device."""

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.temporaries_bytes
            + self.buffers_bytes
        )


@dataclass(frozen=True, kw_only=True)
class PeakMemory:
    phases: tuple[PhaseMemory, ...]

    @property
    def peak(self) -> PhaseMemory:
        return max(self.phases, key=lambda p: p.total_bytes)

    @property
    def total_bytes(self) -> float:
        return self.peak.total_bytes


REFERENCE_LOSS = get_loss_kernel("torch-cross-entropy")
"""The reference model's loss (model/transformer.py: F.cross_entropy on fp32 logits)."""


def norm_stats_bytes(spec: ModelSpec) -> int:
    """Bytes per token a norm keeps for its backward: mean and rstd (LayerNorm) or rstd."""
    return LAYERNORM_STATS_BYTES if spec.norm == "layernorm" else RMSNORM_STATS_BYTES


def loss_backward_bytes(
    tokens: Any, vocab: Any, *, kernel: LossKernel, activation_bytes: int, extra: Any = 0
) -> Any:
    """What the loss backward creates at its start over `tokens` x `vocab` logits: the
    kernel's fp32 tensors (`extra` more: DTensor's loss parallel) and 16-bit gradients."""
    fp32 = (kernel.backward_fp32_tensors + extra) * FP32_BYTES
    return tokens * vocab * (fp32 + kernel.backward_16bit_tensors * activation_bytes)


def loss_chunk_bytes(
    tokens: Any, d_model: int, *, kernel: LossKernel, activation_bytes: int
) -> Any:
    """The 16-bit logits of one chunk (and their gradient, written over them) that a fused
    linear cross-entropy holds at its forward's end, beside every saved tensor: about tokens x
    d_model elements (`LossKernel.chunk_logits_per_hidden`); 0 for a kernel over every logit."""
    return kernel.chunk_logits_per_hidden * tokens * d_model * activation_bytes


def loss_head_grad_bytes(vocab: Any, d_model: int, *, kernel: LossKernel, weight_bytes: int) -> Any:
    """The head weight's gradient (`vocab` x d_model rows on this GPU) that a fused linear
    cross-entropy computes in its forward and keeps until its backward hands it on
    (`LossKernel.head_grads_in_forward`); the head input's gradient it keeps takes the place
    of the input an unfused head saves, the same bytes, so it is not counted again."""
    return kernel.head_grads_in_forward * vocab * d_model * weight_bytes


def tied_gradient_sum_bytes(spec: ModelSpec, grad_bytes: int, tp: Any = 1) -> Any:
    """At backward end a tied embedding's head gradient waits in a buffer while the
    embedding's dense gradient is added to it: two more V x d gradients (V/tp rows each)."""
    if not spec.tied_embeddings:
        return 0.0
    return 2 * spec.vocab_size / tp * spec.d_model * grad_bytes


def update_scratch_bytes(prec: Precision, opt: Optimizer, fused: Any, xp: Ops = SCALAR) -> Any:
    """Bytes per element of the largest tensor that the optimizer update holds beside it: its
    table row's scratch tensors (none for a fused kernel) and, with fp32 masters, the fp32
    copy of the gradient being applied."""
    scratch_bytes = FP32_BYTES if prec.master_bytes else prec.state_bytes
    scratch = xp.where(fused, 0, opt.n_scratch * scratch_bytes)
    return scratch + (FP32_BYTES if prec.master_bytes else 0)


def largest_tensor(spec: ModelSpec) -> int:
    """Elements of the largest parameter tensor (usually the V x d embedding)."""
    return max(r * c for _, r, c, _ in matrix_shapes(spec))


def _first_recomputation(
    spec: ModelSpec,
    prec: Precision,
    acts: ActivationMemory,
    tokens: int,
    stats: float,
    params: float,
    state: float,
    logits: float,
) -> PhaseMemory:
    """Full recomputation: the last layer is rebuilt once the loss gradients are gone, next to
    the head's gradient and the gradient of the residual stream."""
    rebuilt = acts.per_layer.total_bytes + 2 * tokens * stats
    return PhaseMemory(
        phase="first recomputation",
        params_bytes=params,
        grads_bytes=spec.vocab_size * spec.d_model * prec.grad_bytes,
        optimizer_bytes=state,
        activations_bytes=(spec.n_layers - 1) * acts.checkpoint_bytes
        + rebuilt
        + acts.head_bytes
        + logits,
        temporaries_bytes=tokens * spec.d_model * prec.grad_bytes,
    )


def training_peak(
    spec: ModelSpec,
    *,
    precision: str,
    optimizer: str,
    seq_len: int,
    micro_batch: int,
    recompute: str = "none",
    flash_attention: bool = True,
    fused_update: bool = False,
) -> PeakMemory:
    """Peak bytes of a training step of the reference model (FlashAttention-style SDPA,
    no dropout, one micro-batch). flash_attention=False keeps each layer's s x s attention
    matrix as well (an eager attention, activations.py's term): the reference model always
    runs SDPA, so only the default is held to MemTracker. fused_update=True: the update is
    torch's fused kernel (the trainer's Adam and AdamW: model/optimizers.py), which allocates
    no scratch; the default is the single-tensor update the profile tests measure."""
    # an estimate-only optimizer has no reference update whose scratch could be counted
    prec, opt = get_precision(precision), get_trainable_optimizer(optimizer)
    p = count_params(spec)
    n, e = p.total, prec.activation_bytes
    tokens = seq_len * micro_batch
    params = n * prec.weight_bytes
    grads = n * prec.grad_bytes
    state = n * (prec.master_bytes + opt.state_bytes_per_param(prec))
    acts = activation_memory(
        spec,
        seq_len=seq_len,
        micro_batch=micro_batch,
        activation_bytes=e,
        weight_bytes=prec.weight_bytes,
        recompute=recompute,
        flash_attention=flash_attention,
    )
    stats = norm_stats_bytes(spec)
    n_norms = 2 * spec.n_layers + 1
    vocab = tokens * spec.vocab_size
    logits = vocab * e  # returned by the forward, held by the caller
    layers = acts.layers_bytes + acts.head_bytes + n_norms * tokens * stats
    phases = []
    if recompute == "full":
        # at backward start only the checkpoints (each layer's input) exist
        layers = spec.n_layers * acts.checkpoint_bytes + acts.head_bytes + tokens * stats
        phases.append(_first_recomputation(spec, prec, acts, tokens, stats, params, state, logits))
    backward_start = PhaseMemory(
        phase="backward start",
        params_bytes=params,
        grads_bytes=0.0,
        optimizer_bytes=state,
        # logits + fp32 log-probabilities saved by the loss
        activations_bytes=layers + logits + vocab * FP32_BYTES,
        # the loss backward's fp32 gradients of the log-probabilities and of the logits
        temporaries_bytes=loss_backward_bytes(
            tokens, spec.vocab_size, kernel=REFERENCE_LOSS, activation_bytes=e
        ),
    )
    tied_sum = tied_gradient_sum_bytes(spec, prec.grad_bytes)
    backward_end = PhaseMemory(
        phase="backward end",
        params_bytes=params,
        grads_bytes=grads,
        optimizer_bytes=state,
        activations_bytes=logits,
        temporaries_bytes=tied_sum,
    )
    scratch = update_scratch_bytes(prec, opt, fused_update)
    optimizer_step = PhaseMemory(
        phase="optimizer step",
        params_bytes=params,
        grads_bytes=grads,
        optimizer_bytes=state,
        activations_bytes=logits,
        temporaries_bytes=largest_tensor(spec) * scratch,
    )
    return PeakMemory(phases=(backward_start, *phases, backward_end, optimizer_step))
