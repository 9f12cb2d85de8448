"""Optimizers for the reference model, in the core's precision policies.

- fp32 / bf16 (pure): torch's own optimizer on the model's parameters.
- bf16-mixed / fp16-mixed: 16-bit weights and gradients in the model, an fp32 master copy and
  fp32 optimizer state outside it (the ZeRO paper's accounting, 2 + 2 + 12 bytes per parameter
  for Adam, which the core's `bf16-mixed` policy assumes). The update runs one parameter at a
  time, so the fp32 copy of a gradient exists for one tensor at a time, never for the model.
- amp-bf16 / amp-fp16: fp32 weights and torch's own optimizer; the 16-bit matmuls come from
  torch.autocast around the forward and loss (`mixed_precision`, with fp16's GradScaler: the one
  context the trainer and the profiler both enter).

The optimizers come from the one factory table (`model.optimizers.FACTORIES`, one per
trainable row of the core's `OPTIMIZERS`) in their single-tensor (for-loop) implementation: its
temporaries are the size of one parameter, which the core's peak model counts; the multi-tensor
one would allocate temporaries the size of the whole model.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.precision import get_precision
from trainbudget.model.optimizers import build_optimizer


def torch_optimizer(
    name: str, params, lr: float, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The single-tensor torch optimizer for a trainable row of the core's `OPTIMIZERS`, from
    the trainer's one factory table (state sizes and scratch match the core's row)."""
    return build_optimizer(name, params, lr=lr, weight_decay=weight_decay, single_tensor=True)


class MasterWeightOptimizer(torch.optim.Optimizer):
    """16-bit model weights updated through fp32 master copies, one tensor at a time.

    A torch Optimizer (over the masters) so that torch's optimizer hooks -- and memory tools
    such as MemTracker -- see its whole step, the fp32 gradient copies included."""

    def __init__(self, model: nn.Module, name: str, lr: float, weight_decay: float = 0.0):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        super().__init__(self.masters, {"lr": lr})
        self.inner = torch_optimizer(name, self.masters, lr, weight_decay)
        # one set of groups: an LR schedule that writes param_groups reaches the update
        self.param_groups = self.inner.param_groups

    @torch.no_grad()
    def step(self) -> None:
        for p, master in zip(self.params, self.masters, strict=True):
            if p.grad is None:
                continue
            master.grad = p.grad.float()  # the one fp32 gradient alive at a time
            self.inner.step()  # steps only parameters that have a gradient: this one
            master.grad = None
            p.copy_(master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        for m in self.masters:
            m.grad = None

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "masters": [m.detach() for m in self.masters]}

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state["inner"])
        with torch.no_grad():
            for m, saved in zip(self.masters, state["masters"], strict=True):
                m.copy_(saved)


def make_optimizer(
    model: nn.Module, *, precision: str, optimizer: str, lr: float = 3e-4, weight_decay: float = 0.0
):
    """The optimizer the core's (precision, optimizer) pair describes, for `model` whose
    parameters are already in the policy's weight dtype."""
    prec = get_precision(precision)
    if prec.master_bytes:
        return MasterWeightOptimizer(model, optimizer, lr, weight_decay)
    return torch_optimizer(optimizer, model.parameters(), lr, weight_decay)


def weight_dtype(precision: str) -> torch.dtype:
    """The dtype model weights (and activations) take under a precision policy."""
    dtypes = {
        "fp32": torch.float32,
        "bf16-mixed": torch.bfloat16,
        "bf16": torch.bfloat16,
        "fp16-mixed": torch.float16,
        "amp-bf16": torch.float32,  # autocast keeps fp32 weights
        "amp-fp16": torch.float32,
    }
    name = get_precision(precision).name
    if name not in dtypes:  # fp8: its matmuls need Transformer Engine or torchao float8 kernels
        raise SpecError(
            "precision", precision, "estimate-only; the model here runs: " + ", ".join(dtypes)
        )
    return dtypes[name]


def mixed_precision(precision: str, device: torch.device):
    """(autocast context, gradient scaler) for a precision policy: torch.autocast for the
    amp-* policies (fp32 weights, 16-bit matmuls), a GradScaler for fp16 (its small range
    underflows gradients without loss scaling, Micikevicius et al. 2018, arXiv 1710.03740);
    no-ops otherwise."""
    dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)
    autocast = (
        torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    )
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp-fp16")
    return autocast, scaler
