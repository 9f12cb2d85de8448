"""A deep linear model (the lecture's "Cruncher", seed 001): bias-free layers of width D and a
final D -> 1 layer. Small enough to check every count by hand, and against PyTorch."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.single.flops import matmul_flops
from trainbudget.core.spec.precision import get_optimizer, get_precision


@dataclass(frozen=True, kw_only=True)
class LinearChainFlops:
    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def linear_chain_flops(batch: int, dims: list[int], *, input_grad: bool = True) -> LinearChainFlops:
    """Forward and backward FLOPs of linear layers dims[0] -> dims[1] -> ... on `batch` rows.

    Each matmul's backward is a weight gradient (2*B*d_in*d_out) and an input gradient of the
    same size (seed 001, gradients_flops); the first layer's input gradient is skipped when
    input_grad=False. With it, total = 6 x batch x params (S-linear-fwd-bwd).
    """
    if batch <= 0:
        raise SpecError("batch", batch, "must be a positive integer")
    if len(dims) < 2 or any(x <= 0 for x in dims):
        raise SpecError("dims", dims, "need at least two positive widths")
    forward = backward = 0
    for i, (d_in, d_out) in enumerate(itertools.pairwise(dims)):
        f = matmul_flops(batch, d_in, d_out)
        forward += f
        backward += f if (i == 0 and not input_grad) else 2 * f
    return LinearChainFlops(forward=forward, backward=backward)


@dataclass(frozen=True, kw_only=True)
class LinearChainMemory:
    """Element counts of the lecture's memory accounting, and bytes at one element size."""

    n_params: int
    n_activations: int
    n_gradients: int
    n_optimizer_states: int
    bytes_per_element: int

    @property
    def total_bytes(self) -> int:
        elements = self.n_params + self.n_activations + self.n_gradients + self.n_optimizer_states
        return self.bytes_per_element * elements


def cruncher_memory(
    *, d: int, n_layers: int, batch: int, optimizer: str = "adagrad", precision: str = "fp32"
) -> LinearChainMemory:
    """params = D*D*layers + D; activations = B*D*layers; grads = params; state = k*params
    (seed 001, optimizer memory: D=4, 2 layers, B=2, AdaGrad, fp32 -> 496 bytes)."""
    for name, v in (("d", d), ("n_layers", n_layers), ("batch", batch)):
        if v <= 0:
            raise SpecError(name, v, "must be a positive integer")
    prec, opt = get_precision(precision), get_optimizer(optimizer)
    if prec.master_bytes:
        raise SpecError(
            "precision",
            precision,
            "the element-count accounting needs one element size: fp32 or bf16",
        )
    if opt.factored or opt.state_bytes_override:
        raise SpecError(
            "optimizer",
            optimizer,
            "the element-count accounting needs full-size states at the parameter's size "
            "(sgd, momentum, adagrad, rmsprop, adam, adamw)",
        )
    n_params = d * d * n_layers + d
    return LinearChainMemory(
        n_params=n_params,
        n_activations=batch * d * n_layers,
        n_gradients=n_params,
        n_optimizer_states=opt.n_states * n_params,
        bytes_per_element=prec.weight_bytes,
    )
