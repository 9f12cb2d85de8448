"""The core's predicted FLOPs of one step per part add up to its hardware FLOPs
(trainbudget.core.single.flops.training_flops), whatever the recompute policy and attention
kernel; pure, no torch."""

from __future__ import annotations

import pytest

from trainbudget.core.single.flops import training_flops
from trainbudget.core.spec.presets import get_preset
from trainbudget.profile.flops_compare import predicted_step_parts


def test_predicted_parts_add_up_to_core_hardware_flops() -> None:
    spec = get_preset("llama-3-8b")  # grouped-query attention, SwiGLU, untied head
    for recompute in ("none", "selective", "full"):
        for flash in (False, True):
            parts = predicted_step_parts(
                spec, micro_batch=3, seq_len=512, recompute=recompute, flash_attention=flash
            )
            tf = training_flops(spec, 512, recompute=recompute, flash_attention=flash)
            assert sum(parts.values()) == pytest.approx(tf.hardware_flops_per_token * 512 * 3)
