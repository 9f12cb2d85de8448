"""SGD, AdaGrad and Lion written out, and the torch factory of every trainable optimizer of the
core's table (`FACTORIES`, built through `build_optimizer`): the one place optimizers are
constructed, for the training loop and for the reference model (`model.optim`).

`SGD` and `AdaGrad` follow the seed lecture's (seed 001): a `torch.optim.Optimizer` whose
`step` walks the parameters and keeps per-parameter state in `self.state[p]`. They add what
torch's own versions have where the algorithms coincide -- weight decay, momentum and Nesterov
momentum for SGD; eps, lr_decay and an initial accumulator for AdaGrad -- and do the same
floating-point operations in the same order as torch's single-tensor (for-loop)
implementation, so their parameters equal `torch.optim.SGD` / `torch.optim.Adagrad`'s.

State per parameter (what the core's `get_optimizer(name).n_states` counts):
- SGD without momentum ("sgd"): none.
- SGD with momentum ("momentum"): `momentum_buffer`, one tensor of the parameter's shape/dtype.
- AdaGrad ("adagrad"): `sum`, the running sum of squared gradients (Duchi et al. 2011), one
  tensor of the parameter's shape and dtype; `step` is a Python int, not a tensor.
State is created at a parameter's first step with a gradient (as torch's SGD does).

Memory: updates are in place, one parameter at a time. The only temporaries are of one
parameter's size: the decayed gradient `g + weight_decay * p` (when weight_decay != 0), the
Nesterov direction, AdaGrad's `sqrt(sum) + eps`. Never a model-sized temporary. Gradients are
read, never modified.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.precision import get_trainable_optimizer

__all__ = ["FACTORIES", "SGD", "AdaGrad", "Lion", "build_optimizer"]


def _check_non_negative(field: str, value: float) -> None:
    if not value >= 0:  # also refuses NaN
        raise SpecError(field, value, "must be >= 0")


def _grad_of(p: torch.Tensor, name: str) -> torch.Tensor:
    grad = p.grad
    if grad.is_sparse:
        raise RuntimeError(f"{name} does not support sparse gradients")
    return grad


class SGD(torch.optim.Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and L2 weight decay.

    With g the gradient, per step (torch.optim.SGD's rule with dampening = 0):
        g = g + weight_decay * p                     (if weight_decay != 0)
        b = g at the first step, else momentum * b + g  (if momentum != 0)
        d = g + momentum * b if nesterov else b        (if momentum != 0, else d = g)
        p = p - lr * d
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        _check_non_negative("lr", lr)
        _check_non_negative("momentum", momentum)
        _check_non_negative("weight_decay", weight_decay)
        if nesterov and momentum == 0:
            raise SpecError("nesterov", nesterov, "needs momentum > 0")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            momentum = group["momentum"]
            weight_decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = _grad_of(p, "SGD")
                if weight_decay != 0:
                    d_p = d_p.add(p, alpha=weight_decay)  # one parameter-sized temporary
                if momentum != 0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        # the first buffer is the (decayed) gradient itself; reuse the
                        # temporary when there is one, else copy the gradient
                        buf = d_p if weight_decay != 0 else d_p.detach().clone()
                        state["momentum_buffer"] = buf
                    else:
                        buf.mul_(momentum).add_(d_p)
                    d_p = d_p.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(d_p, alpha=-lr)
        return loss


class AdaGrad(torch.optim.Optimizer):
    """AdaGrad (Duchi, Hazan & Singer 2011): each coordinate's step is scaled by the inverse
    root of the sum of its squared gradients so far.

    Per step t = 1, 2, ... (torch.optim.Adagrad's rule for dense gradients):
        g   = g + weight_decay * p                    (if weight_decay != 0)
        clr = lr / (1 + (t - 1) * lr_decay)
        sum = sum + g * g                             (sum starts at initial_accumulator_value)
        p   = p - clr * g / (sqrt(sum) + eps)
    The seed's version differs only in where eps goes (sqrt(sum + 1e-5)); this one adds eps
    outside the root, as torch does. Complex parameters are treated as pairs of reals.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        lr_decay: float = 0.0,
    ) -> None:
        _check_non_negative("lr", lr)
        _check_non_negative("eps", eps)
        _check_non_negative("weight_decay", weight_decay)
        _check_non_negative("initial_accumulator_value", initial_accumulator_value)
        _check_non_negative("lr_decay", lr_decay)
        defaults = {
            "lr": lr,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "lr_decay": lr_decay,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            weight_decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = _grad_of(p, "AdaGrad")
                state = self.state[p]
                if "sum" not in state:
                    state["step"] = 0
                    state["sum"] = torch.full_like(
                        p,
                        group["initial_accumulator_value"],
                        memory_format=torch.preserve_format,
                    )
                state["step"] += 1
                state_sum = state["sum"]
                if weight_decay != 0:
                    grad = grad.add(p, alpha=weight_decay)  # one parameter-sized temporary
                clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
                param = p
                if torch.is_complex(p):
                    param = torch.view_as_real(p)
                    grad = torch.view_as_real(grad)
                    state_sum = torch.view_as_real(state_sum)
                state_sum.addcmul_(grad, grad, value=1)
                std = state_sum.sqrt().add_(group["eps"])  # one parameter-sized temporary
                param.addcdiv_(grad, std, value=-clr)
        return loss


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", arXiv
    2302.06675, Algorithm 2): the sign of an interpolated momentum, so every coordinate moves
    by exactly lr (plus the decay). Per step, with g the gradient and m the one state tensor
    (zero at first):
        c = beta1 * m + (1 - beta1) * g
        p = p - lr * (sign(c) + weight_decay * p)      (decoupled weight decay)
        m = beta2 * m + (1 - beta2) * g
    The paper's defaults: betas (0.9, 0.99); its lr is 3-10x smaller than AdamW's.
    Memory: one temporary of the parameter's size (c, signed in place); the rest in place.
    No torch release has Lion: this follows the paper's Algorithm 2, tested against it.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        _check_non_negative("lr", lr)
        _check_non_negative("weight_decay", weight_decay)
        for i, beta in enumerate(betas):
            if not 0 <= beta < 1:
                raise SpecError(f"betas[{i}]", beta, "must be in [0, 1)")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, weight_decay = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = _grad_of(p, "Lion")
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                p.mul_(1 - lr * weight_decay)
                # sign(c), the one parameter-sized temporary: not kept in a local, so it is
                # freed before the next parameter's is allocated
                p.add_(m.mul(beta1).add_(grad, alpha=1 - beta1).sign_(), alpha=-lr)
                m.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What `build_optimizer` passes every factory; each takes the fields its optimizer has."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    """Adam/AdamW only."""
    momentum: float
    """"momentum" only."""
    fused: bool | None
    """Adam/AdamW only; see `build_optimizer`."""
    single_tensor: bool
    """The for-loop update the core's peak-memory model counts (temporaries the size of one
    parameter), for torch's own optimizers; SGD and AdaGrad above are always for-loop."""


