"""FlagPerf's Llama 3 rows (published/runs/flagperf.py): the page's MFU column is 6 x the nominal
parameter count x token/p/s over 989 TFLOP/s, and the 8B rows' error rests on the assumed
recomputation (validation.OUTLIERS quotes the figures)."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.published import get_run
from trainbudget.published.runs.flagperf import FLAGPERF, GLOBAL_BATCH, SEQ_LEN
from trainbudget.validation import compare

H100_BF16_PEAK = 989e12  # 'H100标定bf16算力为989TFLOPS' (the page's note)
MFU_BF16_STATED = {
    "flagperf-llama3-8b-h100-8gpu-bf16": (8e9, 0.393),
    "flagperf-llama3-8b-h100-16gpu-bf16": (8e9, 0.384),
    "flagperf-llama3-70b-h100-64gpu-bf16": (70e9, 0.361),
}


@pytest.mark.parametrize("run_id", sorted(MFU_BF16_STATED))
def test_mfu_column_is_six_nominal_params_per_token(run_id) -> None:
    nominal, mfu = MFU_BF16_STATED[run_id]
    tps = get_run(run_id).measured.tokens_per_second_per_gpu
    assert 6 * nominal * tps / H100_BF16_PEAK == pytest.approx(mfu, abs=0.002)


def test_fp8_mfu_floor_is_over_the_fp8_peak() -> None:
    """'25.4%-50.6%': the same count over 1979 TFLOP/s (all FP8) is the range's floor."""
    tps = get_run("flagperf-llama3-8b-h100-8gpu-fp8").measured.tokens_per_second_per_gpu
    assert 6 * 8e9 * tps / 1979e12 == pytest.approx(0.254, abs=0.002)


@pytest.mark.parametrize("run", FLAGPERF, ids=lambda r: r.id)
def test_layout_fills_the_scripts_global_batch(run) -> None:
    lay = run.layout
    assert lay.global_batch == GLOBAL_BATCH and run.seq_len == SEQ_LEN
    assert lay.micro_batch * lay.grad_accum * lay.dp == GLOBAL_BATCH
    assert lay.sp and lay.zero == 1 and "layout.recompute" in run.assumed


@pytest.mark.parametrize(
    ("run_id", "full"),
    [("flagperf-llama3-8b-h100-8gpu-bf16", 0.101), ("flagperf-llama3-8b-h100-16gpu-fp8", 0.096)],
)
def test_the_8b_error_rests_on_the_assumed_recomputation(run_id, full) -> None:
    run = get_run(run_id)
    # selective: Megatron-Core runs the fused attention's forward again (checkpoint_core_attention)
    assert -0.15 < compare(run).error < -0.10
    as_full = dataclasses.replace(run, layout=dataclasses.replace(run.layout, recompute="full"))
    assert compare(as_full).error == pytest.approx(full, abs=0.01)
