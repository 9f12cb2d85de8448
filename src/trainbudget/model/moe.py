"""A mixture-of-experts layer that trains under DDP and FSDP2, and its router's training signals.

Routing: top-k of the router's softmax (Shazeer et al. 2017, arXiv:1701.06538). The gate of a
chosen expert is its softmax probability, renormalised over the k chosen when k > 1 (Mixtral;
equal to a softmax over the k chosen logits). With k = 1 the gate is the probability itself
(Switch Transformer, Fedus et al. 2021, arXiv:2101.03961, eq. 2): renormalised it would be 1
and the router would get no gradient from the task loss.

Capacity (spec.capacity_factor = C > 0; Switch Sec. 2.2, GShard arXiv:2006.16668 Sec. 2.2):
each expert takes at most ceil(C * N * k / E) of the N * k token-expert assignments of a
forward pass; assignments beyond that are dropped -- the token gets nothing from that expert
and passes on through the block's residual. Queue order: every token's first choice before
any second choice, then token order (GShard's priority of top-1 over top-2). C = 0: dropless.
Capacity is a training rule: evaluation (module.eval()) keeps every assignment.

Distributed training needs every expert in every step's autograd graph, even one that got no
token on this rank: DDP (find_unused_parameters=False) waits for every parameter's gradient,
and FSDP2 reduce-scatters a block's gradients in an order that must be the same on all ranks.
So each expert runs on its slice of tokens even when the slice is empty: a (0, D) input still
adds the matmuls to the graph, and backward gives the expert a zero gradient.

Expert parallelism (train.parallel.expert_parallel) replaces `runner`: the kept assignments, sorted
by expert, go to the ranks that hold their experts and come back in the same order. Routing and
capacity are decided here, before that, on this rank's own tokens, so the routing is the same
computation with or without expert parallelism.

Auxiliary losses, computed in fp32 in each training forward and kept on the layer
(`router_stats` reads them): the load-balancing loss E * sum_i f_i * P_i (Switch eq. 4; f_i the
fraction of assignments routed to expert i before capacity, P_i the mean router probability
of expert i; 1 when routing is uniform) and the router z-loss mean_tokens(logsumexp(logits)^2)
(ST-MoE, Zoph et al. 2022, arXiv:2202.08906, eq. 5).
Shapes: N tokens, D d_model, E routed experts, k experts per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.mlp import MLP


@dataclass(frozen=True)
class RouterStats:
    """One forward pass of one MoE layer, or the sum over several (`+`)."""

    balance_loss: torch.Tensor
    """Switch's load-balancing loss (fp32 scalar, differentiable); 1 = balanced."""
    z_loss: torch.Tensor
    """ST-MoE's router z-loss (fp32 scalar, differentiable)."""
    dropped: int
    """Token-expert assignments dropped by the capacity rule (a token routed to k experts
    counts k times)."""
    assigned: int
    """Token-expert assignments made (N * k)."""
    n_layers: int = 1
    """MoE layers summed into this."""

    def __add__(self, other: RouterStats) -> RouterStats:
        return RouterStats(
            balance_loss=self.balance_loss + other.balance_loss,
            z_loss=self.z_loss + other.z_loss,
            dropped=self.dropped + other.dropped,
            assigned=self.assigned + other.assigned,
            n_layers=self.n_layers + other.n_layers,
        )


def expert_capacity(n_tokens: int, k: int, n_experts: int, capacity_factor: float) -> int:
    """Assignments one expert takes per forward pass: ceil(C * N * k / E) (Switch Sec. 2.2,
    k = 1; GShard for k = 2); for C = 0 (dropless) all N * k."""
    if capacity_factor <= 0:
        return n_tokens * k
    return math.ceil(capacity_factor * n_tokens * k / n_experts)


