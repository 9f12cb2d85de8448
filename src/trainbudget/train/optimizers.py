"""SGD and AdaGrad written out, and `build_optimizer` for the training loop.

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

import torch

from trainbudget.core.errors import SpecError, unknown_key

__all__ = ["SGD", "SUPPORTED_OPTIMIZERS", "AdaGrad", "build_optimizer"]


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


SUPPORTED_OPTIMIZERS = ("adam", "adagrad", "adamw", "momentum", "sgd")
"""Names `build_optimizer` accepts (a subset of the core's `OPTIMIZERS`, same meanings)."""


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
) -> torch.optim.Optimizer:
    """The optimizer for one of the core's optimizer names (`SUPPORTED_OPTIMIZERS`).

    - "sgd": `SGD(lr, weight_decay)`, no state.
    - "momentum": `SGD(lr, momentum=momentum, weight_decay)` (momentum 0.9 by default, as
      `model.optim.torch_optimizer` uses), one state tensor per parameter.
    - "adagrad": `AdaGrad(lr, weight_decay)`, one state tensor per parameter.
    - "adam" / "adamw": `torch.optim.Adam` / `torch.optim.AdamW(lr, betas, weight_decay)`
      (Adam's weight decay is L2 added to the gradient, AdamW's is decoupled), two state
      tensors per parameter plus a scalar `step`.
    `betas` and `fused` apply to Adam/AdamW only; `momentum` to "momentum" only.

    Adam/AdamW implementation, by `fused`:
    - None (default): the fused kernel (`fused=True`) when every parameter is a floating
      CUDA tensor, else the multi-tensor one (`foreach=True`).
    - True: the fused kernel whatever the device (torch raises if it cannot).
    - False: the multi-tensor one (`foreach=True`).
    The multi-tensor implementation allocates temporaries the size of all the parameters of a
    group (the core's peak-memory model assumes the for-loop implementation, which
    `model.optim.torch_optimizer` builds); the fused kernel allocates none.

    An unknown name (the core's "rmsprop", "adafactor", "adamw-8bit" included) raises
    SpecError("optimizer", name, ...) listing the supported names. `params` may be tensors or
    param-group dicts, as for any torch optimizer.
    """
    if name not in SUPPORTED_OPTIMIZERS:
        raise unknown_key("optimizer", name, SUPPORTED_OPTIMIZERS)
    if name == "sgd":
        return SGD(params, lr=lr, weight_decay=weight_decay)
    if name == "momentum":
        return SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adagrad":
        return AdaGrad(params, lr=lr, weight_decay=weight_decay)
    params = list(params)
    if fused is None:
        fused = all(p.is_cuda and p.is_floating_point() for p in _all_tensors(params))
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    kind = {"fused": True} if fused else {"foreach": True}
    return cls(params, lr=lr, betas=betas, weight_decay=weight_decay, **kind)
