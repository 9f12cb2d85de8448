"""torchrun support: one process per device, gloo on CPU and NCCL on GPU, the model wrapped in
DDP (replicated) or FSDP2 `fully_shard` (parameters, gradients and optimizer state sharded:
ZeRO-3). Nothing here runs unless torchrun set WORLD_SIZE > 1."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_kind: str) -> DistInfo:
    """Join the process group torchrun describes in the environment (or run alone)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(0, 0, 1)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    if device_kind == "cuda":
        torch.cuda.set_device(local)
    return DistInfo(rank, local, world)


def wrap_model(model: nn.Module, info: DistInfo, strategy: str, device: torch.device) -> nn.Module:
    """DDP or FSDP2 around `model`; the model itself when running alone."""
    if not info.enabled:
        return model
    if strategy == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6 kept FSDP2 under _composable
            from torch.distributed._composable.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def all_reduce_mean(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= info.world_size
    return value


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