def balance_loss(probs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Switch eq. 4 without its coefficient: E * sum_i f_i * P_i, for probs (N, E) the router's
    softmax and chosen (N, k) the experts picked (f counts all k choices, so sum_i f_i = 1)."""
    n_experts = probs.shape[-1]
    counts = torch.bincount(chosen.flatten(), minlength=n_experts)  # (E,)
    fraction = counts.float() / chosen.numel()  # f_i, no gradient (an argmax count)
    return n_experts * (fraction * probs.mean(0)).sum()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE eq. 5: the mean over tokens of logsumexp(router logits)^2, logits (N, E) in fp32;
    it keeps the logits small, where the router's softmax is well-conditioned in low precision."""
    return torch.logsumexp(logits, dim=-1).square().mean()


class MoE(nn.Module):
    """Top-k routed experts plus shared ones, with a capacity per expert (module docstring).
    With router_bias, a per-expert bias shifts which experts are picked but not their gates
    (DeepSeek-V3's balancing bias; it is set by a rule, which this model does not implement,
    not by gradients)."""

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.k = spec.experts_per_token
        self.capacity_factor = spec.capacity_factor
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=False, **factory)
        # a Parameter, as in DeepSeek-V3's checkpoint, that only the top-k choice reads: a
        # zero-gradient edge keeps it in the graph for DDP (frozen, it would trip torch's
        # MemTracker)
        self.score_bias = (
            nn.Parameter(torch.zeros(spec.n_experts, **factory)) if spec.router_bias else None
        )
        self.experts = nn.ModuleList(
            MLP(spec, spec.d_ff_expert, factory) for _ in range(spec.n_experts)
        )
        self.shared = nn.ModuleList(
            MLP(spec, spec.d_ff_expert, factory) for _ in range(spec.n_shared_experts)
        )
        self.n_experts = spec.n_experts
        self.runner: Callable[[torch.Tensor, list[int]], torch.Tensor] | None = None
        """(x (n_kept, D) grouped by expert, counts (E,)) -> the experts' outputs, same rows:
        train.parallel.expert_parallel's all-to-all round trip; None: `run_local`."""
        self.stats: RouterStats | None = None
        """The last training forward's figures, until `router_stats` takes them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        flat = x.reshape(b * t, d)  # (N, D)
        logits = self.router(flat).float()  # (N, E), fp32 for the softmax and the losses
        probs = logits.softmax(dim=-1)  # (N, E)
        scores = logits if self.score_bias is None else logits + self.score_bias.detach()
        chosen = scores.topk(self.k, dim=-1).indices  # (N, k)
        gates = probs.gather(-1, chosen)  # (N, k)
        if self.k > 1:
            gates = gates / gates.sum(-1, keepdim=True)
        if self.score_bias is not None:
            gates = gates + 0 * self.score_bias.sum()  # the zero-gradient edge (see __init__)
        out, dropped = self._dispatch(flat, chosen, gates.to(x.dtype))
        for expert in self.shared:
            out = out + expert(flat)
        if self.training:
            self.stats = RouterStats(
                balance_loss=balance_loss(probs, chosen),
                z_loss=z_loss(logits),
                dropped=dropped,
                assigned=chosen.numel(),
            )
        return out.view(b, t, d)

    def _dispatch(self, flat: torch.Tensor, chosen: torch.Tensor, gates: torch.Tensor):
        """Every expert on its (possibly empty) queue; (the gated sum (N, D), dropped count)."""
        n = flat.shape[0]
        capacity = (
            expert_capacity(n, self.k, self.n_experts, self.capacity_factor)
            if self.training
            else n * self.k
        )
        queue_choice = chosen.t().reshape(-1)  # (k * N,): all first choices, then second ...
        queue_gate = gates.t().reshape(-1)  # (k * N,)
        kept = []  # per expert, its kept queue positions, in queue order
        for e in range(self.n_experts):
            queued = (queue_choice == e).nonzero().squeeze(-1)  # (n_e,)
            kept.append(queued[:capacity])
        order = torch.cat(kept)  # (n_kept,) queue positions, grouped by expert
        dropped = len(queue_choice) - len(order)
        token = order % n  # (n_kept,) rows of flat
        counts = [len(q) for q in kept]  # (E,) assignments each expert takes
        run = self.runner or self.run_local
        expert_out = run(flat[token], counts)  # (n_kept, D), rows in `order`
        out = torch.zeros_like(flat).index_add_(0, token, expert_out * queue_gate[order, None])
        return out, dropped

    def run_local(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """The experts of this process on x (n_kept, D), rows grouped by expert (`counts` rows
        each); every expert runs, on an empty slice too (module docstring)."""
        parts = torch.split(x, counts)
        return torch.cat([expert(part) for expert, part in zip(self.experts, parts, strict=True)])


def router_stats(model: nn.Module) -> RouterStats | None:
    """The figures of the last training forward, summed over the MoE layers of `model`, and
    taken (each layer's are cleared); None for a model without MoE layers or when no training
    forward ran since the last call."""
    total = None
    for module in model.modules():
        if isinstance(module, MoE) and module.stats is not None:
            total = module.stats if total is None else total + module.stats
            module.stats = None
    return total
