"""The collectives of one training step, counted on the real run: op, mesh axis, bytes, calls.

Which step: the third of this process (`COUNTED_STEP`), counted whole (every micro-batch's
forward and backward, the gradient norm, the loss all-reduce, the update). Not the first two:
DDP rebuilds its gradient buckets in the second iteration's forward (rank 0 broadcasts the new
order), a start-up cost, not a step's. A process that runs fewer steps counts none.

Instruments, PyTorch's own:
- a `TorchDispatchMode` (torch.utils._python_dispatch) over the step sees every collective that
  goes through the dispatcher: the c10d ops that `torch.distributed`'s Python API calls
  (ZeroRedundancyOptimizer's broadcasts, FSDP2's all-gathers and reduce-scatters) and the
  functional collectives of DTensor (the gradient norm of FSDP2's shards). A bare mode, not
  `CommDebugMode`: CommDebugMode enters a module tracker, and under FSDP2 that leaves gloo's
  process group referenced past shut-down (train.observe.rank_memory says the same of MemTracker);
- DDP's buckets: a DDP communication hook (`register_comm_hook`) records each bucket and runs
  the default all-reduce (PyTorch's `allreduce_hook`: the bucket divided by the group's size,
  then summed -- the average DDP computes by itself), the mode told to skip that call so it
  counts once. DDP's reducer runs from the autograd engine, which on CUDA works on a device
  thread of its own; the hook counts the buckets whichever thread runs them (on CPU, gloo,
  torch 2.13, the mode alone also sees the reducer's all-reduce: checked, not relied on).
  Registered before the first forward; records only during the counted step.

Bytes follow the core's convention (core.parallel.timing.comm): all-reduce the per-rank input,
all-gather the gathered output, reduce-scatter the per-rank input, all-to-all what each rank
sends in total, broadcast and send the message (receives are not counted: the sender's row
carries the message).

Axes: each collective's process group is named by the mesh axis whose group it is
(`mesh.get_group(axis)`; a 1-D mesh's group may be the default one). The trainer's own small
collectives (the gradient norm, the step's loss-and-flags packet) are counted under the axis
"trainer" (`CommCounter.trainer`), apart from the model's rows.

Groups that are no mesh axis are named by `make_counter` (`CommCounter(extra_groups=...)`):
the expert group carved out of "dp" is "ep", its replicas "ep_replicas", and the tied
embedding's group of a pipeline's first and last stage "pp_tie". A collective on the group of a
new mesh axis needs nothing here: it is counted under that axis's name. The prediction side is
train.observe.comm_report's.

Rank 0's tally is the one written, except the "ep" all-to-alls: how many tokens a rank sends
depends on where its tokens were routed, so their bytes are the mean over the ranks (every
routed assignment is sent once, by the rank that holds its token: the mean is the run's total
over the ranks, whatever the routing). Their calls are the same on every rank.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from trainbudget.train.observe.comm_report import EP_REPLICAS, TRAINER_AXIS

if TYPE_CHECKING:
    from trainbudget.train.launch.distributed import DistInfo

COUNTED_STEP = 3
"""The step of this process whose collectives are counted (1-based; see the module docstring)."""


@dataclass(frozen=True, kw_only=True)
class Call:
    axis: str
    """Mesh axis of the group ("trainer" for the trainer's own; "group:NAME" if unknown)."""
    op: str
    """The core's kind (core.parallel.timing.comm.KINDS): all_reduce, all_gather, ..."""
    n_bytes: int
    """In the core's convention (the module docstring)."""


def _nbytes(tensors) -> int:
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors)


def _times(index: int, size_index: int):
    return lambda args: _nbytes(args[index]) * int(args[size_index])


