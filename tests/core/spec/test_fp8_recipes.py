"""FP8 recipes (core.spec.fp8_recipes): the cast bytes each recipe moves for one linear layer,
and every recipe well formed (its FP8 GEMMs named, its source cited, FP8 all-gather only where
torchao allows it)."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec import fp8_recipes as fr


def test_fp8_linear_extra_bytes():
    m, n, k = 8192, 3 * 4096, 4096
    assert fr.fp8_linear_extra_bytes(m, n, k, "te-current") == 6 * (m * k + k * n + m * n)
    assert fr.fp8_linear_extra_bytes(m, n, k, "te-delayed") == 4 * (m * k + k * n + m * n)
    hp = fr.get_fp8_recipe("torchao-rowwise-gw-hp")
    assert hp.fp8_gemms == ("fprop", "dgrad")
    assert fr.fp8_linear_extra_bytes(m, n, k, "torchao-rowwise-gw-hp") == (
        5 * m * k + 10 * k * n + 5 * m * n
    )
    eager = fr.fp8_linear_extra_bytes(m, n, k, "torchao-tensorwise-eager")
    assert eager > 6 * fr.fp8_linear_extra_bytes(m, n, k, "torchao-tensorwise")
    with pytest.raises(SpecError, match="known: "):
        fr.fp8_linear_extra_bytes(m, n, k, "te")


def test_recipes_are_well_formed():
    for r in fr.FP8_RECIPES.values():
        assert set(r.fp8_gemms) <= set(fr.GEMM_ROLES)
        assert "https://" in r.source
        assert min(
            r.input_bytes_per_element, r.weight_bytes_per_element,
            r.grad_output_bytes_per_element,
        ) >= 4 or r.fp8_gemms != fr.GEMM_ROLES  # fmt: skip
        assert r.kernels_per_linear is None or r.kernels_per_linear > 0
    # only tensorwise torchao weights can be all-gathered in FP8 (config.py asserts it)
    assert {r.name for r in fr.FP8_RECIPES.values() if r.fsdp_fp8_all_gather} == {
        "torchao-tensorwise",
        "torchao-tensorwise-eager",
    }


def test_rowwise_scales_its_backward_outputs_after_a_tensorwise_gemm():
    """torchao's rowwise recipe runs the two backward GEMMs without fast accumulation, so
    (float8_ops.py, addmm_float8_unwrapped) on cuBLAS's tensorwise kernel at unit scales and
    then `output *= scale`: 2 B read + 2 B written per element of the input gradient (m x k)
    and of the weight gradient (k x n), on top of tensorwise's casts."""
    m, n, k = 8192, 3 * 4096, 4096
    rowwise = fr.fp8_linear_extra_bytes(m, n, k, "torchao-rowwise")
    tensorwise = fr.fp8_linear_extra_bytes(m, n, k, "torchao-tensorwise")
    assert rowwise - tensorwise == 4 * (m * k + k * n)
    assert fr.get_fp8_recipe("torchao-rowwise").kernels_per_linear == 12 + 2


def test_mxfp8_quantizes_each_tensor_twice_and_runs_on_blackwell_only():
    """TE's MXFP8 (docs mxfp8.rst): rowwise and columnwise 32-element blocks are quantized
    separately from bf16 in one pass: 2 B read, 2 x (1 B + 1/32 B E8M0 scale) written."""
    m, n, k = 8192, 3 * 4096, 4096
    assert fr.fp8_linear_extra_bytes(m, n, k, "te-mxfp8") == pytest.approx(
        4.0625 * (m * k + k * n + m * n)
    )
    fr.check_fp8_recipe_runs_on("te-mxfp8", "b200")
    fr.check_fp8_recipe_runs_on("te-delayed", "h100-sxm")  # runs_on None: every FP8 GPU
    with pytest.raises(SpecError, match="runs on b200 only, not on h100-sxm"):
        fr.check_fp8_recipe_runs_on("te-mxfp8", "h100-sxm")
