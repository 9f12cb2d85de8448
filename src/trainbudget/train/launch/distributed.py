"""torchrun support: one process per device, gloo on CPU and NCCL on GPU, the model wrapped
(train.parallel.parallelize) in DDP (ddp, zero1) or FSDP2 `fully_shard` (zero2, fsdp, hsdp; see
train.spec.strategy). Nothing here runs unless torchrun set WORLD_SIZE > 1.

What makes an N-rank run the same computation as one process with the same global batch:
- the data: every rank takes its rows of one global batch per step (train.data.TrainBatches);
- the gradient: DDP and FSDP2 average gradients over all ranks (reduce-scatter/all-reduce of
  the sum divided by N; HSDP: reduce-scatter in the shard group, all-reduce across the
  groups), and each rank's loss is its local mean over equal-sized micro-batches
  divided by grad_accum, so the synchronised gradient is that of the global mean loss;
- accumulation: gradients are synchronised once per step, on the last micro-batch
  (`grad_sync`: DDP's no_sync, FSDP2's set_requires_gradient_sync(False) on the others);
- clipping: torch.nn.utils.clip_grad_norm_ on FSDP2's DTensor gradients reduces the shards'
  norms across ranks, so the norm is the full model's (`total_grad_norm` likewise);
- the update: ZeroRedundancyOptimizer (zero1) steps each parameter on one rank and broadcasts
  it, the same update as every rank stepping it;
- the logged loss: the mean over ranks of each rank's mean (the loop's
  per-step `all_reduce_sum`, divided by N), the global
  batch's mean because every rank has the same number of rows.
Checkpoints: DDP (ddp, zero1: the optimizer state consolidated on rank 0) and one-process
runs hold full tensors in the single-process format, written by rank 0 (`full_state`); FSDP2
runs write their shards with torch.distributed.checkpoint (train.sharded). `ShardingLoad`
cuts a full optimizer state into FSDP2's shards (a full checkpoint resumed under FSDP2).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from trainbudget.train.launch.collective_watch import Watch
from trainbudget.train.launch.launch_env import read_launch_env
from trainbudget.train.launch.rendezvous import join


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    watch: Watch | None = field(default=None, compare=False, repr=False)
    """The marks every rank leaves before each phase with collectives, over the rendezvous
    store (train.launch.collective_watch); None when running alone."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_kind: str, timeout_seconds: float) -> DistInfo:
    """Join the process group torchrun describes in the environment (or run alone). The
    environment is checked first (train.launch.launch_env); the rendezvous and every collective wait
    at most `timeout_seconds` (train.launch.rendezvous)."""
    env = read_launch_env(os.environ)
    if env.world_size <= 1:
        return DistInfo(0, 0, 1)
    watch = None
    if not dist.is_initialized():
        backend = "nccl" if device_kind == "cuda" else "gloo"
        watch = join(env, backend, timeout_seconds)
    if device_kind == "cuda":
        torch.cuda.set_device(env.local_rank)
    return DistInfo(env.rank, env.local_rank, env.world_size, watch)


def arrive(info: DistInfo, label: str) -> None:
    """This rank enters a phase with collectives (see train.launch.collective_watch); every rank
    calls it at the same points. A no-op alone."""
    if info.watch is not None:
        info.watch.arrive(label)


def grad_sync(net: nn.Module, info: DistInfo, strategy: str, *, sync: bool):
    """The context for one micro-batch's forward and backward: gradients are synchronised across
    ranks only when `sync` (the step's last micro-batch); before it they accumulate locally.

    DDP: `no_sync()`. FSDP2: `set_requires_gradient_sync(False)`, without which every backward
    would reduce-scatter (same result, grad_accum times the communication); the last
    micro-batch's backward then reduce-scatters the accumulated unsharded gradients."""
    if not info.enabled or sync:
        return contextlib.nullcontext()
    if hasattr(net, "set_requires_gradient_sync"):
        # FSDP2, and FSDP2's `replicate` (ddp with tensor parallelism); a torch.compile
        # wrapper forwards the attribute
        return _fsdp_no_sync(net)
    if not hasattr(net, "no_sync"):  # tensor parallelism alone: no data-parallel gradient
        return contextlib.nullcontext()
    return net.no_sync()


