"""The memory `estimate` reports for one GPU: the peak of the phase model
(`peak_memory.training_peak`, the figure `trainbudget profile` predicts and holds to torch's
MemTracker) wherever that model covers the inputs, else the sum of parts
(`memory.training_memory`, an upper bound), with a sentence saying which and why."""

from __future__ import annotations

from trainbudget.core.single.memory import MemoryBreakdown, training_memory
from trainbudget.core.single.params import count_params
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.model_spec import BareModel, ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision

# The policies whose bytes the reference model keeps as the phase model counts them (every one
# the profile matrix measures, autocast's weight copies and fp32 residual stream included:
# tests/profile/test_profile_matrix.py); not FP8, which the reference model cannot run.
PHASE_MODEL_PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16", "amp-bf16", "amp-fp16")
# the reference model checkpoints whole blocks or nothing (model/transformer.py)
PHASE_MODEL_RECOMPUTE = ("none", "full")


def phase_model_gap(
    model: ModelSpec | BareModel, *, precision: str, optimizer: str, recompute: str
) -> str | None:
    """Why `training_peak` cannot represent these inputs, or None when it can."""
    if isinstance(model, BareModel):
        return "dense:N has no architecture to run through the phases"
    name = get_precision(precision).name
    if name not in PHASE_MODEL_PRECISIONS:
        return f"precision {name} is not one it models ({', '.join(PHASE_MODEL_PRECISIONS)})"
    opt = get_optimizer(optimizer)
    if not opt.trainable:
        return f"optimizer {opt.name} is estimate-only (no reference update whose scratch to count)"
    if recompute not in PHASE_MODEL_RECOMPUTE:
        return f"recompute {recompute} is not one it models ({', '.join(PHASE_MODEL_RECOMPUTE)})"
    return None


def one_gpu_memory(
    model: ModelSpec | BareModel,
    *,
    precision: str,
    optimizer: str,
    seq_len: int,
    micro_batch: int,
    recompute: str,
    flash_attention: bool,
) -> tuple[MemoryBreakdown, str]:
    """Bytes of one training step on one GPU holding the whole model, and the assumption that
    says which model gave them."""
    parts = training_memory(
        model,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        micro_batch=micro_batch,
        recompute=recompute,
        flash_attention=flash_attention,
    )
    gap = phase_model_gap(model, precision=precision, optimizer=optimizer, recompute=recompute)
    if gap is not None:
        return parts, (
            "peak memory taken as the sum of parts (upper bound), not the phase model "
            f"(core.single.peak_memory) that `trainbudget profile` uses: {gap}; allocator "
            "fragmentation, CUDA context and communication buffers not included"
        )
    peak = training_peak(
        model,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        micro_batch=micro_batch,
        recompute=recompute,
        flash_attention=flash_attention,
    )
    p = peak.peak
    master = count_params(model).total * get_precision(precision).master_bytes
    memory = MemoryBreakdown(
        params_bytes=p.params_bytes,
        grads_bytes=p.grads_bytes,
        master_bytes=master,
        optimizer_state_bytes=p.optimizer_bytes - master,
        activations=parts.activations,
        peak_phase=p.phase,
        peak_activations_bytes=p.activations_bytes,
        temporaries_bytes=p.temporaries_bytes,
        phases_bytes=tuple((ph.phase, ph.total_bytes) for ph in peak.phases),
    )
    attention = (
        "FlashAttention (SDPA, as the reference model runs: the figure `trainbudget profile` "
        "predicts)"
        if flash_attention
        else "each layer's s x s attention matrix kept (eager attention: not what the "
        "reference model runs, so not held to MemTracker; `profile` matches --flash-attention)"
    )
    return memory, (
        f"peak memory = the largest of the phase model's moments "
        f"({', '.join(ph.phase for ph in peak.phases)}; core.single.peak_memory, the "
        f"reference implementation's step, held to torch's MemTracker by `trainbudget "
        f"profile`), here {p.phase}; the parts are those alive then: gradients "
        f"{'none yet' if p.grads_bytes == 0 else 'as alive'}, activations including the "
        "logits and the loss's fp32 log-probabilities, temporaries the loss backward's fp32 "
        f"gradients or the optimizer update's scratch; {attention}; allocator fragmentation, "
        "CUDA context and communication buffers not included"
    )
