"""The lecture's deep linear "Cruncher" (seed 001): counts small enough to check by hand."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.linear_chain import cruncher_memory, linear_chain_flops


def test_cruncher_memory_seed001() -> None:
    """Seed 001: D=4, 2 layers, B=2, AdaGrad, fp32 -> params 4*4*2 + 4 = 36, activations
    2*4*2 = 16, grads 36, state 36: 124 elements x 4 bytes = 496 bytes."""
    m = cruncher_memory(d=4, n_layers=2, batch=2)
    assert (m.n_params, m.n_activations, m.n_gradients, m.n_optimizer_states) == (36, 16, 36, 36)
    assert m.total_bytes == 496


def test_cruncher_bf16_adam() -> None:
    """bf16 halves every element; Adam keeps two states: (36 + 16 + 36 + 72) x 2 = 320."""
    m = cruncher_memory(d=4, n_layers=2, batch=2, optimizer="adam", precision="bf16")
    assert m.total_bytes == 320


def test_linear_chain_flops_seed001() -> None:
    """Seed 001: batch 2 through 4 -> 4 -> 4 -> 1: forward 2*2*(16 + 16 + 4) = 144,
    backward 2 x 144 = 288, total 432 = 6 x batch x 36 params."""
    f = linear_chain_flops(2, [4, 4, 4, 1])
    assert (f.forward, f.backward, f.total) == (144, 288, 432)
    assert f.total == 6 * 2 * 36


def test_no_input_grad_skips_first_layer() -> None:
    """Without an input gradient the first layer's backward is its weight gradient alone:
    432 - 2*2*4*4 = 368."""
    assert linear_chain_flops(2, [4, 4, 4, 1], input_grad=False).total == 368


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: linear_chain_flops(0, [4, 1]), "batch"),
        (lambda: linear_chain_flops(2, [4]), "dims"),
        (lambda: linear_chain_flops(2, [4, 0, 1]), "dims"),
        (lambda: cruncher_memory(d=0, n_layers=2, batch=2), "d"),
        (lambda: cruncher_memory(d=4, n_layers=0, batch=2), "n_layers"),
        (lambda: cruncher_memory(d=4, n_layers=2, batch=-1), "batch"),
        (lambda: cruncher_memory(d=4, n_layers=2, batch=2, precision="bf16-mixed"), "precision"),
    ],
)
def test_errors(call, field: str) -> None:
    """Bad sizes and mixed precision (two element sizes) are refused by name."""
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field


@pytest.mark.parametrize("optimizer", ["adafactor", "adamw-8bit"])
def test_unsupported_optimizer_named(optimizer: str) -> None:
    """With fp32 the precision is fine; the error should name the optimizer."""
    with pytest.raises(SpecError) as err:
        cruncher_memory(d=4, n_layers=2, batch=2, optimizer=optimizer)
    assert err.value.field == "optimizer"