@contextlib.contextmanager
def _fsdp_no_sync(net: nn.Module) -> Iterator[None]:
    net.set_requires_gradient_sync(False)  # a torch.compile wrapper forwards the attribute
    try:
        yield
    finally:
        net.set_requires_gradient_sync(True)


def total_grad_norm(parameters) -> torch.Tensor:
    """The L2 norm of all gradients, as one vector (what clip_grad_norm_ returns), without
    changing them; under FSDP2 or tensor parallelism the norm of the full gradients, not of
    this rank's shards."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    # clip_grad_norm_'s own reduction (per-tensor norms, then the norm of those); on DTensor
    # shards each norm is a partial that DTensor reduces across ranks, one device mesh at a time
    per_mesh = []
    for group in _by_mesh(grads):
        norms = [torch.linalg.vector_norm(g.float()) for g in group]
        per_mesh.append(_full(torch.linalg.vector_norm(torch.stack(norms))))
    return per_mesh[0] if len(per_mesh) == 1 else torch.linalg.vector_norm(torch.stack(per_mesh))


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ over gradients that may live on several device meshes
    (tensor parallelism: DTensors on the tp axis beside the plain tensors of replicated
    parameters, or under FSDP2 2-D and 1-D DTensors), which torch's would refuse to combine:
    the norm of each mesh's gradients, then of those (the same vector norm), and every
    gradient scaled by min(1, max_norm / (norm + 1e-6)) as torch's does. One mesh (or none):
    torch's own."""
    params = [p for p in parameters if p.grad is not None]
    if len(_by_mesh([p.grad for p in params])) <= 1:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return _full(norm)
    norm = total_grad_norm(params)
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    for group in _by_mesh([p.grad for p in params]):
        torch._foreach_mul_(group, scale)
    return norm


def _by_mesh(grads: list) -> list[list]:
    """`grads` grouped by their DTensor device mesh (plain tensors together), in order."""
    groups: dict = {}
    for g in grads:
        groups.setdefault(g.device_mesh if isinstance(g, DTensor) else None, []).append(g)
    return list(groups.values())


def _full(value: torch.Tensor) -> torch.Tensor:
    return value.full_tensor() if isinstance(value, DTensor) else value


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def is_sharded(module: nn.Module) -> bool:
    """Whether FSDP2 has sharded `module`'s parameters: it is fully_shard's (zero2 keeps them
    gathered, as plain tensors, from a forward to its backward), or they are DTensors."""
    return _is_fsdp_module(module) or any(isinstance(p, DTensor) for p in module.parameters())


