"""The MoE layers' part of a training step: their auxiliary losses added to each micro-batch's
loss, and the step's router figures (losses, dropped assignments) summed over micro-batches,
then over ranks with the loop's one all-reduce, for the log line and metrics.jsonl.

Each MoE layer's losses are weighted and summed over layers (Switch Transformer and ST-MoE add
the auxiliary losses of every MoE layer to the total loss); the logged values are per layer,
the mean over layers, micro-batches and ranks, so that a balanced router logs 1.0 whatever
the depth. The logged `loss` stays the cross-entropy, comparable with dense runs and with the
evaluation."""

from __future__ import annotations

import torch

from trainbudget.model.moe import router_stats
from trainbudget.train.spec.config import TrainConfig

FIELDS = ("balance_loss", "z_loss", "dropped", "assigned", "layer_passes")
"""The packet's entries, in order: sums over this rank's micro-batches (losses summed over
layers; layer_passes counts MoE layer forwards, the losses' divisor)."""


class MoeTally:
    """One step's router figures on this rank."""

    def __init__(self, device: torch.device) -> None:
        self.sums = torch.zeros(len(FIELDS), device=device)

    def add_losses(self, model: torch.nn.Module, loss: torch.Tensor, cfg: TrainConfig):
        """`loss` (one micro-batch's, already divided by grad_accum) plus the MoE layers'
        weighted auxiliary losses from the forward just run, divided alike; `loss` itself for
        a dense model."""
        stats = router_stats(model)
        if stats is None:
            return loss
        aux = cfg.moe_balance_loss_coef * stats.balance_loss + cfg.moe_z_loss_coef * stats.z_loss
        figures = (
            stats.balance_loss.detach(),
            stats.z_loss.detach(),
            stats.dropped,
            stats.assigned,
            stats.n_layers,
        )
        self.sums += torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in figures]).to(
            self.sums.device
        )
        return loss + aux / cfg.grad_accum


def moe_record(packet: list[float]) -> dict:
    """The record's MoE fields from the all-reduced FIELDS sums; {} for a dense model."""
    sums = dict(zip(FIELDS, packet, strict=True))
    if not sums["layer_passes"]:
        return {}
    return {
        "moe_balance_loss": sums["balance_loss"] / sums["layer_passes"],
        "moe_z_loss": sums["z_loss"] / sums["layer_passes"],
        "moe_dropped_tokens": int(sums["dropped"]),
        "moe_dropped_fraction": sums["dropped"] / sums["assigned"],
    }


def moe_text(record: dict) -> str:
    """The log line's MoE part: '  dropped 12 (4.7%)'; '' for a dense model."""
    if "moe_dropped_tokens" not in record:
        return ""
    return (
        f"  dropped {record['moe_dropped_tokens']:,} ({100 * record['moe_dropped_fraction']:.1f}%)"
    )