# dispatcher op (namespace, name) -> (the core's kind, bytes from the op's arguments,
# index of the group argument: a ProcessGroup object for c10d, a group name for functional)
_C10D = {
    "allreduce_": ("all_reduce", lambda a: _nbytes(a[0]), 1),
    "allreduce_coalesced_": ("all_reduce", lambda a: _nbytes(a[0]), 1),
    "_allgather_base_": ("all_gather", lambda a: _nbytes(a[0]), 2),
    "allgather_": ("all_gather", lambda a: _nbytes(a[0]), 2),
    "allgather_coalesced_": ("all_gather", lambda a: _nbytes(a[0]), 2),
    "allgather_into_tensor_coalesced_": ("all_gather", lambda a: _nbytes(a[0]), 2),
    "_reduce_scatter_base_": ("reduce_scatter", lambda a: _nbytes(a[1]), 2),
    "reduce_scatter_": ("reduce_scatter", lambda a: _nbytes(a[1]), 2),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", lambda a: _nbytes(a[1]), 2),
    "broadcast_": ("broadcast", lambda a: _nbytes(a[0]), 1),
    "alltoall_": ("all_to_all", lambda a: _nbytes(a[1]), 2),
    "alltoall_base_": ("all_to_all", lambda a: _nbytes(a[1]), 2),
    "send": ("send_recv", lambda a: _nbytes(a[0]), 1),
}
_FUNCTIONAL = {
    "all_reduce": ("all_reduce", lambda a: _nbytes(a[0]), 2),
    "all_reduce_": ("all_reduce", lambda a: _nbytes(a[0]), 2),
    "all_reduce_coalesced": ("all_reduce", lambda a: _nbytes(a[0]), 2),
    "all_gather_into_tensor": ("all_gather", _times(0, 1), 2),
    "all_gather_into_tensor_coalesced": ("all_gather", _times(0, 1), 2),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a: _nbytes(a[0]), 3),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda a: _nbytes(a[0]), 3),
    "all_to_all_single": ("all_to_all", lambda a: _nbytes(a[0]), 3),
    "broadcast": ("broadcast", lambda a: _nbytes(a[0]), 2),
    "broadcast_": ("broadcast", lambda a: _nbytes(a[0]), 2),
}
_TABLES = {"c10d": _C10D, "_c10d_functional": _FUNCTIONAL}


def _group_name(group) -> str:
    """The name of a process group as a dispatcher op carries it (an object or its name)."""
    if isinstance(group, str):
        return group
    if not isinstance(group, dist.ProcessGroup):  # a TorchScript object of one
        group = dist.ProcessGroup.unbox(group)
    return group.group_name


class _Mode(TorchDispatchMode):
    """Records every collective dispatched while active (through `record`)."""

    def __init__(self, record) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            # modes run before tensor subclasses: let DTensor turn the op into collectives on
            # its local tensors first, which then come here (CommDebugMode does the same)
            return NotImplemented
        table = _TABLES.get(func.namespace)
        entry = table.get(func._opname) if table is not None else None
        if entry is not None:
            kind, size, group_at = entry
            self.record(kind, size(args), _group_name(args[group_at]))
        return func(*args, **(kwargs or {}))


