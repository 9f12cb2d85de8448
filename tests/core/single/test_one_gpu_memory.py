"""estimate's one-GPU memory: the phase model's peak where it covers the inputs, the sum of
parts (unchanged) where it does not, and the assumption says which and why."""

from __future__ import annotations

import pytest

from trainbudget.core.single.memory import training_memory
from trainbudget.core.single.one_gpu_memory import one_gpu_memory
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.model_spec import BareModel
from trainbudget.core.spec.presets import get_preset

GPT2 = get_preset("gpt2")
STEP = {"seq_len": 256, "micro_batch": 2, "flash_attention": True}


@pytest.mark.parametrize(
    "model, kw, reason",
    [
        (BareModel(n_params=10**9), {}, "dense:N"),
        (GPT2, {"precision": "fp8"}, "precision fp8"),
        (GPT2, {"optimizer": "adafactor"}, "optimizer adafactor is estimate-only"),
        (GPT2, {"recompute": "selective"}, "recompute selective"),
    ],
)
def test_sum_of_parts_where_the_phase_model_cannot_say(model, kw, reason) -> None:
    args = {"precision": "bf16-mixed", "optimizer": "adamw", "recompute": "none", **STEP, **kw}
    memory, note = one_gpu_memory(model, **args)
    assert memory == training_memory(model, **args)
    assert memory.peak_phase is None and memory.temporaries_bytes == 0
    assert note.startswith("peak memory taken as the sum of parts") and reason in note


@pytest.mark.parametrize(
    "precision", ["fp32", "bf16-mixed", "fp16-mixed", "bf16", "amp-bf16", "amp-fp16"]
)
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_phase_peak_parts_add_up(precision: str, recompute: str) -> None:
    args = {"precision": precision, "optimizer": "adamw", "recompute": recompute, **STEP}
    memory, note = one_gpu_memory(GPT2, **args)
    peak = training_peak(GPT2, **args)
    assert memory.total_bytes == pytest.approx(peak.total_bytes, rel=1e-12)
    assert memory.peak_phase == peak.peak.phase and memory.peak_phase in note
    assert memory.optimizer_bytes == pytest.approx(peak.peak.optimizer_bytes, rel=1e-12)
    # never above the old sum of parts plus what it left out (the temporaries)
    parts = training_memory(GPT2, **args)
    assert memory.total_bytes - memory.temporaries_bytes <= parts.total_bytes
