"""Measured FLOPs of one training step of the reference model, counted by
`torch.utils.flop_counter.FlopCounterMode`, attributed per part and normalised to the core's
convention (`trainbudget.core.single.flops`) so that the two can be compared part by part.

What FlopCounterMode counts (torch/utils/flop_counter.py, checked in torch 2.13 by
tests/profile/test_flops.py, which asserts the raw counts so that a torch change is noticed):

- matmuls only (mm, addmm, bmm, baddbmm, the fused attention kernels, convolutions), a
  multiply-add being 2 FLOPs: (M, K) @ (K, N) is 2*M*N*K, the bias of addmm is not counted.
  That is the core's convention exactly.
- attention: every query against every key, T x T per head, whatever `is_causal` says
  (`sdpa_flop`: "NB: We aren't accounting for causal attention here"). On the meta device
  `F.scaled_dot_product_attention` runs its math fallback (two bmm's, full T x T, the causal
  mask applied by masking), and the fused kernels' formulas count T x T too, so the measured
  attention is the core's `causal=False` count; `causal=True` is reached by scaling the
  attention core by the fraction of query-key pairs a causal mask keeps, (T+1)/(2T).
- attention backward: the math fallback's backward is four bmm's, 2 x forward like every other
  matmul; the fused kernels' backward (`sdpa_backward_flop_count`: flash, memory-efficient and
  cuDNN) is counted as five, 2.5 x forward, because "we recompute the scores matrix" Q @ K^T.
  The core counts backward as 2 x forward and puts that recomputed Q @ K^T in hardware FLOPs
  (`recompute_flops(..., flash_attention=True)`), so 1/5 of the fused backward is moved there.
- the CPU's fused kernel (`_scaled_dot_product_flash_attention_for_cpu`, the default for real
  CPU tensors) has no formula and is not counted at all: on the cpu device the math backend is
  forced so that attention is counted.
- checkpointing (`recompute="full"`, non-reentrant `torch.utils.checkpoint`): the blocks'
  forward runs again inside backward and is counted again; the core's `recompute="full"`
  hardware FLOPs add one forward of every layer. With torch's default *early stop* the
  recomputation stops once the last tensor saved for backward is back, so each block's last
  matmul whose output nothing saves (the MLP's down projection) is not run again: measured with
  early stop, the recompute is `layers - mlp_down`, not the core's `layers`.

Per part: the forward pass is attributed from FlopCounterMode's own per-module counts
(`get_flop_counts()`, keyed by module path, e.g. "Transformer.blocks.0.attn.qkv"). Its
backward attribution is not usable per part: its ModuleTracker keeps a module "in backward"
until the gradient of the module's input is complete, so the SwiGLU gate and up projections
(which share their input) and checkpointed blocks are double counted or misattributed (the
Global total stays right). The backward is therefore attributed by the autograd node that runs
each op: the nodes a module's forward created are tagged with its path, and
`torch._C._current_autograd_node()` names the node at every counted op in backward.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.transformer import build_model
from trainbudget.profile.flop_parts import (
    ATTENTION_CORE,
    FUSED_KERNELS,
    SDPA_MODES,
    MeasuredFlops,
    frozen,
    part_of_module,
    parts_from_exclusive,
    parts_from_module_counts,
)
from trainbudget.profile.flops_compare import FlopComparison, comparison_of

_TAG = "trainbudget_module"
_ROOT = "Transformer"  # FlopCounterMode's ModuleTracker names the root module by its class


class _PartTracker:
    """Which module is running (forward, or checkpoint recomputation inside backward), and tags
    on the autograd nodes each module's forward created, for the backward attribution."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.stack: list[str] = []
        self.handles: list[Any] = []
        self.stops: list[set[Any]] = []
        for name, module in model.named_modules():
            fqn = f"{_ROOT}.{name}" if name else _ROOT
            self.handles.append(module.register_forward_pre_hook(self._enter(fqn)))
            self.handles.append(module.register_forward_hook(self._exit(fqn), always_call=True))

    @staticmethod
    def in_backward() -> bool:
        return torch._C._current_graph_task_id() != -1

    def _enter(self, fqn: str):
        def hook(module, args) -> None:
            self.stack.append(fqn)
            self.stops.append({t.grad_fn for t in _tensors(args) if t.grad_fn is not None})

        return hook

    def _exit(self, fqn: str):
        def hook(module, args, output) -> None:
            # always_call: also runs when checkpoint's early stop raises inside the module
            if fqn not in self.stack:
                return
            i = len(self.stack) - 1 - self.stack[::-1].index(fqn)
            del self.stack[i:]
            stops = self.stops[i]
            del self.stops[i:]
            if output is not None and not self.in_backward():
                self._tag(fqn, _tensors(output), stops)

        return hook

    @staticmethod
    def _tag(fqn: str, outputs: list[torch.Tensor], stops: set[Any]) -> None:
        """Tag the nodes between the module's outputs and inputs that no submodule tagged
        (submodules finish first, so the innermost module wins)."""
        todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
        seen: set[Any] = set()
        while todo:
            node = todo.pop()
            if node is None or node in seen or node in stops:
                continue
            seen.add(node)
            node.metadata.setdefault(_TAG, fqn)
            todo.extend(n for n, _ in node.next_functions)

    def where(self) -> tuple[str, str]:
        """(phase, module path) of the op running now."""
        if not self.in_backward():
            return "forward", self.stack[-1] if self.stack else "Global"
        if self.stack:
            return "recompute", self.stack[-1]
        node = torch._C._current_autograd_node()
        return "backward", node.metadata.get(_TAG, "Global") if node is not None else "Global"

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


