"""Does a plan fit in a GPU's memory: the one rule every answer that says "fits" calls, and the
conversion of the model's peak into what each kind of memory figure measures.

The memory model predicts the peak of live tensors: what `torch.cuda.max_memory_allocated()`
reports ('allocated'). A run goes out of memory on more than that, and sources report other
figures (`MEMORY_MEASURES`):

- 'reserved', `torch.cuda.max_memory_reserved()`: what PyTorch's caching allocator holds from
  the driver, the live tensors plus the blocks cached and split but free. Its excess over the
  allocated peak is fragmentation, which depends on the order of allocations and frees (the
  allocator's rounding alone, 512 B blocks and 2 MiB / 20 MiB segments, is small next to it):
  `ALLOCATOR_FRAGMENTATION`, a published measurement over LLM training steps.
- 'device', what nvidia-smi or NVML shows for the process: the reserved memory plus what is
  allocated outside PyTorch's allocator, the CUDA context (`CUDA_CONTEXT_BYTES`) and NCCL's
  communication buffers (`NCCL_COMMUNICATOR_BYTES` a communicator).

`fits` decides on the device figure: a plan fits when its device peak, times the model's own
measured memory error on similar runs (`FitsRule.error_margin`), is at most the GPU's capacity;
or, with a flat headroom (the default, `--memory-headroom`), when the allocated peak is at most
that fraction of it. Every function takes plain numbers or numpy arrays (the planner's grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM

MEMORY_MEASURES = {
    "allocated": "the peak of live tensors, torch.cuda.max_memory_allocated(): what the memory "
    "model predicts",
    "reserved": "what the caching allocator holds, torch.cuda.max_memory_reserved(): allocated "
    "plus the allocator's fragmentation",
    "device": "the device memory the process uses, as nvidia-smi or NVML shows it: reserved "
    "plus the CUDA context and NCCL's buffers",
}
"""What a memory figure measures -> its definition (a published run's `memory_measure`)."""

ALLOCATOR_FRAGMENTATION = 0.15
"""Share of the caching allocator's reserved memory that is free but held: Guo et al. 2024,
GMLake (ASPLOS '24, arXiv:2401.08156), abstract and §6: over eight LLMs trained on A100-80GB
(recomputation, offloading, ZeRO, LoRA), stitching the free blocks brings the fragmentation
(1 - allocated / reserved) to near zero, 15 % lower on average (up to 33 %) than PyTorch's
caching allocator: the average of the allocator's own. reserved = allocated / (1 - 0.15)."""

CUDA_CONTEXT_BYTES = 287_047_680
"""Device memory of the CUDA context PyTorch creates, with lazy module loading (PyTorch's
default since 1.13, CUDA_MODULE_LOADING=LAZY): 287,047,680 bytes measured in pytorch/pytorch
PR #86509 (666,632,192 bytes with eager loading)."""

NCCL_CHANNELS = 32
"""Channels of a communicator on an NVLink node: NCCL's MAXCHANNELS (32, src/include/device.h
up to NCCL 2.22), as many as the 8 x H100 run of NVIDIA/nccl issue #1685 opened; its
maintainers: 'memory usage is linearly tied to the number of channels' (issue #986)."""

NCCL_CONNECTION_BYTES = 2**22 + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8
"""One channel's buffers for one ring connection, each of NCCL's three protocols (NCCL
src/init.cc): Simple DEFAULT_BUFFSIZE 4 MiB (the NCCL_BUFFSIZE default), LL
NCCL_LL_LINES_PER_THREAD (8) x NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS (8) x a 16-byte line,
LL128 NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS (640) x NCCL_STEPS x 8 bytes:
9,633,792 bytes (issue #1685 sees them as 10 MiB allocations, the cuMem 2 MiB granularity)."""

NCCL_COMMUNICATOR_BYTES = NCCL_CHANNELS * NCCL_CONNECTION_BYTES
"""NCCL's buffers on one GPU for one communicator: a ring connection's buffers per channel (a
ring has two connections a rank, each buffer held by one side: NVIDIA/nccl issue #986). Trees,
NVLS and all-to-all channels add more; they are not counted (no source gives their size)."""


def n_communicators(dp: Any, tp: Any, pp: Any, cp: Any) -> Any:
    """NCCL communicators a rank holds: one per parallel axis of degree above 1 (data, tensor,
    pipeline, context). Integer arithmetic, not `or`: numpy adds booleans as a logical or."""
    return (dp > 1) * 1 + (tp > 1) * 1 + (pp > 1) * 1 + (cp > 1) * 1


def outside_allocator_bytes(communicators: Any) -> Any:
    """Device memory a training process holds outside PyTorch's allocator: the CUDA context
    and NCCL's buffers. cuBLAS workspaces (a few MiB to 32 MiB a handle) come from the caching
    allocator itself; cuDNN's are per-call temporaries of no published size: neither counted."""
    return CUDA_CONTEXT_BYTES + communicators * NCCL_COMMUNICATOR_BYTES


def in_measure(allocated_bytes: Any, measure: str, communicators: Any = 0) -> Any:
    """The model's allocated peak as a figure of kind `measure` (MEMORY_MEASURES)."""
    if measure not in MEMORY_MEASURES:
        raise SpecError("memory_measure", measure, "must be one of " + ", ".join(MEMORY_MEASURES))
    if measure == "allocated":
        return allocated_bytes
    reserved = allocated_bytes / (1 - ALLOCATOR_FRAGMENTATION)
    if measure == "reserved":
        return reserved
    return reserved + outside_allocator_bytes(communicators)


def oom_peak_bytes(allocated_bytes: Any, communicators: Any = 0) -> Any:
    """What must fit in the GPU for the step not to fail: the allocated peak and the memory
    outside the allocator, without the allocator's fragmentation. When cudaMalloc fails, the
    caching allocator frees its cached blocks and retries before it raises out-of-memory
    (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc:
    release_available_cached_blocks, then release_cached_blocks), so the reserve it holds in
    a roomy step is not what a full step needs. The part it cannot free (free pieces of
    segments that also hold live tensors) has no published size: left to the margin."""
    return allocated_bytes + outside_allocator_bytes(communicators)


@dataclass(frozen=True, kw_only=True)
class FitsRule:
    """How `fits` decides. With `headroom` set, the flat rule: the allocated peak is at most
    that fraction of the GPU's memory (--memory-headroom). With headroom None, the device rule:
    the device peak times `error_margin` is at most the GPU's memory."""

    headroom: float | None = DEFAULT_MEMORY_HEADROOM
    error_margin: float = 1.0
    """measured / predicted peak (each in its source's measure) on published runs like the
    plan: a quantile of the model's own error, 1.0 where none is known."""

    def __post_init__(self) -> None:
        h = self.headroom
        if h is not None and (isinstance(h, bool) or not 0 < h <= 1):
            raise SpecError("memory_headroom", h, "must be a fraction in (0, 1]")
        if isinstance(self.error_margin, bool) or not self.error_margin > 0:
            raise SpecError("error_margin", self.error_margin, "must be a positive number")

    def describe(self) -> str:
        if self.headroom is not None:
            return f"peak at most {100 * self.headroom:g} % of the GPU's memory"
        return (
            f"device peak (allocated / (1 - {ALLOCATOR_FRAGMENTATION:g}) + CUDA context + NCCL "
            f"buffers) x {self.error_margin:.3g} at most the GPU's memory"
        )


FLAT_RULE = FitsRule()
"""The default rule: DEFAULT_MEMORY_HEADROOM of the GPU's memory."""


def fits(peak_bytes: Any, capacity_bytes: float, rule: FitsRule, communicators: Any = 0) -> Any:
    """Whether a plan whose allocated peak is `peak_bytes` fits (a bool, or a bool array)."""
    if rule.headroom is not None:
        return peak_bytes <= rule.headroom * capacity_bytes
    return oom_peak_bytes(peak_bytes, communicators) * rule.error_margin <= capacity_bytes
