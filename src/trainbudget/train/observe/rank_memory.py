"""Memory on each rank, measured, for summary.json beside the plan's per-rank predictions
(train.observe.accounting): what the strategy that ran really holds.

- optimizer state: the bytes of this rank's own optimizer-state tensors -- FSDP2's DTensor
  shards (their local part), ZeroRedundancyOptimizer's local optimizer (the parameters assigned
  to this rank), or the whole state when replicated -- counting the per-parameter tensors
  (Adam's two moments) and not the scalar step counters, as the core does; fp32 master weights
  (bf16-mixed) apart.
- peak: on CUDA the allocator's peak (torch.cuda.max_memory_allocated) over the run; on CPU,
  which keeps no allocator statistics, torch's MemTracker (torch.distributed._tools) over the
  real tensors of the second step of this process (forward, backward and update of every
  micro-batch): the tensors it sees created through the dispatcher, the model's parameters,
  gradients and buffers, the optimizer's state, and the storages the engine resizes in place
  (FSDP2's unsharded parameters: `_engine_storages`), at their largest sum. The second step,
  because the first creates the optimizer state only at its update, after the backward peak;
  it also sees DDP's gradient buckets, which DDP allocates anew at the start of its second
  iteration (Reducer rebuilds them in the order gradients became ready). Under a pipeline the
  step is the schedule's (every micro-batch's forward and backward on this rank's stage, its
  sends and receives), seen whole: the tracker needs no module hooks. A run of one step
  measures nothing, nor one under torch.compile (the tracker's dispatch mode would break the
  graph) or in one process (summary.json's fake-tensor measurement covers it).
  The tracker runs without its module tracker (`_NoModuleTracker`): that one hangs autograd
  hooks on every module's inputs and outputs, and a hook left on FSDP2's
  RegisterPostBackward node forms a cycle through C++ that Python's collector cannot break,
  keeping the FSDP2 state -- and gloo's process group, with its threads -- alive past
  train.launch.distributed.shutdown (tests/train/launch/test_distributed.py's thread test). Without
  it every allocation is counted alike (no per-module or forward/backward split): the total is the
  same. Its collectives settle (train.observe.collective_settle): a tensor a collective used dies
  when the program drops it, not when gloo's worker thread lets go of the finished work, later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainbudget.model.moe import MoE
from trainbudget.train.launch.distributed import DistInfo
from trainbudget.train.observe.collective_settle import settled_collectives
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.spec.config import TrainConfig

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
    return info.enabled and not cfg.compile


def _engine_storages(model) -> list[torch.Tensor]:
    """Tensors whose storage FSDP2 resizes in place rather than allocating through the
    dispatcher: each parameter's all-gather output (the unsharded parameter's storage), created
    at the first all-gather and resized to 0 and back at every reshard and unshard since
    (torch 2.13, fsdp/_fully_shard/_fsdp_param.py: init_all_gather_outputs, alloc_storage). The
    tracker follows a resize of a storage it knows only; empty for DDP or a plain model."""
    tensors = []
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        for fsdp_param in getattr(group, "fsdp_params", ()):
            tensors += [*fsdp_param.all_gather_outputs, *fsdp_param._unsharded_inner_tensors]
    return tensors


def pipeline_buffers(net) -> list[torch.Tensor]:
    """The receive buffers of this rank's pipeline stages (`net`: a
    train.parallel.pipeline.Pipeline; nothing for any other model): torch.distributed.pipelining
    allocates, once, a buffer per micro-batch for each input a stage receives from the previous one
    and for each gradient it receives from the next (torch 2.13 pipelining/stage.py:
    _RecvInfo.buffer, made by _make_tensor_from_meta), and keeps them for the run. The tracker sees
    a buffer only when an op it dispatches touches it (DTensor.from_local under tensor parallelism
    does, a plain pipeline never): tracked always, they count alike whatever the layout."""
    schedule = getattr(net, "schedule", None)
    if schedule is None:
        return []
    stages = getattr(schedule, "_stages", None) or [getattr(schedule, "_stage", None)]
    tensors = []
    for stage in filter(None, stages):
        for infos in (*stage.args_recv_info.values(), *stage.grad_recv_info.values()):
            tensors += [i.buffer for i in infos if getattr(i, "buffer", None) is not None]
    return tensors


def _tracker():
    """torch's MemTracker without its module tracker (see the module docstring)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.mod_tracker import ModTracker

    class _NoModuleTracker(ModTracker):
        """Registers no module hooks: every allocation is counted as outside any module."""

        def __enter__(self):
            return self

        def __exit__(self, *args) -> None:
            pass

    tracker = MemTracker()
    tracker._mod_tracker = _NoModuleTracker()
    return tracker


class PeakMeter:
    """The peak bytes of this rank (see the module docstring for how)."""

    def __init__(self, device: torch.device, *, tracked: bool) -> None:
        self.device = device
        self.tracked = tracked and device.type == "cpu"
        """Measure a CPU step with MemTracker (False: nothing on CPU)."""
        self._cpu_peak: int | None = None
        self._expert_rows: int | None = None
        self._steps = 0

    @contextlib.contextmanager
    def step(self, model, optimizer, net=None) -> Iterator[None]:
        """Around one training step of `model` (what the wrapper wraps; `net`: what runs it,
        a pipeline's receive buffers counted, `pipeline_buffers`): the second one measured on
        CPU, the others untouched."""
        self._steps += 1
        if not self.tracked or self._steps != 2:
            yield
            return
        tracker = _tracker()
        masters = getattr(optimizer, "masters", ())
        external = (
            *_inner_optimizers(optimizer),
            *masters,
            *_engine_storages(model),
            *pipeline_buffers(net),
        )
        tracker.track_external(model, *external)
        with tracker, settled_collectives(), expert_parallel.recorded_rows(model) as rows:
            yield
        if rows is not None:
            # the step's last micro-batch, whose backward start is the expert-parallel peak
            layers = sum(isinstance(m, MoE) for m in model.modules())
            self._expert_rows = sum(rows[-layers:])
        snapshot = tracker.get_tracker_snapshot("peak")
        self._cpu_peak = int(
            sum(v["Total"] for k, v in snapshot.items() if torch.device(k).type == "cpu")
        )

    @property
    def expert_rows(self) -> int | None:
        """Rows this rank's experts received in the measured step's last micro-batch, over
        its MoE layers (expert parallelism only; None otherwise)."""
        return self._expert_rows

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
        "expert_rows_received": meter.expert_rows,
    }


def gather_records(record: dict, info: DistInfo) -> list[dict]:
    """Every rank's `record`, in rank order (a collective: every rank calls it)."""
    if not info.enabled:
        return [record]
    records: list = [None] * info.world_size
    dist.all_gather_object(records, record)
    return records
