"""Precision policies and optimizers: bytes per parameter of weights, gradients and state.

Policies (the bytes each keeps per parameter):
- fp32: fp32 weights and gradients, fp32 optimizer state.
- bf16-mixed / fp16-mixed: 16-bit weights and gradients plus an fp32 master copy and fp32
  optimizer state, the accounting of ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 3.1:
  2 + 2 + K bytes, K = 12 for Adam) and of seed 004 (LLaMA-2 70B: 140 + 140 + 840 GB).
- bf16: everything in bf16, no master copy (pure 16-bit training).
- amp-bf16 / amp-fp16: PyTorch autocast: fp32 weights, gradients and state, 16-bit compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import unknown_key


@dataclass(frozen=True, kw_only=True)
class Precision:
    name: str
    weight_bytes: int
    """Bytes per parameter of the weights the forward pass reads."""
    grad_bytes: int
    master_bytes: int
    """fp32 master copy kept by the optimizer (0 when the weights are already the master)."""
    state_bytes: int
    """Bytes per element of full-size optimizer state (momentum, variance)."""
    activation_bytes: int
    """Bytes per stored activation element."""
    compute_dtype: str
    """Which peak FLOP/s of the hardware applies: 'fp32', 'bf16' or 'fp16'."""


PRECISIONS = MappingProxyType(
    {
        p.name: p
        for p in (
            Precision(
                name="fp32",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=4,
                compute_dtype="fp32",
            ),
            Precision(
                name="bf16-mixed",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=4,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            Precision(
                name="fp16-mixed",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=4,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="fp16",
            ),
            Precision(
                name="bf16",
                weight_bytes=2,
                grad_bytes=2,
                master_bytes=0,
                state_bytes=2,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            # PyTorch autocast (torch.autocast): fp32 weights, gradients and state; matmuls
            # and most activations in 16 bits (norms, softmax and the loss stay fp32, which
            # the 2-byte activation figure leaves out); fp16 adds a gradient scaler
            Precision(
                name="amp-bf16",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="bf16",
            ),
            Precision(
                name="amp-fp16",
                weight_bytes=4,
                grad_bytes=4,
                master_bytes=0,
                state_bytes=4,
                activation_bytes=2,
                compute_dtype="fp16",
            ),
        )
    }
)


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise unknown_key("precision", name, list(PRECISIONS))
    return PRECISIONS[name]


# 8-bit Adam keeps both moments in 8 bits with one fp32 absmax per block of 2048 values
# (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", arXiv 2110.02861, Sec. 2).
ADAM8BIT_BLOCK = 2048


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    name: str
    n_states: int
    """Full-size state tensors per parameter (momentum, variance, ...)."""
    state_bytes_override: float | None = None
    """Bytes per state element when the optimizer fixes it (8-bit Adam), else the policy's."""
    factored: bool = False
    """Adafactor: a matrix keeps row and column statistics, not a full second moment."""
    source: str = ""

    def state_bytes_per_param(self, precision: Precision) -> float:
        """Bytes of optimizer state per parameter, master copy excluded (dense tensors)."""
        per_element = self.state_bytes_override or precision.state_bytes
        return self.n_states * per_element


OPTIMIZERS = MappingProxyType(
    {
        o.name: o
        for o in (
            Optimizer(name="sgd", n_states=0, source="plain SGD keeps no state"),
            Optimizer(name="momentum", n_states=1, source="SGD with momentum: one velocity buffer"),
            Optimizer(
                name="adagrad",
                n_states=1,
                source="Duchi et al. 2011: sum of squared gradients (seed 001, AdaGrad)",
            ),
            Optimizer(name="rmsprop", n_states=1, source="Hinton 2012: running mean of squares"),
            Optimizer(name="adam", n_states=2, source="Kingma & Ba 2015, arXiv 1412.6980: m and v"),
            Optimizer(
                name="adamw",
                n_states=2,
                source="Loshchilov & Hutter 2019, arXiv 1711.05101: m and v",
            ),
            Optimizer(
                name="adafactor",
                n_states=0,
                factored=True,
                source="Shazeer & Stern 2018, arXiv 1804.04235: factored second moment, beta1=0",
            ),
            Optimizer(
                name="adamw-8bit",
                n_states=2,
                state_bytes_override=1 + 4 / ADAM8BIT_BLOCK,
                source="Dettmers et al. 2022, arXiv 2110.02861: 8-bit blockwise m and v",
            ),
        )
    }
)


def get_optimizer(name: str) -> Optimizer:
    if name not in OPTIMIZERS:
        raise unknown_key("optimizer", name, list(OPTIMIZERS))
    return OPTIMIZERS[name]


def dense_bytes_per_param(precision: Precision, optimizer: Optimizer) -> float:
    """Weights + gradients + master copy + optimizer state per parameter, for a non-factored
    optimizer: fp32 AdamW = 4 + 4 + 8 = 16 (seed 000, S-max-model); mixed AdamW = 2 + 2 + 12."""
    return (
        precision.weight_bytes
        + precision.grad_bytes
        + precision.master_bytes
        + optimizer.state_bytes_per_param(precision)
    )
