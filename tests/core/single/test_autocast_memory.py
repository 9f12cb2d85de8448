"""The sum-of-parts memory (core.single.memory.training_memory) and the largest fitting model
(core.single.fit) size activations with the policy's weight width, as training_peak does: under
autocast (amp-bf16, amp-fp16) the matmuls' 16-bit weight copies and the fp32 residual stream
count (core.single.activations; by hand in test_autocast_activations.py)."""

from __future__ import annotations

import pytest

from trainbudget.core.single.activations import activation_memory
from trainbudget.core.single.fit import fit_with_activations
from trainbudget.core.single.memory import training_memory
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.precision import get_precision

GPT2 = resolve_model("gpt2", [])
S, B = 1024, 4


def _activations(precision: str, recompute: str, flash_attention: bool, spec=GPT2) -> float:
    prec = get_precision(precision)
    return activation_memory(
        spec,
        seq_len=S,
        micro_batch=B,
        activation_bytes=prec.activation_bytes,
        weight_bytes=prec.weight_bytes,
        recompute=recompute,
        flash_attention=flash_attention,
    ).total_bytes


@pytest.mark.parametrize("precision", ["amp-bf16", "amp-fp16", "bf16-mixed", "fp32"])
@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("flash_attention", [False, True])
def test_training_memory_sizes_activations_with_the_policys_weights(
    precision, recompute, flash_attention
) -> None:
    m = training_memory(
        GPT2,
        precision=precision,
        seq_len=S,
        micro_batch=B,
        recompute=recompute,
        flash_attention=flash_attention,
    )
    assert m.activations_bytes == _activations(precision, recompute, flash_attention)


def test_autocast_adds_weight_copies_and_a_wider_residual_to_the_sum_of_parts() -> None:
    """amp-bf16 against bf16-mixed (same 16-bit activations): the 12 d^2 bf16 copies of each
    layer's matmul weights, the tied head's V x d, and fp32 norm inputs (2 per layer, 1 final)."""
    d, v, n_layers = GPT2.d_model, GPT2.vocab_size, GPT2.n_layers
    kw = {"seq_len": S, "micro_batch": B, "flash_attention": True}
    amp = training_memory(GPT2, precision="amp-bf16", **kw).activations_bytes
    mixed = training_memory(GPT2, precision="bf16-mixed", **kw).activations_bytes
    copies = 2 * (n_layers * 12 * d * d + v * d)
    residual = (2 * n_layers + 1) * S * B * d * (4 - 2)
    assert amp - mixed == copies + residual


@pytest.mark.parametrize("precision", ["amp-bf16", "bf16-mixed"])
def test_fit_counts_the_policys_activations(precision) -> None:
    fit = fit_with_activations(
        n_gpus=8,
        memory_bytes_per_gpu=80e9,
        precision=precision,
        optimizer="adamw",
        reserve_fraction=0.0,
        seq_len=S,
        micro_batch=B,
    )
    assert fit.model is not None
    assert fit.activation_bytes_per_gpu == _activations(precision, "full", True, fit.model)