def _torch_implementation(params: list, s: Settings, *, has_fused: bool) -> dict:
    """torch's implementation keywords: for-loop, fused kernel or multi-tensor (foreach)."""
    if s.single_tensor:
        return {"foreach": False}
    fused = s.fused
    if fused is None:
        fused = has_fused and all(_fusable(p) for p in _all_tensors(params))
    return {"fused": True} if fused else {"foreach": True}


def _fusable(p: torch.Tensor) -> bool:
    """A floating CUDA or CPU parameter (FSDP2's DTensor shards included). On a CPU, torch's
    fused AdamW steps a 10.8M-parameter model ~4x faster than its for-loop and ~5x faster
    than its multi-tensor implementation (one thread)."""
    return p.is_floating_point() and p.device.type in ("cuda", "cpu")


def _sgd(params: list, s: Settings) -> torch.optim.Optimizer:
    return SGD(params, lr=s.lr, weight_decay=s.weight_decay)


def _momentum(params: list, s: Settings) -> torch.optim.Optimizer:
    return SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)


def _adagrad(params: list, s: Settings) -> torch.optim.Optimizer:
    return AdaGrad(params, lr=s.lr, weight_decay=s.weight_decay)


def _lion(params: list, s: Settings) -> torch.optim.Optimizer:
    return Lion(params, lr=s.lr, weight_decay=s.weight_decay)  # the paper's betas


