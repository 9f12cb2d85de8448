"""Training frameworks as data: the conventions of each stack that change memory and step time
for the same model and layout (gradient dtypes and buffers, when gradients are reduced, bucket
sizes). One frozen row per framework, each field with its source in `sources`; `GENERIC` is the
default when none is named and reproduces the model's framework-neutral assumptions."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.units import MB


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    grad_reduce_bytes: int | None = None
    """Bytes per element of the data-parallel gradient reduction (reduce-scatter / all-reduce);
    None: the precision's gradient bytes."""
    main_grad_bytes: int | None = None
    """Bytes per parameter of the gradient buffer kept across micro-batches (Megatron's fp32
    `main_grad`); None: the precision's gradient bytes."""
    reduce_every_micro_batch: bool = False
    """Sharded gradients (ZeRO-2/3, FSDP) are reduce-scattered after every micro-batch's
    backward, not once per step; ZeRO 0-1 still reduce once."""
    bucket_bytes: float = 25 * MB
    """Gradient bucket of the overlapped data-parallel reduction."""
    runtime_overhead_bytes: float = 0.0
    """GPU memory the runtime holds beside tensors (CUDA context, NCCL buffers)."""
    description: str = ""
    sources: tuple[str, ...] = ()
    """Where each non-default field comes from (the framework's code or docs, with version)."""

    def __post_init__(self) -> None:
        for field in ("grad_reduce_bytes", "main_grad_bytes"):
            value = getattr(self, field)
            if value is not None and value not in (2, 4):
                raise SpecError(f"{self.name}.{field}", value, "must be 2, 4 or None")
        for field in ("bucket_bytes", "runtime_overhead_bytes"):
            if not getattr(self, field) >= 0:
                raise SpecError(f"{self.name}.{field}", getattr(self, field), "must be >= 0")


GENERIC = Framework(
    name="generic",
    description="framework-neutral: gradients reduced in the precision's gradient dtype once "
    "per step, PyTorch DDP's 25 MB buckets, no runtime overhead",
    sources=("torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25",),
)

FRAMEWORKS = MappingProxyType({f.name: f for f in (GENERIC,)})


def get_framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise unknown_key("framework", name, list(FRAMEWORKS))
    return FRAMEWORKS[name]
