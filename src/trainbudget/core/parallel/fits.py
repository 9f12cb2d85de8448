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

`fits` decides, by default, on what must fit for the step not to fail (`oom_peak_bytes`): the
allocated peak plus the memory outside the allocator, times the model's own measured memory
error on similar runs (`FitsRule.error_margin`), at most the memory the device gives the process
(`Hardware.usable_memory_bytes`: CUDA's total, not the datasheet's decimal GB). With a flat
headroom (`--memory-headroom`), the allocated peak is at most that fraction of it. Every
function takes plain numbers or numpy arrays (the planner's grid).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
from trainbudget.core.units import format_bytes

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


MARGIN_PERCENTILE = 50.0
"""Which percentile of the model's measured / predicted peak on similar runs is the device
rule's margin: the median, the central estimate of the correction. A fits verdict asks whether
the best estimate of the true peak is under the device total; a higher percentile would answer
"fits even if the model is as wrong as on its worst X % of runs", and completed runs alone (the
published set has no runs that went out of memory) cannot say which X is right, so choosing it
by how many of them pass would tune the rule to the set. Stated before counting."""


def credited_margin(ratio_percentile: float) -> float:
    """The margin from the MARGIN_PERCENTILE of measured / predicted peak, never below 1: where
    the model over-predicts a framework's published rows (a median under 1), crediting that
    would call a plan fitting whose own predicted device peak exceeds the device total. A
    verdict stays on the cautious side of the model's own figure; above 1 the correction is
    taken. (On validate's runs this costs no completed run its "fits".)"""
    return max(1.0, ratio_percentile)


MARGINS_FILE = os.path.join(os.path.dirname(__file__), "fits_margins.json")
"""The margin table by framework row (scripts/refresh_fits_margins.py writes it from the
published runs' memory rows; tests/core/parallel/test_fits_margins.py checks it is current), so
that a plan's verdict costs no prediction of the published runs."""


@dataclass(frozen=True, kw_only=True)
class FitsRule:
    """How `fits` decides. With `headroom` None (the default), the device rule: the allocated
    peak plus what lives outside the allocator, times `error_margin`, is at most the memory the
    device gives the process. With `headroom` set (--memory-headroom), the flat rule: the
    allocated peak is at most that fraction of it."""

    headroom: float | None = DEFAULT_MEMORY_HEADROOM
    error_margin: float = 1.0
    """measured / predicted peak (each in its source's measure) on published runs like the
    plan: the MARGIN_PERCENTILE of the model's own error, 1.0 where none is known."""

    def __post_init__(self) -> None:
        h = self.headroom
        if h is not None and (isinstance(h, bool) or not 0 < h <= 1):
            raise SpecError("memory_headroom", h, "must be a fraction in (0, 1]")
        if isinstance(self.error_margin, bool) or not self.error_margin > 0:
            raise SpecError("error_margin", self.error_margin, "must be a positive number")

    def describe(self) -> str:
        if self.headroom is not None:
            return f"allocated peak at most {100 * self.headroom:g} % of the device's memory"
        return (
            f"(allocated peak + CUDA context + NCCL buffers) x {self.error_margin:.3g} (the "
            "model's median memory error on similar published runs) at most the device's memory"
        )


FLAT_RULE = FitsRule(headroom=0.9)
"""The flat rule at 90 %, the default before the device rule: `validate` prints its count."""


@cache
def _margins() -> dict:
    with open(MARGINS_FILE, encoding="utf-8") as f:
        return json.load(f)


def framework_margin(framework_row: str) -> float:
    """The device rule's margin for plans of `framework_row`: the MARGIN_PERCENTILE of its
    published memory rows, or of every memory row where it has too few."""
    table = _margins()
    return table["frameworks"].get(framework_row, table["all"])["margin"]


def rule_for(headroom: float | None, framework_row: str) -> FitsRule:
    """The rule every verdict uses: the flat one when --memory-headroom is given, else the
    device rule with `framework_row`'s margin."""
    if headroom is not None:
        return FitsRule(headroom=headroom)
    return FitsRule(headroom=None, error_margin=framework_margin(framework_row))


def allocated_limit_bytes(capacity_bytes: float, rule: FitsRule, communicators: Any = 0) -> Any:
    """The largest allocated peak (the memory model's figure) that fits in `capacity_bytes`,
    the device total (Hardware.usable_memory_bytes): the one inequality of both rules, solved
    for the peak. The device rule: (peak + outside) x margin <= capacity."""
    if rule.headroom is not None:
        return rule.headroom * capacity_bytes
    return capacity_bytes / rule.error_margin - outside_allocator_bytes(communicators)


def fits(peak_bytes: Any, capacity_bytes: float, rule: FitsRule, communicators: Any = 0) -> Any:
    """Whether a plan whose allocated peak is `peak_bytes` fits (a bool, or a bool array)."""
    return peak_bytes <= allocated_limit_bytes(capacity_bytes, rule, communicators)


def verdict_text(fits_now: bool, capacity_bytes: float, rule: FitsRule, communicators: int) -> str:
    """The verdict with what the rule compared, for every memory line: the allocated-peak limit
    and how it follows from the device's memory (the datasheet's "80 GB" is not what CUDA gives
    the process: Hardware.usable_memory_bytes)."""
    verdict = "fits" if fits_now else "does NOT fit"
    limit = format_bytes(allocated_limit_bytes(capacity_bytes, rule, communicators))
    device = f"the {format_bytes(capacity_bytes)} the device gives the process"
    if rule.headroom is not None:
        share = f"{100 * rule.headroom:g} %"
        return f"{verdict}: limit {limit} = {share} of {device}, --memory-headroom"
    outside = format_bytes(outside_allocator_bytes(communicators))
    return (
        f"{verdict}: limit {limit}: (peak + {outside} CUDA context and NCCL buffers) x "
        f"{rule.error_margin:.3g} (median measured / predicted on similar published runs) "
        f"<= {device}"
    )
