"""Peak memory of one real training step of the reference model, measured without a GPU:
the step runs under FakeTensorMode (shapes, dtypes and allocations, no data, no compute) and
torch's MemTracker records bytes per category at the peak.

CPU-only builds of torch cannot place fake tensors on a "cuda" device ("PyTorch is not linked
with support for cuda devices"), so the fake step runs on the cpu device; kernels whose saved
tensors differ between CPU and CUDA are avoided in the reference model (see
model/transformer.py), and scripts/gpu_validate.py measures the same matrix on a real GPU.

Every step here is the trainer's: for the amp-* policies the forward and its loss run inside
the trainer's torch.autocast (model.optim.mixed_precision), backward and the optimizer step
outside it, so the fp32 weights' 16-bit copies and the fp32 residual stream are what is measured.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.optim import make_optimizer, mixed_precision, weight_dtype
from trainbudget.model.transformer import build_model
from trainbudget.profile.device import FAKE_DEVICES, check_device_name

# MemTracker's categories (torch.distributed._tools.mem_tracker._MemRefType values)
_CATEGORIES = {
    "PARAM": "params",
    "GRAD": "grads",
    "OPT": "optimizer",
    "ACT": "activations",
    "TEMP": "temporaries",
    "BUFFER": "buffers",
    "OTH": "other",
}


@dataclass(frozen=True, kw_only=True)
class MeasuredMemory:
    """Bytes of one training step. params, grads and optimizer are the tensors' sizes (all the
    gradients after backward; master weights and state after the step); activations,
    temporaries and peak are MemTracker's figures at the step's peak."""

    params: int
    grads: int
    optimizer: int
    activations: int
    temporaries: int
    peak: int
    device: str


def _nbytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a tied weight counts once)."""
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def _optimizer_tensors(opt) -> list:
    inner = getattr(opt, "inner", opt)
    state = [
        v
        for s in inner.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.numel() > 1
    ]  # Adam's scalar step is not state
    return state + list(getattr(opt, "masters", []))


def step_autocast(precision: str, device: str) -> contextlib.AbstractContextManager:
    """The trainer's autocast for `precision` on `device` (a fake device runs on its real one):
    torch.autocast for amp-*, a no-op otherwise. Its GradScaler (amp-fp16) is left out: it
    scales the scalar loss and unscales the gradients in place, so it adds no tensor the size
    of an activation or of the model, and its step reads an overflow flag on the host, which a
    fake tensor does not have."""
    autocast, _scaler = mixed_precision(precision, torch.device(device.removeprefix("fake-")))
    return autocast


def _train_step(
    model,
    optimizer,
    idx,
    grads: list | None = None,
    *,
    autocast: contextlib.AbstractContextManager | None = None,
) -> None:
    """One step as the trainer runs it: forward and loss inside `autocast` (`step_autocast`;
    none: no autocast), backward and the update outside it."""
    with autocast if autocast is not None else contextlib.nullcontext():
        _, loss = model(idx, idx)
    loss.backward()
    if grads is not None:
        grads.append(_nbytes(p.grad for p in model.parameters() if p.grad is not None))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def check_device(device: str) -> None:
    """A clear error for a device this torch cannot use."""
    check_device_name(device)
    if device == "fake-cuda" and not torch.backends.cuda.is_built():
        raise SpecError(
            "device", device, "needs a CUDA build of torch (this one is CPU-only); use fake-cpu"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", device, "no CUDA device is available")


def measure_step_memory(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str = "none",
    device: str = "fake-cpu",
) -> MeasuredMemory:
    """Peak bytes of the second training step (the first creates the optimizer state), on
    fake tensors or on the real device."""
    check_device(device)
    fake = device in FAKE_DEVICES
    if fake and spec.is_moe:
        raise SpecError(
            "device",
            device,
            "MoE routing has data-dependent shapes that fake "
            "tensors cannot run; measure MoE models on cpu or cuda",
        )
    where = device.removeprefix("fake-")
    with FakeTensorMode() if fake else contextlib.nullcontext():
        model = build_model(
            spec, device=where, recompute=recompute, init=not fake, dtype=weight_dtype(precision)
        )
        model.train()
        opt = make_optimizer(model, precision=precision, optimizer=optimizer)
        idx = torch.randint(0, spec.vocab_size, (micro_batch, seq_len), device=where)
        autocast = step_autocast(precision, device)
        grads: list[int] = []
        _train_step(model, opt, idx, grads, autocast=autocast)
        tracker = MemTracker()
        inner = getattr(opt, "inner", None)
        extra = [inner, *opt.masters] if inner is not None else []
        tracker.track_external(model, opt, *extra)
        with tracker:
            _train_step(model, opt, idx, autocast=autocast)
        peak = tracker.get_tracker_snapshot("peak")
        params = _nbytes(model.parameters())
        optimizer_bytes = _nbytes(_optimizer_tensors(opt))
    snapshot = next(v for k, v in peak.items() if torch.device(k).type == torch.device(where).type)
    by_name = {_CATEGORIES.get(str(k).split(".")[-1], str(k)): int(v) for k, v in snapshot.items()}
    return MeasuredMemory(
        params=params,
        grads=grads[0],
        optimizer=optimizer_bytes,
        activations=by_name.get("activations", 0),
        temporaries=by_name.get("temporaries", 0),
        peak=by_name.get("Total", 0),
        device=device,
    )


def real_training_setup(
    spec: ModelSpec, *, precision: str, optimizer: str, recompute: str, device: str, seed: int = 0
):
    """The reference model (initialised, in training mode) and its optimizer on a real device:
    what every timed measurement runs."""
    check_device(device)
    if device in FAKE_DEVICES:
        raise SpecError("device", device, "fake tensors do no work: time on cpu or cuda")
    model = build_model(
        spec, device=device, recompute=recompute, seed=seed, dtype=weight_dtype(precision)
    )
    model.train()
    return model, make_optimizer(model, precision=precision, optimizer=optimizer)


def time_steps(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str = "none",
    device: str = "cpu",
    steps: int = 5,
    warmup: int = 2,
) -> tuple[float, int | None]:
    """Median seconds per training step on a real device (synchronised, warm-up dropped) and,
    on CUDA, torch.cuda.max_memory_allocated over the timed steps."""
    model, opt = real_training_setup(
        spec, precision=precision, optimizer=optimizer, recompute=recompute, device=device
    )
    idx = torch.randint(0, spec.vocab_size, (micro_batch, seq_len), device=device)
    autocast = step_autocast(precision, device)
    cuda = device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        _train_step(model, opt, idx, autocast=autocast)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        _train_step(model, opt, idx, autocast=autocast)
        sync()  # the clock is read only after the GPU has finished the step
        times.append(time.perf_counter() - start)
    return statistics.median(times), (torch.cuda.max_memory_allocated() if cuda else None)
