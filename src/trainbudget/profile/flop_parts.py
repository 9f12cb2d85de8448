"""The parts a measured FLOP count is attributed to, the core's forward parts (`ForwardFlops`):
which module path belongs to which part, per-part totals from per-module counts, and the raw
counts of one measured step (`MeasuredFlops`). Pure: no torch (`profile.flops` measures)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

PARTS = (
    "qkv",
    "scores",
    "attn_values",
    "attn_proj",
    "mlp_up",
    "mlp_gate",
    "mlp_down",
    "router",
    "logits",
)
"""The core's forward parts (`ForwardFlops.as_dict()`), in its order."""

OTHER = "other"
"""FLOPs outside every part (none for the reference model: only its matmuls count)."""

ATTENTION_CORE = "attention"
"""Ops inside the attention module but outside qkv and proj: Q @ K^T and softmax @ V."""

SDPA_MODES = ("auto", "math", "flash")
FUSED_KERNELS = ("flash", "efficient", "cudnn")
"""Fused attention kernels whose backward FlopCounterMode counts as 5 T x T matmuls."""

_PART_PATTERNS = (
    (re.compile(r"\.attn\.qkv$"), "qkv"),
    (re.compile(r"\.attn\.proj$"), "attn_proj"),
    (re.compile(r"\.attn$"), ATTENTION_CORE),
    (re.compile(r"\.mlp\.router$"), "router"),
    # dense MLP (mlp.up), routed experts (mlp.experts.3.up), shared experts (mlp.shared.0.up)
    (re.compile(r"\.mlp(\.(experts|shared)\.\d+)?\.up$"), "mlp_up"),
    (re.compile(r"\.mlp(\.(experts|shared)\.\d+)?\.gate$"), "mlp_gate"),
    (re.compile(r"\.mlp(\.(experts|shared)\.\d+)?\.down$"), "mlp_down"),
    (re.compile(r"^Transformer\.head$"), "logits"),
)


def part_of_module(fqn: str) -> str:
    """The part a module path belongs to: one of PARTS, ATTENTION_CORE (split later into
    scores and attn_values), or OTHER."""
    for pattern, part in _PART_PATTERNS:
        if pattern.search(fqn):
            return part
    return OTHER


def _empty_parts() -> dict[str, int]:
    return dict.fromkeys((*PARTS, OTHER), 0)


def _split_attention(parts: dict[str, int], core: int) -> None:
    """Q @ K^T and softmax @ V have the same size (T x T x d_head per head, d_v = d_head), so
    the attention core is split evenly between scores and attn_values."""
    half, odd = divmod(core, 2)
    parts["scores"] += half + odd
    parts["attn_values"] += half


def parts_from_module_counts(module_flops: Mapping[str, int]) -> dict[str, int]:
    """Per-part FLOPs from inclusive per-module totals (FlopCounterMode's `get_flop_counts()`
    summed over ops, "Global" holding everything): each module keeps what the nearest modules
    below it did not count (a ModuleList is never called, so blocks.0's parent is the root),
    then is mapped by `part_of_module`."""
    own = dict(module_flops)
    for fqn, flops in module_flops.items():
        if fqn == "Global":
            continue
        parent, prefix = "Global", fqn
        while "." in prefix:
            prefix = prefix.rsplit(".", 1)[0]
            if prefix in module_flops:
                parent = prefix
                break
        if parent in own:
            own[parent] -= flops
    return parts_from_exclusive(own)


def parts_from_exclusive(module_flops: Mapping[str, int]) -> dict[str, int]:
    """Per-part FLOPs from exclusive per-module counts (the innermost module of each op)."""
    parts = _empty_parts()
    core = 0
    for fqn, flops in module_flops.items():
        part = part_of_module(fqn)
        if part == ATTENTION_CORE:
            core += flops
        else:
            parts[part] += flops
    _split_attention(parts, core)
    return parts


def frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True, kw_only=True)
class MeasuredFlops:
    """Raw FlopCounterMode counts of one training step (forward, loss, backward) of
    `micro_batch` sequences of `seq_len` tokens."""

    model: str
    micro_batch: int
    seq_len: int
    recompute: str
    device: str
    dtype: str
    sdpa_kernel: str
    """Attention kernel that ran: "math" (bmm's) or a fused one ("flash", "efficient", "cudnn")."""
    checkpoint_early_stop: bool
    forward: int
    """Counted during forward and loss."""
    backward: int
    """Counted during `loss.backward()`, checkpoint recomputation included."""
    forward_parts: Mapping[str, int]
    """From FlopCounterMode's per-module counts after the forward pass."""
    backward_parts: Mapping[str, int]
    """Backward ops by the autograd node that ran them (recomputation excluded)."""
    recompute_parts: Mapping[str, int]
    """Forward ops re-run inside backward by torch.utils.checkpoint, by module."""
    backward_parts_by_module: Mapping[str, int]
    """FlopCounterMode's own per-module attribution of everything after the forward pass, kept
    to show why it is not used: it double counts modules whose inputs are shared."""

    @property
    def total(self) -> int:
        return self.forward + self.backward

    @property
    def recompute_total(self) -> int:
        return sum(self.recompute_parts.values())

    @property
    def fused_attention(self) -> bool:
        return self.sdpa_kernel in FUSED_KERNELS
