"""Prediction next to measurement for one training step of the reference model: the core's
peak-memory phases (`core.peak_memory`) and FLOPs (`core.flops`) against MemTracker and
FlopCounterMode, with the relative error of each figure."""

from __future__ import annotations

from collections.abc import Callable

from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.hardware import HARDWARE
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_precision
from trainbudget.profile.flops import compare_flops
from trainbudget.profile.flops_compare import FlopComparison
from trainbudget.profile.memory import FAKE_DEVICES, measure_step_memory, time_steps
from trainbudget.profile.phases import time_phases

KEYS = ("params", "grads", "optimizer", "activations", "peak", "flops_per_step")
TIMING = {"steps": 5, "warmup": 2}  # timed steps (median) after warm-up ones, whole and by phase


def profile_step(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str = "none",
    device: str = "fake-cpu",
    time_it: bool = False,
    progress: Callable[[str], None] = lambda _text: None,
) -> dict:
    """predicted, measured and error (measured / predicted - 1) for one configuration;
    `progress` is told as each measurement begins (what it runs, on which device)."""
    # the one step every measurement and prediction below describes
    step = {
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "precision": precision,
        "optimizer": optimizer,
        "recompute": recompute,
    }
    peak = training_peak(spec, **step)
    p = peak.peak
    fake = "fake tensors, no compute" if device in FAKE_DEVICES else "real tensors"
    progress(f"measuring memory: two training steps under MemTracker on {device} ({fake})")
    measured_memory = measure_step_memory(spec, **step, device=device)
    flops = _count_flops(spec, step, device=device, progress=progress)
    grads = peak.phases[-1].grads_bytes  # every gradient exists by the optimizer step
    predicted = {
        "params": p.params_bytes,
        "grads": grads,
        "optimizer": p.optimizer_bytes,
        "activations": p.activations_bytes,
        "peak": peak.total_bytes,
        "flops_per_step": flops.predicted_total,
    }
    measured = {
        "params": measured_memory.params,
        "grads": measured_memory.grads,
        "optimizer": measured_memory.optimizer,
        "activations": measured_memory.activations,
        "peak": measured_memory.peak,
        "flops_per_step": flops.measured_total,
    }
    out = {
        "model": spec.name,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "precision": precision,
        "optimizer": optimizer,
        "recompute": recompute,
        "device": measured_memory.device,
        "peak_phase": p.phase,
        "predicted_phases": {ph.phase: ph.total_bytes for ph in peak.phases},
        "predicted": predicted,
        "measured": measured,
        "error": {k: (measured[k] / predicted[k] - 1) if predicted[k] else 0.0 for k in KEYS},
        "conventions": [
            "memory: bytes of the reference model's step (trainbudget.model); params, grads and "
            "optimizer are tensor sizes, activations and peak MemTracker's at the peak",
            "FLOPs: FlopCounterMode's count of forward + backward (+ recomputation), normalised "
            "to the core's convention (non-causal attention, fused-attention backward's "
            "recomputed Q K^T as hardware FLOPs); predicted = core hardware FLOPs per step",
        ],
    }
    if time_it and device not in FAKE_DEVICES:
        runs = f"{TIMING['warmup']} warm-up steps, then the median of {TIMING['steps']}"
        progress(f"timing whole steps on {device}: {runs}")
        seconds, max_allocated = time_steps(spec, **step, device=device, **TIMING)
        progress(f"timing each phase on {device}: {runs} ({seconds:.3g} s a step)")
        out["step_seconds"] = seconds
        out["achieved_flops_per_second"] = flops.measured_total / seconds
        if max_allocated is not None:
            out["max_memory_allocated"] = max_allocated
        out.update(_timing_extras(spec, **step, device=device, step_seconds=seconds))
    return out


def _count_flops(spec: ModelSpec, step: dict, *, device: str, progress) -> FlopComparison:
    """`compare_flops` of `step` on the meta device, or, for a MoE model, on `device`: its
    routing needs real values (torch.nonzero has no meta shape)."""
    on = device if spec.is_moe else "meta"
    progress(f"counting FLOPs: one training step under FlopCounterMode on {on}")
    keys = ("micro_batch", "seq_len", "recompute")
    return compare_flops(spec, **{k: step[k] for k in keys}, device=on)


def _timing_extras(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str,
    device: str,
    step_seconds: float,
) -> dict:
    """Phase times (`profile.phases`), model FLOPs and, on CUDA, MFU against the identified
    device's catalog peak and the allocator's peaks; read right after `time_steps`, whose
    timed steps the CUDA peaks cover."""
    import torch

    from trainbudget.profile.device import identify_device

    extras: dict = {}
    notes = [
        "step_seconds: median of steps synchronised once each (time_steps); phases_seconds: "
        "median per phase with a device synchronisation at every phase boundary, so on a GPU "
        "their sum (phases_total_seconds) runs slightly longer than a step",
        "forward is model(idx) up to the logits; loss is the fp32 cross-entropy; grad_sync is 0 "
        "without torch.distributed; logging formats a line with loss.item()",
    ]
    if device == "cuda":
        extras["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    phases = time_phases(
        spec,
        micro_batch=micro_batch,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        recompute=recompute,
        device=device,
        **TIMING,
    )
    extras["phases_seconds"] = phases.phases
    extras["phases_total_seconds"] = phases.total
    model_flops = training_flops(spec, seq_len).model_flops_per_token * seq_len * micro_batch
    extras["model_flops_per_step"] = model_flops
    if device == "cuda":
        info = identify_device(device)
        compute = get_precision(precision).compute_dtype
        extras["device_name"] = info.name
        extras["catalog_key"] = info.catalog_key
        peak = (
            HARDWARE[info.catalog_key].dense_flops_per_second.get(compute)
            if info.catalog_key
            else None
        )
        extras["peak_flops_per_second"] = peak
        extras["mfu"] = None if peak is None else model_flops / step_seconds / peak
        if info.catalog_key is None:
            notes.append(f"mfu null: {info.name!r} has no row in the hardware catalog")
        elif peak is None:
            notes.append(f"mfu null: catalog row {info.catalog_key} has no dense {compute} peak")
        else:
            notes.append(
                f"mfu: model FLOPs (3 x forward, no recomputation) / step_seconds / the "
                f"{info.catalog_key} dense {compute} peak"
            )
    extras["timing_notes"] = notes
    return extras
