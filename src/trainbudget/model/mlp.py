"""The feed-forward block of a dense layer, and of each expert of an MoE layer (model.moe)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainbudget.core.spec.model_spec import ModelSpec


class MLP(nn.Module):
    """GELU: down(gelu(up x)); SwiGLU: down(silu(gate x) * up x) (Shazeer 2020); GeGLU the
    same with a tanh-approximated GELU on the gate."""

    def __init__(self, spec: ModelSpec, d_hidden: int, factory: dict) -> None:
        super().__init__()
        self.swiglu = spec.mlp == "swiglu"
        self.gelu_gate = spec.gate_activation == "gelu_tanh"
        self.up = nn.Linear(spec.d_model, d_hidden, bias=spec.bias, **factory)
        self.gate = (
            nn.Linear(spec.d_model, d_hidden, bias=spec.bias, **factory) if self.swiglu else None
        )
        self.down = nn.Linear(d_hidden, spec.d_model, bias=spec.bias, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            g = self.gate(x)
            g = F.gelu(g, approximate="tanh") if self.gelu_gate else F.silu(g)
            return self.down(g * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))
