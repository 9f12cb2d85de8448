"""The optimizer step of the peak model: every gradient plus the update's scratch, which the
optimizer table's row gives (the profile tests hold the whole model to MemTracker)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.peak_memory import largest_tensor, training_peak
from trainbudget.core.spec.model_spec import ModelSpec

GPT2 = ModelSpec(
    vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024
)
EMBEDDING = 50257 * 768  # GPT-2's largest tensor: the V x d embedding


def _step_temporaries(precision: str, optimizer: str) -> float:
    peak = training_peak(GPT2, precision=precision, optimizer=optimizer, seq_len=8, micro_batch=1)
    step = peak.phases[-1]
    assert step.phase == "optimizer step"
    return step.temporaries_bytes


@pytest.mark.parametrize(
    ("precision", "optimizer", "bytes_per_element"),
    [
        ("fp32", "adamw", 2 * 4),  # sqrt(v) and its division by the bias correction, fp32
        ("fp32", "sgd", 0),  # in place
        ("fp32", "momentum", 0),
        ("bf16", "adagrad", 1 * 2),  # sqrt(sum) + eps in the state's bf16
        ("bf16", "rmsprop", 1 * 2),
        # master weights: the scratch is fp32, plus the fp32 copy of the gradient being applied
        ("bf16-mixed", "adam", 2 * 4 + 4),
        ("bf16-mixed", "sgd", 0 + 4),
    ],
)
def test_optimizer_step_scratch_by_hand(precision, optimizer, bytes_per_element) -> None:
    assert largest_tensor(GPT2) == EMBEDDING
    assert _step_temporaries(precision, optimizer) == EMBEDDING * bytes_per_element


@pytest.mark.parametrize("optimizer", ["adafactor", "adamw-8bit"])
def test_estimate_only_optimizers_are_refused(optimizer: str) -> None:
    with pytest.raises(SpecError, match="estimate-only") as err:
        _step_temporaries("fp32", optimizer)
    assert err.value.field == "optimizer"