class CommCounter:
    """This rank's collectives of the counted step (see the module docstring)."""

    def __init__(self, mesh, *, extra_groups: dict | None = None) -> None:
        self.axes: dict[str, str] = {}
        """Process-group name -> mesh axis."""
        if mesh is not None:
            for axis in mesh.mesh_dim_names:
                self.axes[mesh.get_group(axis).group_name] = axis
        for name, group in (extra_groups or {}).items():
            self.axes[group.group_name] = name
        self.enabled = mesh is not None
        self.calls: list[Call] | None = None
        """The counted step's collectives; None until it has run."""
        self._steps = 0
        self._active: list[Call] | None = None
        self._trainer = False
        self._in_hook = False

    def watch_ddp(self, net) -> None:
        """Count DDP's gradient buckets (DDP calls the group from C++; see the docstring).
        Call before the first forward."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        group = net.process_group

        def hook(state, bucket):
            self._record("all_reduce", _nbytes(bucket.buffer()), group.group_name)
            self._in_hook = True  # the mode may see the hook's all-reduce too: count it once
            try:
                return allreduce_hook(state, bucket)
            finally:
                self._in_hook = False

        net.register_comm_hook(group, hook)

    def _record(self, op: str, n_bytes: int, group: str) -> None:
        if self._active is None:
            return
        axis = TRAINER_AXIS if self._trainer else self.axes.get(group, f"group:{group}")
        self._active.append(Call(axis=axis, op=op, n_bytes=n_bytes))

    def _seen(self, op: str, n_bytes: int, group: str) -> None:
        if not self._in_hook:
            self._record(op, n_bytes, group)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around one training step: the COUNTED_STEP-th is counted, the others untouched."""
        self._steps += 1
        if not self.enabled or self._steps != COUNTED_STEP:
            yield
            return
        self._active = []
        try:
            with _Mode(self._seen):
                yield
            self.calls = self._active
        finally:
            self._active, self._trainer = None, False

    def trainer(self, on: bool) -> None:
        """From here (`on`) until `trainer(False)` or the end of the step, collectives are the
        trainer's own (gradient norm, the loss packet): the "trainer" row. Two calls rather
        than a context, so that the loop's step keeps its lines as they are."""
        self._trainer = on


def make_counter(parallel, *, compiled: bool) -> CommCounter:
    """The counter of a run wrapped by train.parallel.parallelize (`parallel`), DDP's buckets
    included; off under torch.compile (a dispatch mode around a compiled step would break its
    graph)."""
    from torch.nn.parallel import DistributedDataParallel

    counter = CommCounter(None if compiled else parallel.mesh, extra_groups=_extra_groups(parallel))
    # DDP only: ddp under tensor parallelism runs as FSDP2's replicate, seen by the mode
    if counter.enabled and isinstance(parallel.net, DistributedDataParallel):
        counter.watch_ddp(parallel.net)
    return counter


def _extra_groups(parallel) -> dict:
    """The run's process groups that are no mesh axis, by the name their rows carry."""
    from trainbudget.train.parallel import expert_parallel
    from trainbudget.train.parallel.context import folded_groups

    out = {}
    tie = getattr(parallel.net, "tie_group", None)  # pp > 1, tied embeddings, first or last
    if tie is not None:
        out["pp_tie"] = tie
    layout = expert_parallel.of(parallel.model if parallel.model is not None else parallel.net)
    if layout is None and hasattr(parallel.net, "module"):  # DDP around the model
        layout = expert_parallel.of(parallel.net.module)
    out.update(folded_groups(parallel.mesh))  # cp > 1: dp x cp, the gradients' group
    if layout is not None:
        out["ep"] = layout.groups.group
        if layout.groups.replicas is not None:
            out[EP_REPLICAS] = layout.groups.replicas
    return out


def tally(calls: list[Call]) -> dict[tuple[str, str], tuple[int, int]]:
    """(axis, op) -> (bytes, calls) of one step's collectives."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for c in calls:
        n_bytes, count = out.get((c.axis, c.op), (0, 0))
        out[(c.axis, c.op)] = (n_bytes + c.n_bytes, count + 1)
    return out


def gather_tallies(counter: CommCounter, info: DistInfo) -> tuple[dict | None, bool]:
    """Rank 0's tally of the counted step (None: none counted) and whether every rank counted
    the same (a collective: every rank calls it)."""
    mine = None if counter.calls is None else tally(counter.calls)
    if not info.enabled:
        return mine, True
    everyone: list = [None] * info.world_size
    dist.all_gather_object(everyone, mine)
    if everyone[0] is None:
        return None, all(t is None for t in everyone)
    routed = [k for k in everyone[0] if k == ("ep", "all_to_all")]
    for key in routed:  # routing-dependent: the mean over the ranks (the module docstring)
        total = sum(t[key][0] for t in everyone)
        everyone = [{**t, key: (total / len(everyone), t[key][1])} for t in everyone]
    return everyone[0], all(t == everyone[0] for t in everyone)
