"""Which module path belongs to which of the core's forward parts (the reference model's module
names, trainbudget.model.transformer); pure, no torch."""

from __future__ import annotations

import pytest

from trainbudget.profile.flop_parts import (
    ATTENTION_CORE,
    OTHER,
    part_of_module,
    parts_from_module_counts,
)


@pytest.mark.parametrize(
    ("fqn", "part"),
    [
        ("Transformer.blocks.0.attn.qkv", "qkv"),
        ("Transformer.blocks.11.attn.proj", "attn_proj"),
        ("Transformer.blocks.3.attn", ATTENTION_CORE),
        ("Transformer.blocks.0.mlp.up", "mlp_up"),
        ("Transformer.blocks.0.mlp.gate", "mlp_gate"),
        ("Transformer.blocks.0.mlp.down", "mlp_down"),
        ("Transformer.blocks.1.mlp.experts.7.down", "mlp_down"),
        ("Transformer.blocks.1.mlp.shared.0.gate", "mlp_gate"),
        ("Transformer.blocks.1.mlp.router", "router"),
        ("Transformer.head", "logits"),
        ("Transformer.blocks.0.norm1", OTHER),
        ("Transformer", OTHER),
        ("Global", OTHER),
    ],
)
def test_part_of_module(fqn: str, part: str) -> None:
    assert part_of_module(fqn) == part


def test_inclusive_module_counts_become_exclusive_parts() -> None:
    """FlopCounterMode's per-module totals include the modules below: each module keeps what its
    children did not count, and the attention core splits evenly into scores and values."""
    counts = {
        "Global": 100,
        "Transformer": 100,
        "Transformer.blocks.0.attn": 30,
        "Transformer.blocks.0.attn.qkv": 12,
        "Transformer.blocks.0.attn.proj": 4,
        "Transformer.head": 50,
    }
    parts = parts_from_module_counts(counts)
    assert (parts["qkv"], parts["attn_proj"], parts["logits"]) == (12, 4, 50)
    assert (parts["scores"], parts["attn_values"]) == (7, 7)  # 30 - 12 - 4 = 14, split evenly
    assert parts[OTHER] == 100 - 30 - 50
