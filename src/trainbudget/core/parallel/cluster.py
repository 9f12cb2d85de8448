"""A cluster: how many of which accelerator, how they are grouped into nodes, how fast the links
really run. Link figures default to the hardware catalog row; efficiencies and latencies are
inputs because they are properties of a software stack as much as of the wires."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.units import GB

# Latency (alpha) of one collective step. NCCL's own tuning model uses a few microseconds per
# hop inside a node and ~5-10 us across InfiniBand (NCCL src/graph/tuning.cc base latencies);
# we take 5 us and 10 us.
DEFAULT_INTRA_NODE_LATENCY_SECONDS = 5e-6
DEFAULT_INTER_NODE_LATENCY_SECONDS = 10e-6
# Achieved / nominal bandwidth of large collectives: nccl-tests all-reduce bus bandwidth on
# DGX H100 reaches ~360-480 of 450 GB/s NVLink per direction; on 400 Gb/s NDR ~40-45 of
# 50 GB/s. 0.8 is a conservative middle.
DEFAULT_LINK_EFFICIENCY = 0.8
# Host link for offload: PCIe 4.0 x16 (A100) is 32 GB/s per direction, 5.0 x16 (H100) 64 GB/s;
# pinned-memory copies reach ~80 % of it.
DEFAULT_PCIE_BYTES_PER_SECOND = 25 * GB
# One datacenter NVMe SSD (PCIe 4.0 x4) reads ~7 GB/s; ZeRO-Infinity stripes several per node.
DEFAULT_NVME_BYTES_PER_SECOND_PER_GPU = 3 * GB
# Host DRAM bandwidth one GPU's CPU optimizer (ZeRO-Offload's CPU-Adam, a vectorised,
# memory-bound loop) gets: a DGX A100 has 2 AMD EPYC 7742 sockets x 8 channels of DDR4-3200
# (25.6 GB/s each) = 410 GB/s for 8 GPUs, 51 GB/s each; STREAM reaches ~80 % of it.
DEFAULT_HOST_MEMORY_BYTES_PER_SECOND_PER_GPU = 40 * GB


@dataclass(frozen=True, kw_only=True)
class Cluster:
    hardware: Hardware
    n_gpus: int
    gpus_per_node: int = 0
    """0: the hardware row's platform size."""
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY
    """Fraction of nominal link bandwidth collectives achieve (both intra- and inter-node)."""
    intra_node_latency_seconds: float = DEFAULT_INTRA_NODE_LATENCY_SECONDS
    inter_node_latency_seconds: float = DEFAULT_INTER_NODE_LATENCY_SECONDS
    pcie_bytes_per_second: float = DEFAULT_PCIE_BYTES_PER_SECOND
    nvme_bytes_per_second: float = DEFAULT_NVME_BYTES_PER_SECOND_PER_GPU
    host_memory_bytes_per_second: float = DEFAULT_HOST_MEMORY_BYTES_PER_SECOND_PER_GPU
    """Host DRAM bandwidth per GPU: what times the CPU optimizer update under offload."""
    price_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node == 0:
            object.__setattr__(self, "gpus_per_node", self.hardware.gpus_per_node)
        if isinstance(self.n_gpus, bool) or not isinstance(self.n_gpus, int) or self.n_gpus <= 0:
            raise SpecError("gpus", self.n_gpus, "must be a positive integer")
        if self.gpus_per_node <= 0:
            raise SpecError("gpus_per_node", self.gpus_per_node, "must be a positive integer")
        if self.n_gpus > self.gpus_per_node and self.n_gpus % self.gpus_per_node:
            raise SpecError(
                "gpus",
                self.n_gpus,
                f"must be a multiple of gpus_per_node ({self.gpus_per_node}) beyond one node",
            )
        if not 0 < self.link_efficiency <= 1:
            raise SpecError("link_efficiency", self.link_efficiency, "must be in (0, 1]")
        for name in ("intra_node_latency_seconds", "inter_node_latency_seconds"):
            if getattr(self, name) < 0:
                raise SpecError(name, getattr(self, name), "must not be negative")
        for name in (
            "pcie_bytes_per_second",
            "nvme_bytes_per_second",
            "host_memory_bytes_per_second",
        ):
            if getattr(self, name) <= 0:
                raise SpecError(name, getattr(self, name), "must be positive")

    @property
    def n_nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)

    @property
    def intra_node_bytes_per_second(self) -> float:
        """Achieved per-GPU, one-direction bandwidth inside a node."""
        return self.hardware.intra_node_bytes_per_second * self.link_efficiency

    @property
    def inter_node_bytes_per_second(self) -> float:
        """Achieved per-GPU, one-direction bandwidth between nodes."""
        return self.hardware.inter_node_bytes_per_second * self.link_efficiency
