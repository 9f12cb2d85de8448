"""The keys validation groups published runs by -- GPU generation and layout family -- apart
from validation itself, so that a plan's error range (`uncertainty.plan_error_range`, which
every `estimate` shows) reads them without importing the step-time, memory and FLOP models
that validation predicts the published runs with. `validation` re-exports both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainbudget.core.errors import unknown_key

if TYPE_CHECKING:
    from typing import Protocol

    class _Layout(Protocol):
        """A plan or a published run's layout: the degrees a family is named by."""

        tp: int
        pp: int
        cp: int
        zero: int


GPU_GENERATION = {
    "a100-40gb": "A100",
    "a100-80gb": "A100",
    "h100-sxm": "H100",
    "h100-pcie": "H100",
    "h800": "H100",
    "h200": "H200",
    "b200": "B200",
    "mi300x": "MI300X",
}
"""Hardware catalog key -> the GPU generation the breakdown groups by (exact keys)."""


def gpu_generation(gpu: str) -> str:
    if gpu not in GPU_GENERATION:
        raise unknown_key("gpu generation of", gpu, list(GPU_GENERATION))
    return GPU_GENERATION[gpu]


def layout_family(lay: _Layout) -> str:
    """'dp only', or the model-splitting axes in use joined by '+' ('tp+pp+cp'), with
    'zero3/fsdp' when parameters are sharded (ZeRO-3 / FSDP full or hybrid shard)."""
    parts = [axis for axis in ("tp", "pp", "cp") if getattr(lay, axis) > 1]
    if lay.zero == 3:
        parts.append("zero3/fsdp")
    return "+".join(parts) or "dp only"
