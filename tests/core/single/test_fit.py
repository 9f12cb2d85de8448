"""core.single.fit: the largest Llama-2-shaped model whose ZeRO-3 state and one micro-batch's
activations fit each GPU (issue 13, point 13: `fit` counted no activations)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.activations import activation_memory
from trainbudget.core.single.fit import candidate_shape, fit_with_activations
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.presets import get_preset

GB = 1e9
KW = dict(precision="bf16-mixed", optimizer="adamw", reserve_fraction=0.0, seq_len=4096)


def test_the_shape_rule_gives_llama_2_7b_at_32_layers() -> None:
    """d_model = 128 x 32 = 4096, 32 heads, SwiGLU 11008 wide (Llama 2 7B's config)."""
    shape, llama = candidate_shape(32), get_preset("llama-2-7b")
    assert (shape.d_model, shape.n_heads, shape.n_layers) == (4096, 32, 32)
    assert shape.d_ff == 11008 == llama.d_ff
    assert count_params(shape).total == count_params(llama).total


def test_the_largest_fitting_model_and_the_next_one_not() -> None:
    fit = fit_with_activations(n_gpus=8, memory_bytes_per_gpu=80 * GB, **KW)
    assert fit.state_only_params == pytest.approx(40e9)  # seed 000: 8 x 80 GB / 16 B
    assert 0 < fit.params < fit.state_only_params
    assert fit.state_bytes_per_gpu + fit.activation_bytes_per_gpu <= fit.limit_bytes_per_gpu
    bigger = candidate_shape(fit.model.n_layers + 1)
    state = count_params(bigger).total * 16 / 8
    acts = activation_memory(
        bigger,
        seq_len=4096,
        micro_batch=1,
        activation_bytes=2,
        recompute="full",
        flash_attention=True,
    ).total_bytes
    assert state + acts > 80 * GB


def test_longer_sequences_and_reserve_shrink_the_model() -> None:
    base = fit_with_activations(n_gpus=8, memory_bytes_per_gpu=80 * GB, **KW)
    longer = fit_with_activations(
        n_gpus=8, memory_bytes_per_gpu=80 * GB, **{**KW, "seq_len": 65536}
    )
    reserved = fit_with_activations(
        n_gpus=8, memory_bytes_per_gpu=80 * GB, **{**KW, "reserve_fraction": 0.3}
    )
    assert longer.params < base.params and reserved.params < base.params


def test_nothing_fits_is_said_not_guessed() -> None:
    fit = fit_with_activations(n_gpus=1, memory_bytes_per_gpu=1 * GB, **KW)
    assert fit.model is None and fit.params == 0


def test_bad_inputs_name_their_field() -> None:
    with pytest.raises(SpecError, match="seq_len"):
        fit_with_activations(n_gpus=8, memory_bytes_per_gpu=80 * GB, **{**KW, "seq_len": 0})
