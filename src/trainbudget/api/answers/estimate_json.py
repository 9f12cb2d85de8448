"""An estimate's JSON (the document `trainbudget estimate --json` prints), its derivation
(--explain) and the assumptions a planned answer states, and how each kind of answer is
described."""

from __future__ import annotations

import dataclasses

from trainbudget.api.inputs.layout import fits_json
from trainbudget.core.parallel.fits import FitsRule, fits
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.single.estimate import (
    DEFAULT_MFU,
    Estimate,
    flops_formula_used,
)
from trainbudget.core.single.flops import (
    hidden_state_bytes,
    inference_flops_per_token,
    kv_cache_bytes,
)
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_precision
from trainbudget.core.units import format_bytes


def to_json(e: Estimate, rule: FitsRule) -> dict:
    req, f, m = e.request, e.flops, e.memory
    fwd = f.forward_per_sequence
    out: dict = {
        "model": req.model.name,
        "params": e.n_params,
        "params_breakdown": e.params.as_dict() if e.params else {},
        "active_params": e.active_params,
        "seq_len": e.seq_len,
        "flops_formula": flops_formula_used(req),
        "flops_per_token": e.flops_per_token,
        "flops_per_token_detail": {
            "exact_model": f.model_flops_per_token,
            "hardware": f.hardware_flops_per_token,
            "recompute": f.recompute_flops_per_token,
            "approx_6n": f.approx_6n_per_token,
            "palm": f.palm_per_token,
            "causal": f.causal,
        },
        "forward_flops_breakdown": ({**fwd.as_dict(), "total": fwd.total} if fwd else {}),
        "train_flops": e.train_flops,
        "tokens_per_step": e.tokens_per_step,
        "flops_per_step": e.flops_per_step,
        "tokens": req.tokens,
        "gpus": req.n_gpus,
        "gpu": req.hardware.name,
        "mfu": req.mfu,
        "time_seconds": e.time.seconds if e.time else None,
        "time_days": e.time.days if e.time else None,
        "gpu_hours": e.time.gpu_hours if e.time else None,
        "cost": e.time.cost if e.time else None,
        "memory_bytes": {
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "master_weights": m.master_bytes,
            "optimizer_state": m.optimizer_state_bytes,
            "activations": m.activations_bytes,
            "temporaries": m.temporaries_bytes,
            "total": m.total_bytes,
        },
        "memory_model": _memory_model_json(e),
        "activations_breakdown": _activations_json(e),
        "fits_in_gpu_memory": bool(fits(m.total_bytes, req.hardware.usable_memory_bytes, rule)),
        **fits_json(req.hardware, rule, 0),
        "checkpoint_bytes": e.checkpoint_bytes,
        "inference": _inference_json(e),
        "assumptions": list(e.assumptions),
    }
    return out


def _memory_model_json(e: Estimate) -> dict:
    """Which model gave memory_bytes: the phase model's peak (its parts those alive at
    peak_phase) or the sum of parts (peak_phase null); the one-GPU figure, whatever a plan
    puts in memory_bytes."""
    m = e.memory
    return {
        "kind": "phase-peak" if m.peak_phase else "sum-of-parts",
        "peak_phase": m.peak_phase,
        "phases_bytes": dict(m.phases_bytes),
    }


def _activations_json(e: Estimate) -> dict:
    a = e.memory.activations
    if a is None:
        return {}
    return {
        "per_layer": a.per_layer.total_bytes,
        "layers": a.layers_bytes,
        "head": a.head_bytes,
        "logits_and_loss": a.logits_bytes,
        "recompute": a.recompute,
    }


def _inference_json(e: Estimate) -> dict:
    model = e.request.model
    out = {
        "flops_per_token_2n": 2 * e.active_params,
        "flops_per_token": inference_flops_per_token(model, e.seq_len - 1),
    }
    if isinstance(model, ModelSpec):
        weight_bytes = get_precision(e.request.precision).weight_bytes
        tokens = e.request.micro_batch * e.seq_len
        out["kv_cache_bytes_per_token"] = kv_cache_bytes(model, 1, weight_bytes)
        out["kv_cache_bytes"] = kv_cache_bytes(model, tokens, weight_bytes)
        out["hidden_state_bytes"] = hidden_state_bytes(model, tokens, weight_bytes)
    return out


def derivation(e: Estimate, plan: RankedPlan | None = None) -> list:
    """The steps --explain prints (and --explain --json carries): the one-GPU estimate's, or
    the model's counts then the plan's."""
    if plan is None:
        return list(e.steps)
    from trainbudget.core.parallel.search.plan_explain import plan_steps  # --explain of a plan only

    return [*_model_steps(e), *plan_steps(plan, e.seq_len, e.request.tokens)]


def derivation_json(e: Estimate, plan: RankedPlan | None = None) -> list[dict]:
    return [dataclasses.asdict(s) for s in derivation(e, plan)]


MODEL_STEPS = ("params N", "active params", "forward FLOPs", "training FLOPs", "PaLM", "6N")
"""The one-GPU derivation's lines that hold for any layout (a plan's replace the rest)."""


def _model_steps(e: Estimate) -> list:
    return [s for s in e.steps if s.quantity.startswith(MODEL_STEPS)]


def framework_assumption(fw: Framework, planned: bool) -> str:
    """The framework changes the plan-aware memory and step time only: the one-GPU estimate has
    no data-parallel reduction and keeps the precision's gradient bytes."""
    if planned:
        return fw.assumption()
    return fw.assumption() + "; used by the plan-aware memory and step time (a plan option)"


ANSWERS = {
    "planner": "the planner's fastest layout that fits, as `trainbudget plan` ranks it (a layout "
    "flag such as --tp evaluates one layout; --mfu gives the 6ND back-of-envelope)",
    "layout": "the layout given, timed by the step model (its MFU predicted, not assumed)",
    "mfu": "back-of-envelope: training FLOPs / (GPUs x peak x the --mfu given); memory for one "
    "GPU holding the whole model (no layout: --gpus N without --mfu plans one)",
    "one-gpu": f"one GPU at an assumed MFU of {DEFAULT_MFU} (--mfu to change; --gpus N plans a "
    "layout)",
    "bare": f"dense:N has no architecture, so no layout can be planned: time at MFU "
    f"{DEFAULT_MFU} (--mfu), memory for one GPU holding the whole model (a layout flag gives "
    "its sharded model state)",
}
"""How estimate answers, by what it was given; printed on its `answer` line."""


def layout_assumptions(e: Estimate, rule: FitsRule, fw_line: str, causal: bool) -> list[str]:
    """What a plan's answer assumes: the FLOPs conventions, precision, kernels, the attention
    mask timed (`causal`), the fits rule."""
    req = e.request
    return [
        *e.assumptions[:2],  # the FLOPs conventions of the model's counts
        f"precision {req.precision}, optimizer {req.optimizer} (--precision, --optimizer)",
        "FlashAttention "
        + ("on (--no-flash-attention stores the s x s matrix)" if req.flash_attention else "off"),
        (
            "a causal mask timed: FlashAttention skips the masked tiles (--no-causal times a "
            "full mask)"
            if causal
            else "a full (non-causal) attention mask timed (--no-causal)"
        ),
        f"a plan fits when its {rule.describe()}, the device's memory being the "
        f"{format_bytes(req.hardware.usable_memory_bytes)} it gives the process (its "
        f"datasheet: {format_bytes(req.hardware.memory_bytes)}; --memory-headroom F: a flat rule)",
        "step time and memory per GPU from core.parallel (step_time, parallel_memory): "
        "its error on published runs is the range line's",
        fw_line,
    ]
