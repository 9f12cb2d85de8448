"""The training loss of each data source (the seed article's "channel" loss curves), from the
per-token losses the step computes anyway: each sequence's token losses added to its source's
sum, over the step's micro-batches and, through the step's one all-reduce, over the ranks.

A source's loss is the mean over the step's tokens drawn from it; the sources' losses weighted
by their token counts average to the step's loss (every sequence has seq_len tokens, so the
step's mean loss is the mean over all its tokens). A source no sequence of the step came from
has no loss that step (left out, not 0)."""

from __future__ import annotations

import torch

MAX_ON_LOG_LINE = 4
"""Up to this many sources, each one's loss goes on the log line; beyond, only the worst."""


class SourceLoss:
    """Per-source sums of token losses and token counts over one optimizer step."""

    def __init__(self, names: list[str], device: torch.device) -> None:
        self.names = list(names)
        n = len(self.names)
        # fp64: a step's sum of ~1e5 token losses keeps every digit the mean needs
        self.sums = torch.zeros(n, dtype=torch.float64, device=device)
        self.tokens = torch.zeros(n, dtype=torch.float64, device=device)

    def add(self, token_losses: torch.Tensor, source_ids: torch.Tensor) -> None:
        """token_losses: (B, T) of one micro-batch (detached); source_ids: (B,) indexes into
        `names`. No host sync: it stays on the device until the step's all-reduce."""
        per_row = token_losses.detach().double().sum(1)  # (B,)
        ids = source_ids.to(self.sums.device)
        self.sums.index_add_(0, ids, per_row)
        self.tokens.index_add_(0, ids, torch.full_like(per_row, token_losses.shape[1]))

    def packet(self) -> torch.Tensor:
        """(2 n,) sums then token counts, to ride in the step's all-reduce (fp32 there: exact
        for counts below 2**24 tokens per source and step, and ~7 digits of each sum)."""
        return torch.cat([self.sums, self.tokens]).float()

    def record(self, reduced: list[float]) -> dict[str, dict[str, float]]:
        """metrics.jsonl's fields from the all-reduced `packet`: each source's mean token loss
        and its tokens this step (over all ranks), for the sources the step drew from."""
        n = len(self.names)
        drawn = [
            (name, s, t)
            for name, s, t in zip(self.names, reduced[:n], reduced[n:], strict=True)
            if t
        ]
        return {
            "train_loss_by_source": {name: s / t for name, s, t in drawn},
            "train_tokens_by_source": {name: int(t) for name, _, t in drawn},
        }


def log_line_part(losses: dict[str, float]) -> str:
    """What the log line adds: nothing for one source (its loss is the loss), each source's
    loss for up to MAX_ON_LOG_LINE, else the worst one."""
    if len(losses) < 2:
        return ""
    if len(losses) <= MAX_ON_LOG_LINE:
        return "  (" + ", ".join(f"{name} {loss:.3f}" for name, loss in losses.items()) + ")"
    name = max(losses, key=losses.__getitem__)
    return f"  (worst of {len(losses)} sources: {name} {losses[name]:.3f})"
