"""Memory on each rank, measured, for summary.json beside the plan's per-rank predictions
(train.accounting): what the strategy that ran really holds.

- optimizer state: the bytes of this rank's own optimizer-state tensors -- FSDP2's DTensor
  shards (their local part), ZeroRedundancyOptimizer's local optimizer (the parameters assigned
  to this rank), or the whole state when replicated -- counting the per-parameter tensors
  (Adam's two moments) and not the scalar step counters, as the core does; fp32 master weights
  (bf16-mixed) apart.
- peak: on CUDA the allocator's peak (torch.cuda.max_memory_allocated) over the run; on CPU,
  which keeps no allocator statistics, torch's MemTracker (torch.distributed._tools) on the real
  tensors of the second step of this process -- the tensors it sees created (through the
  dispatcher) plus the model's parameters, gradients and optimizer state, at their largest sum.
  The second, because the first creates the optimizer state only at its update, after the
  backward peak (measured on the first step, zero1's 4 ranks all showed the same peak whatever
  their share of the state); a run of one step has none. Not
  measured on CPU (None in summary.json) under torch.compile (the tracker's dispatch mode would
  break the graph), for one process (summary.json's fake-tensor measurement covers it), nor
  under the FSDP2 strategies (zero2, fsdp, hsdp): there MemTracker's module tracker leaves
  gloo's process group referenced past train.distributed.shutdown -- its threads outlive the
  run (tests/train/test_distributed.py's thread test), the cause of the aborts at exit that
  shutdown exists to prevent -- while a bare dispatch mode does not; not solved yet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainbudget.train.config import TrainConfig
from trainbudget.train.distributed import DistInfo
from trainbudget.train.strategy import get_strategy

CPU_PEAK_METHOD = "MemTracker on the real tensors of this process's second step"
CUDA_PEAK_METHOD = "torch.cuda.max_memory_allocated over the run"


def _inner_optimizers(optimizer) -> list:
    """The optimizers that hold state: ZeroRedundancyOptimizer's local `optim`,
    MasterWeightOptimizer's `inner`, or the optimizer itself."""
    inner = getattr(optimizer, "optim", None) or getattr(optimizer, "inner", None)
    return [optimizer] if inner is None else _inner_optimizers(inner)


def _local_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a DTensor: its local shard)."""
    storages = {}
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    return sum(storages.values())


def optimizer_state_bytes(optimizer) -> int:
    """This rank's per-parameter optimizer-state bytes (scalar step counters not counted)."""
    return _local_bytes(
        value
        for opt in _inner_optimizers(optimizer)
        for per_param in opt.state.values()
        for value in per_param.values()
        if torch.is_tensor(value) and value.dim() > 0
    )


def master_weight_bytes(optimizer) -> int:
    """This rank's fp32 master weights (model.optim.MasterWeightOptimizer; 0 for others)."""
    return _local_bytes(getattr(optimizer, "masters", ()))


def tracks_cpu_peak(cfg: TrainConfig, info: DistInfo) -> bool:
    """Whether a CPU run measures a step with MemTracker (see the module docstring)."""
    return info.enabled and not cfg.compile and not get_strategy(cfg.strategy).fsdp2


class PeakMeter:
    """The peak bytes of this rank (see the module docstring for how)."""

    def __init__(self, device: torch.device, *, tracked: bool) -> None:
        self.device = device
        self.tracked = tracked and device.type == "cpu"
        """Measure a CPU step with MemTracker (False: nothing on CPU)."""
        self._cpu_peak: int | None = None
        self._steps = 0

    @contextlib.contextmanager
    def step(self, net, model, optimizer) -> Iterator[None]:
        """Around one training step (which calls `net`, wrapping `model`, once per micro-batch):
        the second one measured on CPU, the others untouched."""
        self._steps += 1
        if not self.tracked or self._steps != 2:
            yield
            return
        from torch.distributed._tools.mem_tracker import MemTracker
        from torch.nn.modules.module import register_module_forward_pre_hook

        tracker = MemTracker()
        masters = getattr(optimizer, "masters", ())
        tracker.track_external(model, *_inner_optimizers(optimizer), *masters)

        def next_micro_batch(module, _inputs) -> None:
            # MemTracker follows one forward of the outermost module per tracking and refuses a
            # second ("multiple iterative calls"); accumulation makes one per micro-batch. Its
            # per-module statistics (unused here) are cleared before each further one; the
            # device peak, kept apart, runs on over the whole step
            if module is net and module in tracker.memory_tracking:
                tracker.reset_mod_stats()

        # a global hook registered before the tracker's own (on entering it), so it runs first
        handle = register_module_forward_pre_hook(next_micro_batch)
        try:
            with tracker:
                yield
        finally:
            handle.remove()
        snapshot = tracker.get_tracker_snapshot("peak")
        self._cpu_peak = int(
            sum(v["Total"] for k, v in snapshot.items() if torch.device(k).type == "cpu")
        )

    def peak(self) -> tuple[int | None, str | None]:
        """(peak bytes, how measured); (None, None) when nothing was measured."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device), CUDA_PEAK_METHOD
        if self._cpu_peak is not None:
            return self._cpu_peak, CPU_PEAK_METHOD
        return None, None


def rank_record(info: DistInfo, optimizer, meter: PeakMeter) -> dict:
    peak, method = meter.peak()
    return {
        "rank": info.rank,
        "optimizer_state": optimizer_state_bytes(optimizer),
        "master_weights": master_weight_bytes(optimizer),
        "peak": peak,
        "peak_method": method,
    }


def gather_records(record: dict, info: DistInfo) -> list[dict]:
    """Every rank's `record`, in rank order (a collective: every rank calls it)."""
    if not info.enabled:
        return [record]
    records: list = [None] * info.world_size
    dist.all_gather_object(records, record)
    return records