class _Attribution(TorchDispatchMode):
    """Sits above FlopCounterMode: every op goes through FlopCounterMode, and the FLOPs it adds
    to its Global total are booked to the phase and module running now."""

    def __init__(self, counter: FlopCounterMode, tracker: _PartTracker) -> None:
        super().__init__()
        self.counter, self.tracker = counter, tracker
        self.flops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.attention_ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = self.counter.get_total_flops()
        out = func(*args, **(kwargs or {}))
        added = self.counter.get_total_flops() - before
        if added:
            phase, fqn = self.tracker.where()
            self.flops[phase][fqn] += added
            if part_of_module(fqn) == ATTENTION_CORE:
                self.attention_ops.add(str(func))
        return out


def _kernel(ops: set[str]) -> str:
    """ "flash", "efficient" or "cudnn" if a fused attention op was counted, else "math"."""
    for kernel in FUSED_KERNELS:
        if any(kernel in op for op in ops):
            return kernel
    return "math"


def _flash_sdpa(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    if attn_mask is not None:
        raise ValueError("the flash-attention stand-in takes no attn_mask")
    if enable_gqa and key.shape[1] != query.shape[1]:
        # broadcast the kv heads as the kernel does: older FlopCounterMode formulas (before
        # GQA support) require equal head counts, and the count is over query heads anyway
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    return torch.ops.aten._scaled_dot_product_flash_attention(
        query, key, value, dropout_p, is_causal, False, scale=scale
    )[0]


class _FlashOnMeta(TorchFunctionMode):
    """Routes `F.scaled_dot_product_attention` to `aten._scaled_dot_product_flash_attention`,
    the op a GPU runs for bf16/fp16 (meta has its shape function, and FlopCounterMode its
    formula), so the fused kernel's counting can be checked without a GPU: on meta, SDPA
    otherwise always takes the math fallback."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            return _flash_sdpa(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def _flash_on_meta(model: torch.nn.Module) -> list[Any]:
    """Enter `_FlashOnMeta` around every call of an attention module, checkpoint's
    recomputation inside backward included (a mode entered around the whole step does not
    reach it). Returns the hook handles."""
    handles = []
    for name, module in model.named_modules():
        if part_of_module(f"{_ROOT}.{name}") != ATTENTION_CORE:
            continue
        modes: list[_FlashOnMeta] = []

        def enter(module, args, modes=modes) -> None:
            modes.append(_FlashOnMeta())
            modes[-1].__enter__()

        def leave(module, args, output, modes=modes) -> None:
            modes.pop().__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave, always_call=True))
    return handles


@contextlib.contextmanager
def _sdpa_context(sdpa: str, model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    if sdpa not in SDPA_MODES:
        raise ValueError(f"sdpa = {sdpa!r}: must be one of {', '.join(SDPA_MODES)}")
    if sdpa == "flash":
        if device.type == "meta":
            handles = _flash_on_meta(model)
            try:
                yield
            finally:
                for handle in handles:
                    handle.remove()
            return
        if device.type != "cuda":
            raise ValueError(
                f"sdpa = 'flash' on {device.type}: FlopCounterMode does not count the CPU's "
                "fused attention kernel; use 'math', or the meta device"
            )
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            yield
        return
    if sdpa == "math" or device.type == "cpu":
        # the CPU's fused kernel is not counted by FlopCounterMode: force the math backend
        with sdpa_kernel(SDPBackend.MATH):
            yield
        return
    yield


def _module_totals(counts: Mapping[str, Mapping[Any, int]]) -> dict[str, int]:
    return {fqn: sum(ops.values()) for fqn, ops in counts.items()}


def measure_flops(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    recompute: str = "none",
    device: str = "meta",
    dtype: torch.dtype | None = None,
    sdpa: str = "auto",
    checkpoint_early_stop: bool = True,
    seed: int = 0,
) -> MeasuredFlops:
    """Count one training step of the reference model under FlopCounterMode.

    device "meta" (the default) runs no kernel and allocates nothing, so any size is fast; MoE
    models need real routing (`nonzero` has no meta shape) and so "cpu" (tiny sizes) or "cuda".
    sdpa: "auto" leaves the choice to the dispatcher (math on meta, fused on CUDA, math forced
    on cpu), "math" forces the math fallback, "flash" the flash kernel (on meta: a stand-in
    calling the flash op). checkpoint_early_stop: torch's default True; False re-runs each
    checkpointed block's whole forward, the core's `recompute="full"` convention.
    """
    dev = torch.device(device)
    _check_inputs(spec, dev, sdpa)
    model = build_model(spec, device=dev, recompute=recompute, dtype=dtype, seed=seed)
    model.checkpoint_early_stop = checkpoint_early_stop
    model.train()
    gen = torch.Generator().manual_seed(seed)
    inputs, targets = (
        torch.randint(spec.vocab_size, (micro_batch, seq_len), generator=gen).to(dev)
        for _ in range(2)
    )

    tracker = _PartTracker(model)
    counter = FlopCounterMode(display=False)
    try:
        with (
            _sdpa_context(sdpa, model, dev),
            set_checkpoint_early_stop(checkpoint_early_stop),
            counter,
            _Attribution(counter, tracker) as attribution,
        ):
            _, loss = model(inputs, targets)
            forward = counter.get_total_flops()
            forward_modules = _module_totals(counter.get_flop_counts())
            loss.backward()
            total = counter.get_total_flops()
            all_modules = _module_totals(counter.get_flop_counts())
    finally:
        tracker.remove()

    forward_parts = parts_from_module_counts(forward_modules)
    backward_parts, recompute_parts = _checked_attribution(
        attribution, forward_parts, forward=forward, total=total
    )
    after = {fqn: flops - forward_modules.get(fqn, 0) for fqn, flops in all_modules.items()}
    return MeasuredFlops(
        model=spec.name,
        micro_batch=micro_batch,
        seq_len=seq_len,
        recompute=recompute,
        device=dev.type,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        sdpa_kernel=_kernel(attribution.attention_ops),
        checkpoint_early_stop=checkpoint_early_stop,
        forward=forward,
        backward=total - forward,
        forward_parts=frozen(forward_parts),
        backward_parts=frozen(backward_parts),
        recompute_parts=frozen(recompute_parts),
        backward_parts_by_module=frozen(parts_from_module_counts(after)),
    )


def _check_inputs(spec: ModelSpec, dev: torch.device, sdpa: str) -> None:
    if sdpa not in SDPA_MODES:
        raise ValueError(f"sdpa = {sdpa!r}: must be one of {', '.join(SDPA_MODES)}")
    if spec.is_moe and dev.type == "meta":
        raise ValueError(
            f"{spec.name}: MoE routing needs real values (torch.nonzero has no meta shape); "
            "measure it on device='cpu' at a small size"
        )


def _checked_attribution(
    attribution, forward_parts: dict, *, forward: int, total: int
) -> tuple[dict, dict]:
    """(backward parts, recompute parts) from the node-tagging attribution, after checking it
    against FlopCounterMode's module counts: the two attributions of the forward pass agree,
    and backward and recomputation add up to the total after the forward."""
    ours = parts_from_exclusive(attribution.flops["forward"])
    if ours != forward_parts or sum(ours.values()) != forward:
        raise RuntimeError(f"forward attribution differs: {ours} vs {forward_parts}")
    backward_parts = parts_from_exclusive(attribution.flops["backward"])
    recompute_parts = parts_from_exclusive(attribution.flops["recompute"])
    if sum(backward_parts.values()) + sum(recompute_parts.values()) != total - forward:
        raise RuntimeError("backward attribution does not add up to FlopCounterMode's total")
    return backward_parts, recompute_parts


def compare_flops(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    recompute: str = "none",
    causal: bool = False,
    device: str = "meta",
    dtype: torch.dtype | None = None,
    sdpa: str = "auto",
    checkpoint_early_stop: bool = False,
) -> FlopComparison:
    """Measure one step (`measure_flops`) and compare it with the core's prediction
    (`flops_compare.comparison_of`: normalised, per part and in total).

    checkpoint_early_stop defaults to False here: the core's `recompute="full"` re-runs every
    layer's forward, which torch does only without early stop (with it, the MLP's last matmul
    is not recomputed, see the module docstring)."""
    measured = measure_flops(
        spec,
        micro_batch=micro_batch,
        seq_len=seq_len,
        recompute=recompute,
        device=device,
        dtype=dtype,
        sdpa=sdpa,
        checkpoint_early_stop=checkpoint_early_stop,
    )
    return comparison_of(measured, spec, causal=causal)