def _rmsprop(params: list, s: Settings) -> torch.optim.Optimizer:
    kind = _torch_implementation(params, s, has_fused=False)
    return torch.optim.RMSprop(params, lr=s.lr, weight_decay=s.weight_decay, **kind)


def _adam(params: list, s: Settings) -> torch.optim.Optimizer:
    kind = _torch_implementation(params, s, has_fused=get_trainable_optimizer("adam").fused_kernel)
    return torch.optim.Adam(params, lr=s.lr, betas=s.betas, weight_decay=s.weight_decay, **kind)


def _adamw(params: list, s: Settings) -> torch.optim.Optimizer:
    kind = _torch_implementation(params, s, has_fused=get_trainable_optimizer("adamw").fused_kernel)
    return torch.optim.AdamW(params, lr=s.lr, betas=s.betas, weight_decay=s.weight_decay, **kind)


FACTORIES: dict[str, Callable[[list, Settings], torch.optim.Optimizer]] = {
    "sgd": _sgd,
    "momentum": _momentum,
    "adagrad": _adagrad,
    "rmsprop": _rmsprop,
    "adam": _adam,
    "adamw": _adamw,
    "lion": _lion,
}
"""One torch factory per trainable row of the core's `OPTIMIZERS`, keyed by its name (a test
holds the two to the same names). Its state must be the row's `state_tensors`."""


def _all_tensors(params: list) -> list[torch.Tensor]:
    tensors: list[torch.Tensor] = []
    for item in params:
        if isinstance(item, dict):
            group = item["params"]
            tensors.extend([group] if isinstance(group, torch.Tensor) else group)
        else:
            tensors.append(item)
    return tensors


def build_optimizer(
    name: str,
    params: Iterable[torch.Tensor] | Iterable[dict],
    *,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    fused: bool | None = None,
    momentum: float = 0.9,
    single_tensor: bool = False,
) -> torch.optim.Optimizer:
    """The torch optimizer for a trainable row of the core's `OPTIMIZERS` (`FACTORIES[name]`).

    - "sgd": `SGD(lr, weight_decay)`, no state.
    - "momentum": `SGD(lr, momentum=momentum, weight_decay)` (momentum 0.9 by default), one
      state tensor per parameter.
    - "adagrad": `AdaGrad(lr, weight_decay)`, one state tensor per parameter.
    - "rmsprop": `torch.optim.RMSprop(lr, weight_decay)`, one state tensor per parameter.
    - "adam" / "adamw": `torch.optim.Adam` / `torch.optim.AdamW(lr, betas, weight_decay)`
      (Adam's weight decay is L2 added to the gradient, AdamW's is decoupled), two state
      tensors per parameter plus a scalar `step`.
    `betas` and `fused` apply to Adam/AdamW only; `momentum` to "momentum" only.

    Implementation of torch's own optimizers (RMSprop, Adam, AdamW):
    - single_tensor=True: the for-loop one (`foreach=False`), whose temporaries are the size of
      one parameter -- what the core's peak-memory model counts (`model.optim` asks for it);
    - else, by `fused`: None (default): the fused kernel (`fused=True`) when every parameter
      is a floating CUDA or CPU tensor and the optimizer has one (Adam/AdamW), else the
      multi-tensor one (`foreach=True`); True: the fused kernel whatever the device (torch
      raises if it cannot); False: the multi-tensor one.
    The multi-tensor implementation allocates temporaries the size of all the parameters of a
    group; the fused kernel allocates none.

    An unknown name raises SpecError("optimizer", name, ...) listing the core's names; an
    estimate-only one ("adafactor", "adamw-8bit") says why, listing the trainable names.
    `params` may be tensors or param-group dicts, as for any torch optimizer.
    """
    get_trainable_optimizer(name)
    settings = Settings(
        lr=lr,
        weight_decay=weight_decay,
        betas=betas,
        momentum=momentum,
        fused=fused,
        single_tensor=single_tensor,
    )
    return FACTORIES[name](list(params), settings)
