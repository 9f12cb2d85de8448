"""The model and its optimizer wrapped for the strategy that runs (train.spec.strategy), on one
device mesh built here, in one place, from the strategy's `MeshShape`: PyTorch's engines only.

- ddp: DistributedDataParallel over the mesh's "dp" group.
- zero1: the same DDP (gradients all-reduced, replicated) and the optimizer in
  torch.distributed.optim.ZeroRedundancyOptimizer: each rank keeps the state of whole
  parameters assigned to it (greedily, largest first, so the ranks' shares are as even as whole
  tensors allow), steps them, and broadcasts them to the others.
- zero2: FSDP2 `fully_shard(block, reshard_after_forward=False)` per block and on the root:
  parameters, gradients and optimizer state sharded at rest; the parameters gathered in forward
  stay gathered until backward has used them.
- fsdp: FSDP2 `fully_shard` per block and on the root (ZeRO-3).
- hsdp: the same on the 2-D ("dp_replicate", "dp_shard") mesh: shards within a group of
  zero_shard ranks, gradients all-reduced across the groups.
- ep > 1 (ddp, zero2, fsdp): each MoE layer keeps its share of the experts, reached by
  all-to-all, in groups of ep ranks of the "dp" axis (train.parallel.expert_parallel); DDP ignores
  the experts, FSDP2 shards each over its replicas before the blocks are wrapped.

With tensor parallelism (tp > 1; train.parallel.tensor_parallel) the mesh has a trailing "tp" axis:
the model is first split over it (its parameters become DTensors), then the strategy runs on the
data-parallel sub-mesh, as torchtitan composes them: zero2, fsdp, hsdp with FSDP2 `fully_shard`
on the data-parallel axes (2-D parameters: tp split, dp sharded); ddp with
torch.distributed._composable.replicate_with_fsdp's `replicate` on the "dp" axis -- FSDP2's
engine without sharding, since DistributedDataParallel does not take DTensor parameters --
(gradients all-reduced over dp; "DDP + DTensor tensor parallel" in the summary); zero1 is
refused (train.spec.strategy.check_strategy). With one data-parallel rank (the processes are one tp
group) nothing but the split runs.

With context parallelism (cp > 1; train.parallel.context) the mesh has a "cp" axis just outside
"tp": the model holds this rank's `ContextShard` (each sequence's chunks r and 2 cp - 1 - r,
attention over K and V all-gathered on the cp group), and the strategy runs on the data-parallel
axis with cp folded in ("dp_cp", torchtitan's dp_shard_cp; under hsdp "dp_shard_cp" beside
"dp_replicate"; with one rank there the "cp" axis itself): the
ranks of a cp group hold the same parameters and average their gradients like data-parallel
ranks, each having seen other tokens of the same sequences.

What keeps each one the same computation as one process with the same global batch is in
train.launch.distributed's docstring (gradients averaged over all ranks, synchronised once per
step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.optim import ZeroRedundancyOptimizer

from trainbudget.model.optimizers import build_optimizer
from trainbudget.train.launch.distributed import DistInfo
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.parallel.context import context_shard, gradient_mesh
from trainbudget.train.parallel.setup import make_optimizer
from trainbudget.train.parallel.tensor_parallel import apply_tensor_parallel
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.strategy import get_strategy, mesh_shape


@dataclass(frozen=True, kw_only=True)
class Parallel:
    strategy: str
    """What runs (train.spec.strategy's name); as configured, whatever the world size."""
    mesh: DeviceMesh | None
    """The run's one device mesh; None when running alone."""
    net: nn.Module
    """What the steps call: DDP around the model, or the model FSDP2 sharded in place; with
    pp > 1, this rank's train.parallel.pipeline.Pipeline."""
    model: nn.Module | None = None
    """pp > 1: this rank's part of the model (its stages' parameters, under the model's own
    names), what the run keeps as its model; None: the model given."""


def build_mesh(info: DistInfo, cfg: TrainConfig, device: torch.device) -> DeviceMesh | None:
    """The device mesh of the run's strategy (train.spec.strategy.mesh_shape), None alone."""
    if not info.enabled:
        return None
    shape = mesh_shape(
        cfg.strategy,
        world_size=info.world_size,
        zero_shard=cfg.zero_shard,
        tp=cfg.tp,
        pp=cfg.pp,
        cp=cfg.cp,
    )
    return init_device_mesh(device.type, shape.sizes, mesh_dim_names=shape.axes)


DATA_PARALLEL_AXES = ("dp", "dp_replicate", "dp_shard")
"""The mesh axes whose ranks read different rows of the global batch."""


def data_parallel_coordinate(mesh: DeviceMesh | None) -> tuple[int, int]:
    """(dp_rank, dp_size): this rank's place among the ranks that read different rows, and
    their number -- what the data loader splits the global batch by. Ranks that differ only
    along the other axes (a tp group) share a coordinate, so they read the same rows.
    (0, 1) alone."""
    if mesh is None:
        return 0, 1
    axes = [name for name in mesh.mesh_dim_names if name in DATA_PARALLEL_AXES]
    rank, size = 0, 1
    for name in axes:  # outermost first: a row-major index over the data-parallel axes
        rank = rank * mesh.size(mesh.mesh_dim_names.index(name)) + mesh[name].get_local_rank()
        size *= mesh.size(mesh.mesh_dim_names.index(name))
    return rank, size


def parallelize(
    model: nn.Module,
    info: DistInfo,
    cfg: TrainConfig,
    device: torch.device,
    *,
    mesh: DeviceMesh | None = None,
) -> Parallel:
    """Wrap `model` for `cfg.strategy` (and split it over the "tp" axis with tp > 1) on `mesh`
    (default: `build_mesh`); the model itself when running alone.

    FSDP2 and tensor parallelism change the model in place (its parameters become DTensors), so
    the optimizer must be built after this call (`parallel_optimizer`)."""
    mesh = mesh if mesh is not None else build_mesh(info, cfg, device)
    if mesh is None:
        return Parallel(strategy=cfg.strategy, mesh=None, net=model)
    if cfg.pp > 1:  # stages, each wrapped for the strategy (train.parallel.pipeline)
        from trainbudget.train.parallel.pipeline import build_pipeline

        part, pipeline = build_pipeline(model, cfg, mesh, device)
        return Parallel(strategy=cfg.strategy, mesh=mesh, net=pipeline, model=part)
    strategy = get_strategy(cfg.strategy)
    # context parallelism: each rank trains on its chunks of every sequence (the model's own
    # forward, train.parallel.context); the wrappers below average over dp x cp
    model.sequence_shard = context_shard(mesh)
    if cfg.tp > 1:
        return _tensor_parallel(model, mesh, cfg)
    if cfg.ep > 1:  # before DDP or FSDP2: they must not broadcast or reduce the experts
        expert_parallel.shard_experts(model, expert_parallel.expert_groups(mesh, cfg.ep))
        expert_parallel.ddp_ignored(model)
    if strategy.fsdp2:
        if cfg.ep > 1:  # the experts sharded over their replicas first (torchtitan's way)
            expert_parallel.fully_shard_experts(
                model, mesh, reshard_after_forward=strategy.reshard_after_forward
            )
        data = gradient_mesh(mesh, _data_axes(mesh))
        _fully_shard(model, data, reshard_after_forward=strategy.reshard_after_forward)
        return Parallel(strategy=cfg.strategy, mesh=mesh, net=model)
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    group = gradient_mesh(mesh, ("dp",)).get_group()  # ddp, zero1: the one "dp" axis
    net = DistributedDataParallel(model, device_ids=ids, process_group=group)
    return Parallel(strategy=cfg.strategy, mesh=mesh, net=net)


def _tensor_parallel(model: nn.Module, mesh: DeviceMesh, cfg: TrainConfig) -> Parallel:
    """Split the model over "tp", then the strategy over the data-parallel sub-mesh (see the
    module docstring); FSDP2's engine either way, so grad_sync and checkpoints treat it as
    FSDP2 (DTensor parameters, DCP)."""
    apply_tensor_parallel(model, mesh["tp"], sequence_parallel=cfg.sequence_parallel)
    data = gradient_mesh(mesh, _data_axes(mesh))
    if data.size() == 1:  # the processes are one tp group: nothing to average over
        return Parallel(strategy=cfg.strategy, mesh=mesh, net=model)
    strategy = get_strategy(cfg.strategy)
    if strategy.fsdp2:
        _fully_shard(model, data, reshard_after_forward=strategy.reshard_after_forward)
    else:  # ddp: zero1 is refused before (train.spec.strategy.check_strategy)
        from torch.distributed._composable.replicate_with_fsdp import replicate

        replicate(model, mesh=data)
    return Parallel(strategy=cfg.strategy, mesh=mesh, net=model)


def _data_axes(mesh: DeviceMesh) -> tuple[str, ...]:
    """The mesh's data-parallel axes, outermost first."""
    return tuple(name for name in mesh.mesh_dim_names if name in DATA_PARALLEL_AXES)


def _fully_shard(model: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool) -> None:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6 kept FSDP2 under _composable
        from torch.distributed._composable.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def reshard(model: nn.Module) -> None:
    """Free the parameters FSDP2 gathered for a forward that had no backward (evaluation,
    probes): without resharding after forward (zero2) only backward frees them, so they would
    stay gathered -- the full model on every rank -- until the next training step, and a
    checkpoint in between would find plain tensors instead of shards."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6 kept FSDP2 under _composable
        from torch.distributed._composable.fsdp import FSDPModule
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def parallel_optimizer(model: nn.Module, cfg: TrainConfig, parallel: Parallel):
    """The run's optimizer (train.parallel.setup.make_optimizer); under zero1 sharded by
    ZeroRedundancyOptimizer over the mesh's "dp" group; with pp > 1 over this rank's stages,
    its state in the whole model's layout (train.parallel.pipeline.PipelineOptimizer)."""
    if parallel.model is not None:
        from trainbudget.train.parallel.pipeline import PipelineOptimizer

        return PipelineOptimizer(model, model.whole, cfg)
    if parallel.strategy != "zero1" or parallel.mesh is None:
        return make_optimizer(model, cfg)
    return ShardedStateOptimizer(
        model.parameters(),
        optimizer_class=_Factory(cfg.optimizer),
        process_group=gradient_mesh(parallel.mesh, ("dp",)).get_group(),
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
    )


class _Factory:
    """The project's optimizer factory for one name, called as a class is (params, **defaults)
    -- what ZeroRedundancyOptimizer builds each rank's local optimizer with."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, params, **defaults) -> torch.optim.Optimizer:
        return build_optimizer(self.name, params, **defaults)


class ShardedStateOptimizer(ZeroRedundancyOptimizer):
    """ZeroRedundancyOptimizer whose state_dict is the full optimizer state in the
    single-process format, on rank 0, like train.launch.distributed.full_state gives for FSDP2: a
    collective (every rank calls it, as every checkpoint save does); None on the other ranks.
    load_state_dict takes that full state; each rank keeps the part of its own parameters."""

    def state_dict(self):
        self.consolidate_state_dict(to=0)
        if self.rank != 0:
            return None
        state = super().state_dict()
        # consolidate_state_dict kept every rank's state on rank 0: let the copy go with the save
        self._all_state_dicts = []
        return state

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        # ZeroRedundancyOptimizer's load also leaves the loaded state in its own `state` (None
        # for the other ranks' parameters, a second copy of this rank's); the local optimizer
        # (`optim`) holds the copy that steps, and state_dict reads that one: drop the other
        self.state.clear()
