"""Which device a benchmark runs on, and which catalog row (if any) holds its datasheet peaks.

A GPU is matched to `trainbudget.core.spec.hardware` by its EXACT product name as the driver reports
it (`torch.cuda.get_device_properties(i).name`). Names not in the table get no catalog row:
an "H100 NVL" or an "A100 80GB PCIe" has other clocks and bandwidth than the SXM parts, so a
substring match would quietly compare against the wrong peak.

torch is imported inside the functions that need it, so the name table loads without it.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.hardware import HARDWARE

# driver-reported product name -> catalog key; one row per name seen on real machines
GPU_CATALOG_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "NVIDIA H100 80GB HBM3": "h100-sxm",
        "NVIDIA H100 PCIe": "h100-pcie",
        "NVIDIA H200": "h200",
        "NVIDIA A100-SXM4-80GB": "a100-80gb",
        "NVIDIA A100-SXM4-40GB": "a100-40gb",
        "NVIDIA B200": "b200",
        "NVIDIA GeForce RTX 4090": "rtx-4090",
        "AMD Instinct MI300X": "mi300x",
    }
)
if not set(GPU_CATALOG_KEYS.values()) <= set(HARDWARE):  # pragma: no cover - table guard
    raise RuntimeError("GPU_CATALOG_KEYS names a key missing from the hardware catalog")

FAKE_DEVICES = ("fake-cpu", "fake-cuda")
PROFILE_DEVICES = (*FAKE_DEVICES, "cpu", "cuda")
"""Where `profile` runs a step: fake tensors (no data, no compute) or a real device."""


def check_device_name(device: str) -> None:
    """A device name `profile` knows, checked without torch (so a typo fails at once)."""
    if device not in PROFILE_DEVICES:
        raise SpecError("device", device, "must be one of " + ", ".join(PROFILE_DEVICES))


@dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    kind: str
    """"cpu" or "cuda" (ROCm GPUs report through torch.cuda too)."""
    name: str
    """The product name the driver (GPU) or the OS (CPU) reports."""
    catalog_key: str | None
    """The `trainbudget.core.spec.hardware` row with this device's peaks; None when none is
    known."""
    total_memory_bytes: int | None
    """Device memory (GPU) or physical RAM (CPU); None where the OS does not say."""

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "catalog_key": self.catalog_key,
            "total_memory_bytes": self.total_memory_bytes,
        }


def catalog_key_for(gpu_name: str) -> str | None:
    """The catalog key of a driver-reported GPU name, by exact lookup; None if unknown."""
    return GPU_CATALOG_KEYS.get(gpu_name.strip())


def cpu_name() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux, else platform.processor(), else the arch."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX, or the OS will not say
        return None


def resolve_device(text: str) -> str:
    """'auto' -> 'cuda' when a GPU is usable, else 'cpu'; 'cpu'; 'cuda' or 'cuda:N' only when
    that GPU exists. Anything else is a SpecError naming the field `device`."""
    import torch

    choice = text.strip().lower()
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return "cpu"
    kind, _, index = choice.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise SpecError("device", text, "must be one of cpu, cuda, cuda:N, auto")
    if not torch.cuda.is_available():
        raise SpecError("device", text, f"CUDA is not available (torch {torch.__version__})")
    if index and int(index) >= torch.cuda.device_count():
        raise SpecError("device", text, f"only {torch.cuda.device_count()} CUDA device(s)")
    return choice


def identify_device(device: object) -> DeviceInfo:
    """Name, catalog row and memory of `device` (a torch.device or a string such as 'cuda:0')."""
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return DeviceInfo(
            kind="cpu",
            name=cpu_name(),
            catalog_key=None,
            total_memory_bytes=_physical_memory_bytes(),
        )
    if dev.type != "cuda":
        raise SpecError("device", str(device), "must be a cpu or cuda device")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        kind="cuda",
        name=props.name,
        catalog_key=catalog_key_for(props.name),
        total_memory_bytes=int(props.total_memory),
    )
