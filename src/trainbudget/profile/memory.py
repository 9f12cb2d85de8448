"""Peak memory of one real training step of the reference model, measured without a GPU:
the step runs under FakeTensorMode (shapes, dtypes and allocations, no data, no compute) and
torch's MemTracker records bytes per category at the peak.

CPU-only builds of torch cannot place fake tensors on a "cuda" device ("PyTorch is not linked
with support for cuda devices"), so the fake step runs on the cpu device; kernels whose saved
tensors differ between CPU and CUDA are avoided in the reference model (see
model/transformer.py), and scripts/gpu_validate.py measures the same matrix on a real GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from trainbudget.core.model_spec import ModelSpec
from trainbudget.model.optim import make_optimizer, weight_dtype
from trainbudget.model.transformer import build_model

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
    """Bytes per category at the step's peak, and the peak itself."""

    params: int
    grads: int
    optimizer: int
    activations: int
    temporaries: int
    other: int
    peak: int
    device: str


def _train_step(model, optimizer, idx) -> None:
    _, loss = model(idx, idx)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure_step_memory(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str = "none",
) -> MeasuredMemory:
    """Peak bytes of the second training step (the first creates the optimizer state)."""
    with FakeTensorMode():
        model = build_model(
            spec, device="cpu", recompute=recompute, init=False, dtype=weight_dtype(precision)
        )
        model.train()
        opt = make_optimizer(model, precision=precision, optimizer=optimizer)
        idx = torch.randint(0, spec.vocab_size, (micro_batch, seq_len))
        _train_step(model, opt, idx)
        tracker = MemTracker()
        tracker.track_external(
            model, *(getattr(opt, "masters", []) or []), getattr(opt, "inner", opt)
        )
        with tracker:
            _train_step(model, opt, idx)
        peak = tracker.get_tracker_snapshot("peak")
    ((device, snapshot),) = peak.items()
    by_name = {_CATEGORIES.get(str(k).split(".")[-1], str(k)): int(v) for k, v in snapshot.items()}
    return MeasuredMemory(
        params=by_name.get("params", 0),
        grads=by_name.get("grads", 0),
        optimizer=by_name.get("optimizer", 0),
        activations=by_name.get("activations", 0),
        temporaries=by_name.get("temporaries", 0),
        other=by_name.get("buffers", 0) + by_name.get("other", 0),
        peak=by_name.get("Total", sum(by_name.values())),
        device=f"fake-{device}",
    )
