"""Will the run fit? The predicted peak per process (train.observe.accounting, the same model every
log line reports) against the memory the device has free, checked before the model is built; when
it does not fit, the nearest change that does, found with the same memory model.

What "free" means: on a CPU, the kernel's MemAvailable (/proc/meminfo; `os.sysconf`'s
available pages elsewhere), shared by every process of the run on this machine; on a GPU,
`torch.cuda.mem_get_info`'s free bytes of the process's own device (after the CUDA context).
The prediction leaves out the framework's own overhead (torch's libraries, the allocator's
fragmentation): a run refused here cannot fit, one that passes with little room may still fail.

Pure but for `available_memory_bytes` (a file read; torch for a GPU, imported there)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.presets import PRESETS
from trainbudget.core.units import KiB, format_bytes
from trainbudget.train.observe.accounting import predicted_peak_bytes
from trainbudget.train.spec.config import TrainConfig

MEMINFO = Path("/proc/meminfo")
SKIP_FLAG = "--no-memory-check"


@dataclass(frozen=True, kw_only=True)
class Available:
    bytes: float
    """Free memory for the run's processes on this device (all of them on a CPU)."""
    source: str
    """Where the figure comes from, for the message."""


@dataclass(frozen=True, kw_only=True)
class Step:
    """What one training step needs: the model, the layout, and the step's settings."""

    spec: ModelSpec
    plan: Plan
    precision: str
    optimizer: str
    seq_len: int

    @classmethod
    def of(cls, cfg: TrainConfig, spec: ModelSpec, plan: Plan) -> Step:
        """The step of a run: its model and layout, the config's precision, optimizer and
        sequence length."""
        return cls(
            spec=spec,
            plan=plan,
            precision=cfg.precision,
            optimizer=cfg.optimizer,
            seq_len=cfg.seq_len,
        )

    def peak_bytes(self) -> float:
        return predicted_peak_bytes(
            self.spec,
            self.plan,
            precision=self.precision,
            optimizer=self.optimizer,
            seq_len=self.seq_len,
        )


def available_memory_bytes(device_type: str, device_index: int | None = None) -> Available | None:
    """Free memory of the device the run uses; None where it cannot be told."""
    if device_type == "cuda":
        import torch

        free_bytes, _total = torch.cuda.mem_get_info(device_index)
        return Available(bytes=float(free_bytes), source="free on the GPU (mem_get_info)")
    try:
        for line in MEMINFO.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                kib = int(line.split()[1])  # "MemAvailable:   24079276 kB": KiB despite "kB"
                return Available(bytes=float(kib * KiB), source="MemAvailable in /proc/meminfo")
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return Available(bytes=float(pages), source="available pages (os.sysconf)")


def check_run(step: Step, *, device: str, index: int | None, world_size: int) -> str:
    """Check the run's step on its device (SpecError if it does not fit); the line that says
    what was compared. On a CPU the processes of this machine share its memory (torchrun's
    LOCAL_WORLD_SIZE, else all of them); each GPU is one process's own."""
    available = available_memory_bytes(device, index)
    if available is None:
        return "memory check skipped: this system does not say how much memory is available"
    local = os.environ.get("LOCAL_WORLD_SIZE", "")  # torchrun's processes on this machine
    processes = 1 if device == "cuda" else max(1, int(local)) if local.isdigit() else world_size
    peak = check_memory(step, available, processes=processes, device=device)
    each = f" x {processes} processes" if processes > 1 else ""
    return (
        f"memory: predicted peak {format_bytes(peak)}{each}, {format_bytes(available.bytes)} "
        f"available ({available.source})"
    )


def check_memory(step: Step, available: Available, *, processes: int, device: str) -> float:
    """The step's predicted peak per process; SpecError, one line, when `processes` copies of
    it exceed the available memory: the figures, the nearest change that fits, and how to skip
    the check."""
    peak = step.peak_bytes()
    if peak * processes <= available.bytes:
        return peak
    budget = available.bytes / processes
    each = f" per process, {processes} processes" if processes > 1 else ""
    fix = what_fits(step, budget)
    advice = (
        f"would fit: {fix[0]} (predicted {format_bytes(fix[1])})"
        if fix
        else "no preset fits even at micro-batch 1 with full recomputation"
    )
    raise SpecError(
        "predicted peak memory",
        f"{format_bytes(peak)}{each}",
        f"more than the {format_bytes(available.bytes)} available on {device} "
        f"({available.source}); {advice}; {SKIP_FLAG} to start anyway",
    )


def what_fits(step: Step, budget_bytes: float) -> tuple[str, float] | None:
    """The least change that brings the predicted peak within `budget_bytes`, as flags, and
    its peak: a smaller micro-batch (the same sequences per step, by more accumulation); then
    full recomputation as well; then fewer layers; then a smaller preset. None if nothing does."""
    plan = step.plan
    sequences = plan.micro_batch * plan.grad_accum
    recomputes = ("none", "full") if plan.recompute == "none" else (plan.recompute,)
    for recompute in recomputes:
        for mb in sorted((d for d in _divisors(sequences) if d <= plan.micro_batch), reverse=True):
            if mb == plan.micro_batch and recompute == plan.recompute:
                continue  # the step as given: it does not fit
            trial = _with(step, micro_batch=mb, grad_accum=sequences // mb, recompute=recompute)
            peak = trial.peak_bytes()
            if peak <= budget_bytes:
                return _flags(step, trial), peak
    lightest = _with(step, micro_batch=1, grad_accum=sequences, recompute="full")
    layers = _most_layers(lightest, budget_bytes)
    if layers is not None:
        return layers
    return _smaller_preset(lightest, budget_bytes)


def _most_layers(step: Step, budget_bytes: float) -> tuple[str, float] | None:
    """The most layers below the model's that fit (the peak grows with the layer count)."""
    fits = None
    low, high = 1, step.spec.n_layers - 1
    while low <= high:
        n = (low + high) // 2
        try:
            trial = dataclasses.replace(step, spec=step.spec.replace(n_layers=n))
        except SpecError:  # e.g. an MoE model's dense layers need more
            low = n + 1
            continue
        peak = trial.peak_bytes()
        if peak <= budget_bytes:
            fits, low = (trial, peak), n + 1
        else:
            high = n - 1
    if fits is None:
        return None
    trial, peak = fits
    return f"--set n_layers={trial.spec.n_layers} " + _flags(step, trial, layout_only=True), peak


def _smaller_preset(step: Step, budget_bytes: float) -> tuple[str, float] | None:
    """The largest preset that fits at the lightest settings and takes the run's seq_len."""
    best = None
    for name, spec in PRESETS.items():
        if spec.position == "learned" and spec.max_seq_len < step.seq_len:
            continue
        trial = dataclasses.replace(step, spec=spec)
        peak = trial.peak_bytes()
        if peak <= budget_bytes and (best is None or peak > best[1]):
            best = (name, peak)
    if best is None:
        return None
    return f"--model {best[0]} " + _flags(step, step, layout_only=True), best[1]


def _with(step: Step, **plan_changes: object) -> Step:
    return dataclasses.replace(step, plan=dataclasses.replace(step.plan, **plan_changes))


def _flags(before: Step, after: Step, *, layout_only: bool = False) -> str:
    """The train flags that turn `before`'s layout into `after`'s."""
    changed = [
        f"--{name.replace('_', '-')} {getattr(after.plan, name)}"
        for name in ("micro_batch", "grad_accum", "recompute")
        if layout_only or getattr(after.plan, name) != getattr(before.plan, name)
    ]
    return " ".join(changed)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