def _is_fsdp_module(module: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6 kept FSDP2 under _composable
        from torch.distributed._composable.fsdp import FSDPModule
    return isinstance(module, FSDPModule)


def full_state(state, info: DistInfo):
    """`state` (a state_dict, nested dicts/lists of tensors) with every DTensor gathered into the
    full tensor, on the CPU: the single-process state_dict's format (what
    torch.distributed.checkpoint.state_dict's full_state_dict=True, cpu_offload=True gives for
    the model). A collective under FSDP2: every rank must call it, in the same order. Rank 0
    keeps the gathered tensors; the other ranks get None (so at most one full tensor at a time
    is alive there). Without DTensors (one process, DDP) `state` itself comes back."""

    def gather(value):
        if isinstance(value, DTensor):
            full = value.full_tensor()
            return full.cpu() if info.is_main else None
        if isinstance(value, dict):
            return {k: gather(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(gather(v) for v in value)
        return value

    gathered = gather(state)
    return gathered if info.is_main else None


class ShardingLoad:
    """Where an optimizer is expected (train.resume): loads a full (single-process format)
    optimizer state into an optimizer over FSDP2's DTensor parameters, each state tensor of a
    parameter's shape cut into that parameter's shard (every rank read the same file, so each
    slices its own part: no communication). Scalars such as Adam's `step` stay as they are.
    model.optim.MasterWeightOptimizer's state (its fp32 masters, DTensors like the parameters
    they copy, and its inner optimizer's state) is cut the same way."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(_shard_optimizer_state(self.optimizer, state))


def _shard_optimizer_state(optimizer, state: dict) -> dict:
    if "masters" in state and hasattr(optimizer, "masters"):  # MasterWeightOptimizer
        masters = [
            _shard_like(value, master)
            for value, master in zip(state["masters"], optimizer.masters, strict=True)
        ]
        return {
            "inner": _shard_optimizer_state(optimizer.inner, state["inner"]),
            "masters": masters,
        }
    # a pipeline rank's optimizer (train.parallel.pipeline) is indexed by the whole model's
    # parameters
    params = getattr(optimizer, "params_by_index", None) or [
        p for group in optimizer.param_groups for p in group["params"]
    ]
    sharded = {
        index: {
            key: value if key == "step" else _shard_like(value, params[int(index)])
            for key, value in per_param.items()
        }
        for index, per_param in state["state"].items()
    }
    return {**state, "state": sharded}


def _shard_like(value, param):
    if not (isinstance(param, DTensor) and torch.is_tensor(value) and value.shape == param.shape):
        return value
    return distribute_tensor(
        value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
    )


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """End the process group while the interpreter is fully alive. Every rank calls it, after
    its last collective and after dropping its model, optimizer and DDP/FSDP2 wrappers
    (train.loop.train does).

    `destroy_process_group` only unregisters a gloo group (gloo's `shutdown` does nothing):
    the backend and its threads (two `pt_gloo_runloop` workers, one `gloo_tcp_loop`) live on
    until the last reference to the group goes -- and DDP and FSDP2 hold references, in
    reference cycles, and so do torch 2.13's DeviceMeshes (`_pg_registry`), which DTensor's
    caches keep for the life of the process. Left alive into interpreter exit, a worker that
    finished a collective but has not yet dropped it (it wakes the caller first, then lets go;
    under CPU load it can lag) frees the work's tensors during Py_FinalizeEx; a tensor whose
    Python object the C++ side owns needs the GIL to be freed, a thread asking for the GIL then
    is ended by pthread_exit, and its unwinding through a noexcept destructor aborts the
    process: "terminate called without an active exception", SIGABRT, after the last step.
    (gdb on such a core: runLoop -> ~AsyncAllgatherWork -> TensorImpl::decref_pyobject ->
    take_gil -> PyThread_exit_thread -> _Unwind_ForcedUnwind -> std::terminate.)

    Hence: a barrier (no rank still communicates), those cycles collected, the meshes' links to
    the group cut, and the destroy drops the last reference: the backend's destructor joins its
    threads here."""
    if not (info.enabled and dist.is_initialized()):
        return
    arrive(info, "shut-down")
    dist.barrier()
    gc.collect()
    _unlink_device_meshes()
    dist.destroy_process_group()


def _unlink_device_meshes() -> None:
    """Empty every DeviceMesh's `_pg_registry` (torch 2.13; older torch has none): the strong
    references to the process groups that DTensor's module-level caches (redistribute planners,
    sharding propagation) would otherwise keep until exit. It is read only while torch.compile
    traces; outside tracing a mesh finds its groups by name, and after the destroy it has none."""
    from torch.distributed.device_mesh import DeviceMesh

    for obj in gc.get_objects():
        if isinstance(obj, DeviceMesh) and isinstance(getattr(obj, "_pg_registry", None), dict):
            obj._pg_registry.clear()
