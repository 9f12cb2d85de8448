"""Bytes per parameter of precision policies and optimizers (ZeRO Sec. 3.1 accounting)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.hardware import DTYPES, get_hardware
from trainbudget.core.spec.precision import (
    OPTIMIZERS,
    PRECISIONS,
    TRAINABLE_OPTIMIZERS,
    Optimizer,
    dense_bytes_per_param,
    get_optimizer,
    get_precision,
    get_trainable_optimizer,
)


def per_param(precision: str, optimizer: str) -> float:
    return dense_bytes_per_param(get_precision(precision), get_optimizer(optimizer))


def test_fp32_adamw_16_bytes() -> None:
    """Seed 000 S-max-model: fp32 weights 4 + grads 4 + Adam m, v 4 + 4 = 16 bytes."""
    assert per_param("fp32", "adamw") == 16


def test_bf16_mixed_adamw_2_2_12() -> None:
    """ZeRO (arXiv 1910.02054, Sec. 3.1): 2 (bf16 weights) + 2 (grads) + K=12 (fp32 master 4,
    m 4, v 4)."""
    p, o = get_precision("bf16-mixed"), get_optimizer("adamw")
    assert (p.weight_bytes, p.grad_bytes) == (2, 2)
    assert p.master_bytes + o.state_bytes_per_param(p) == 12
    assert per_param("bf16-mixed", "adamw") == 16


def test_adamw_8bit() -> None:
    """Dettmers et al. 2022: m and v in 1 byte each plus one fp32 absmax per 2048-block:
    2 * (1 + 4/2048) = 2.00390625 bytes of state; with bf16-mixed 2 + 2 + 4 + 2.0039."""
    o = get_optimizer("adamw-8bit")
    assert o.state_bytes_per_param(get_precision("bf16-mixed")) == 2.00390625
    assert per_param("bf16-mixed", "adamw-8bit") == 10.00390625


@pytest.mark.parametrize(
    ("optimizer", "expected"),
    [("sgd", 8), ("momentum", 12), ("adagrad", 12), ("rmsprop", 12), ("adam", 16)],
)
def test_fp32_optimizers(optimizer: str, expected: int) -> None:
    """fp32: 4 (weights) + 4 (grads) + 4 per state tensor (0, 1 or 2 of them)."""
    assert per_param("fp32", optimizer) == expected


def test_pure_bf16_has_no_master() -> None:
    """Pure bf16 AdamW: 2 + 2 + 2*2 = 8 bytes, no fp32 copy."""
    assert get_precision("bf16").master_bytes == 0
    assert per_param("bf16", "adamw") == 8


def test_activation_and_compute_dtypes() -> None:
    """Mixed policies store 16-bit activations and use the 16-bit peak."""
    assert get_precision("fp16-mixed").compute_dtype == "fp16"
    assert get_precision("bf16-mixed").activation_bytes == 2
    assert get_precision("fp32").activation_bytes == 4


def test_fp8_policy_bytes() -> None:
    """FP8 training as Transformer Engine / torchao float8 do it: matmuls in FP8, the bytes of
    bf16-mixed. Weights the GEMMs read are bf16 (2), gradients bf16 (2), fp32 master (4) and
    fp32 Adam m, v (4 + 4): 16 bytes per parameter, as ZeRO Sec. 3.1's 2 + 2 + 12 (arXiv
    1910.02054). Activations 2 bytes: torchao's matmul_with_hp_or_float8_args saves the bf16
    input for backward (Transformer Engine would save 1-byte FP8 GEMM inputs)."""
    p = get_precision("fp8")
    assert (p.weight_bytes, p.grad_bytes, p.master_bytes, p.state_bytes) == (2, 2, 4, 4)
    assert p.activation_bytes == 2
    assert p.compute_dtype == "fp8"
    assert per_param("fp8", "adamw") == per_param("bf16-mixed", "adamw") == 16
    assert per_param("fp8", "adamw-8bit") == 10.00390625


def test_every_compute_dtype_is_a_catalog_peak_key() -> None:
    """compute_dtype picks a key of Hardware.dense_flops_per_second."""
    for p in PRECISIONS.values():
        assert p.compute_dtype in DTYPES


def test_fp8_on_a_gpu_without_fp8_is_one_line_error() -> None:
    """A100 has no FP8 tensor cores (nvidia-a100-datasheet: no FP8 row): asking for the fp8
    policy's peak names the GPU and fp8 on one line."""
    with pytest.raises(SpecError) as err:
        get_hardware("a100-80gb").peak_flops_per_second(get_precision("fp8").compute_dtype)
    assert "a100-80gb" in str(err.value) and "fp8" in str(err.value)
    assert "\n" not in str(err.value)
    assert get_hardware("h100-sxm").peak_flops_per_second("fp8") == 1979e12


@pytest.mark.parametrize(
    ("call", "field"),
    [(lambda: get_precision("fp4"), "precision"), (lambda: get_optimizer("adamww"), "optimizer")],
)
def test_unknown_names(call, field: str) -> None:
    """Unknown keys raise SpecError naming the table, listing the known keys."""
    with pytest.raises(SpecError, match="known") as err:
        call()
    assert err.value.field == field


# ---- the optimizer table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "n_states", "n_scratch"),
    # scratch: torch's single-tensor updates (torch/optim/adam.py `denom = (exp_avg_sq.sqrt() /
    # bias_correction2_sqrt).add_(eps)`: two temporaries; rmsprop.py `square_avg.sqrt()` then
    # add_: one) and this project's AdaGrad (`sum.sqrt().add_(eps)`: one); SGD is in place
    [
        ("sgd", 0, 0),
        ("momentum", 1, 0),
        ("adagrad", 1, 1),
        ("rmsprop", 1, 1),
        ("adam", 2, 2),
        ("adamw", 2, 2),
    ],
)
def test_trainable_rows_states_and_scratch(name: str, n_states: int, n_scratch: int) -> None:
    o = get_optimizer(name)
    assert (o.n_states, o.n_scratch, o.trainable) == (n_states, n_scratch, True)
    assert o.scratch_source and o.source


def test_estimate_only_rows_say_why() -> None:
    assert set(OPTIMIZERS) - set(TRAINABLE_OPTIMIZERS) == {"adafactor", "adamw-8bit"}
    for name in ("adafactor", "adamw-8bit"):
        o = get_optimizer(name)
        assert not o.trainable and o.estimate_only_reason and o.scratch_tensors == ()
        with pytest.raises(SpecError, match="estimate-only") as err:
            get_trainable_optimizer(name)
        assert err.value.field == "optimizer"
        assert "adamw" in err.value.rule  # lists what the trainer runs
    assert get_trainable_optimizer("adamw") is OPTIMIZERS["adamw"]


def test_a_row_is_checked_when_made() -> None:
    """A non-trainable row needs its reason; a trainable one cites where its scratch comes from."""
    with pytest.raises(ValueError, match="estimate_only_reason"):
        Optimizer(name="x", state_tensors=(), trainable=False, source="s")
    with pytest.raises(ValueError, match="estimate_only_reason"):
        Optimizer(
            name="x", state_tensors=(), scratch_source="s", estimate_only_reason="r", source="s"
        )
    with pytest.raises(ValueError, match="scratch_source"):
        Optimizer(name="x", state_tensors=(), source="s")
