"""Memory of training on one GPU (no parallelism): weights, gradients, optimizer, activations.

The total is the sum of the parts: during backward all gradients of the step and the activations
not yet consumed coexist, so the sum bounds the peak from above (activations freed early and
gradients not yet written overlap in reality; issue-4 measurements show how much).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.single.activations import ActivationMemory, activation_memory
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.spec.defaults import default_seq_len
from trainbudget.core.spec.model_spec import BareModel, ModelSpec
from trainbudget.core.spec.precision import (
    Optimizer,
    Precision,
    dense_bytes_per_param,
    get_optimizer,
    get_precision,
)


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes on one GPU. `activations` is None for a BareModel (no architecture to size them)."""

    params_bytes: float
    grads_bytes: float
    master_bytes: float
    """fp32 master weights kept by the optimizer under mixed precision."""
    optimizer_state_bytes: float
    activations: ActivationMemory | None
    """The stored activations by formula (activations.py), whatever the peak model."""
    peak_phase: str | None = None
    """The phase model's peak moment (`peak_memory.training_peak`); None: the sum of parts,
    every field above counted at once (an upper bound)."""
    peak_activations_bytes: float | None = None
    """Activations alive at `peak_phase` (logits and the loss's fp32 log-probabilities
    included); None with the sum of parts."""
    temporaries_bytes: float = 0.0
    """Temporaries alive at `peak_phase`: the loss backward's fp32 gradients or the optimizer
    update's scratch (0 with the sum of parts)."""
    phases_bytes: tuple[tuple[str, float], ...] = ()
    """(phase, total bytes) of every moment the phase model compares; empty with the sum."""

    @property
    def optimizer_bytes(self) -> float:
        """Master copy plus optimizer state: ZeRO's K*Psi (K = 12 for mixed Adam)."""
        return self.master_bytes + self.optimizer_state_bytes

    @property
    def activations_bytes(self) -> float:
        if self.peak_activations_bytes is not None:
            return self.peak_activations_bytes
        return self.activations.total_bytes if self.activations else 0.0

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.temporaries_bytes
        )


def optimizer_state_bytes(
    model: ModelSpec | BareModel, optimizer: Optimizer, precision: Precision
) -> float:
    """Optimizer state (master copy excluded). Adafactor keeps rows + cols per matrix and a full
    second moment for vectors (Shazeer & Stern 2018, Sec. 3), so it needs the architecture."""
    n_params = model.n_params if isinstance(model, BareModel) else count_params(model).total
    if not optimizer.factored:
        return n_params * optimizer.state_bytes_per_param(precision)
    if isinstance(model, BareModel):
        raise SpecError(
            "optimizer",
            optimizer.name,
            "adafactor's state depends on matrix shapes; give a model with an "
            "architecture (a preset or config.json), not dense:N",
        )
    matrices = matrix_shapes(model)
    matrix_elements = sum(r * c * k for _, r, c, k in matrices)
    factored = sum((r + c) * k for _, r, c, k in matrices)
    vectors = n_params - matrix_elements
    return (factored + vectors) * precision.state_bytes


def training_memory(
    model: ModelSpec | BareModel,
    *,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    seq_len: int | None = None,
    micro_batch: int = 1,
    recompute: str = "none",
    flash_attention: bool = False,
) -> MemoryBreakdown:
    """Per-GPU bytes of one training step without parallelism."""
    prec, opt = get_precision(precision), get_optimizer(optimizer)
    n_params = model.n_params if isinstance(model, BareModel) else count_params(model).total
    acts = None
    if isinstance(model, ModelSpec):
        acts = activation_memory(
            model,
            seq_len=default_seq_len(model).value if seq_len is None else seq_len,
            micro_batch=micro_batch,
            activation_bytes=prec.activation_bytes,
            weight_bytes=prec.weight_bytes,  # amp-*: fp32 weights, 16-bit matmuls
            recompute=recompute,
            flash_attention=flash_attention,
        )
    return MemoryBreakdown(
        params_bytes=n_params * prec.weight_bytes,
        grads_bytes=n_params * prec.grad_bytes,
        master_bytes=n_params * prec.master_bytes,
        optimizer_state_bytes=optimizer_state_bytes(model, opt, prec),
        activations=acts,
    )


def checkpoint_bytes(
    model: ModelSpec | BareModel, *, precision: str = "bf16-mixed", optimizer: str = "adamw"
) -> float:
    """Bytes a full training checkpoint holds: the weights at their highest precision (the fp32
    master when there is one) plus the optimizer state. fp32 AdamW: 4 + 4 + 4 = 12 bytes per
    parameter (seed 003: 1,492,051,968 bytes for GPT-2 small). Container overhead not included."""
    prec, opt = get_precision(precision), get_optimizer(optimizer)
    n_params = model.n_params if isinstance(model, BareModel) else count_params(model).total
    weights = n_params * (prec.master_bytes or prec.weight_bytes)
    return weights + optimizer_state_bytes(model, opt, prec)


# "6 GB of memory per 1B parameters at 16-bit to load and train" (seed 004, citing the book
# Generative AI on AWS, O'Reilly 2023).
RULE_OF_THUMB_BYTES_PER_PARAM = 6  # 6 GB (6e9 bytes) per 1e9 parameters


@dataclass(frozen=True, kw_only=True)
class RuleOfThumb:
    """What the 6-bytes-per-parameter rule covers next to this tool's per-part figure."""

    rule_bytes: float
    ours_bytes: float
    covers: str
    leaves_out: str


def rule_of_thumb_6gb(memory: MemoryBreakdown, n_params: int) -> RuleOfThumb:
    """Compare the 6 GB / 1B rule with a computed breakdown (seed 004, B-rule-6gb)."""
    return RuleOfThumb(
        rule_bytes=n_params * RULE_OF_THUMB_BYTES_PER_PARAM,
        ours_bytes=memory.total_bytes,
        covers="16-bit weights (2 B) + 16-bit gradients (2 B) + one 16-bit state (2 B), "
        "e.g. SGD with momentum in pure bf16",
        leaves_out="fp32 master weights (4 B) and Adam's second moment (mixed AdamW needs 16 B), "
        "activations (grow with batch x sequence), logits, framework buffers",
    )


def fit_max_params(
    *,
    n_gpus: int,
    memory_bytes_per_gpu: float,
    precision: str,
    optimizer: str,
    reserve_fraction: float = 0.0,
) -> float:
    """Largest parameter count whose weights, gradients and optimizer state fit in the pooled
    memory of `n_gpus` (fully sharded, as ZeRO-3/FSDP would), activations excluded
    (seed 000, S-max-model: 8 x 80 GB / 16 B = 40e9)."""
    if n_gpus <= 0:
        raise SpecError("gpus", n_gpus, "must be a positive integer")
    if not 0 <= reserve_fraction < 1:
        raise SpecError("reserve", reserve_fraction, "must be in [0, 1)")
    opt = get_optimizer(optimizer)
    if opt.factored:
        raise SpecError(
            "optimizer",
            optimizer,
            "adafactor's state depends on matrix shapes; fit needs a fixed "
            "bytes-per-parameter optimizer",
        )
    per_param = dense_bytes_per_param(get_precision(precision), opt)
    return n_gpus * memory_bytes_per_gpu * (1 - reserve_fraction) / per_param
