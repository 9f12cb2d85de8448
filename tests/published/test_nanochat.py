"""nanochat's runs (published/runs/nanochat.py): the step times follow from the leaderboard's
summaries, and the d32 run's own log lines (parameter count, FLOPs a token, MFU) agree with
the recorded model and step time."""

from __future__ import annotations

import pytest

from trainbudget.core.single.params import count_params
from trainbudget.published import get_run
from trainbudget.published.runs.nanochat import NANOCHAT, SEQ_LEN, step_seconds

H100_SXM_BF16_PEAK = 989e12  # the constant nanochat's base_train.py divides by ("H100 SXM")


def test_five_runs_on_one_node() -> None:
    assert [r.id for r in NANOCHAT] == [
        "nanochat-d32-8gpu", "nanochat-d24-bf16-8gpu", "nanochat-d26-fp8-8gpu",
        "nanochat-d26-fp8-1m-8gpu", "nanochat-d26-fp8-run4-8gpu",
    ]  # fmt: skip
    assert {(r.gpu, r.n_gpus, r.layout.dp, r.layout.zero) for r in NANOCHAT} == {
        ("h100-sxm", 8, 8, 2)
    }
    assert [r.precision for r in NANOCHAT] == ["amp-bf16", "amp-bf16", "fp8", "fp8", "fp8"]


@pytest.mark.parametrize(
    "run_id, seconds, steps, tokens",
    [
        ("nanochat-d24-bf16-8gpu", 10949.46713, 16704, 524288),
        ("nanochat-d26-fp8-8gpu", 10493, 14889, 524288),
        ("nanochat-d26-fp8-1m-8gpu", 9922, 7226, 1048576),
        ("nanochat-d26-fp8-run4-8gpu", 8967, 12700, 524288),
    ],
)
def test_leaderboard_summary_gives_the_step_and_batch(run_id, seconds, steps, tokens) -> None:
    """dev/LEADERBOARD.md: total_training_time counts every step after the first ten."""
    run = get_run(run_id)
    assert run.measured.iteration_seconds == pytest.approx(seconds / (steps - 11))
    assert run.layout.global_batch * SEQ_LEN == tokens
    assert run.layout.grad_accum == tokens // (8 * 16 * SEQ_LEN)


def test_step_seconds_counts_the_timed_steps() -> None:
    assert step_seconds(111.0, 122) == pytest.approx(1.0)


def test_d32_log_lines_match_the_record() -> None:
    """run1000.sh quotes 'Number of parameters: 1,879,048,192' (weightless norms: the record's
    RMSNorm weights, 133,120 of them, are the only difference), 'Estimated FLOPs per token:
    1.207960e+10' (6 x non-embedding parameters + 12 x layers x width x sequence) and
    'mfu: 50.89' at 'dt: 1572.76ms'."""
    run = get_run("nanochat-d32-8gpu")
    params = count_params(run.model)
    norms = params.attention_norm + params.mlp_norm + params.final_norm
    assert params.total - norms == 1_879_048_192
    m = run.model
    non_embedding = params.total - norms - params.embedding_token
    flops_per_token = 6 * non_embedding + 12 * m.n_layers * m.d_model * SEQ_LEN
    assert flops_per_token == pytest.approx(1.207960e10, rel=1e-6)
    tokens = run.layout.global_batch * SEQ_LEN
    mfu = flops_per_token * tokens / 1.57276 / (8 * H100_SXM_BF16_PEAK)
    assert mfu == pytest.approx(0.5089, abs=0.0001)
    assert run.measured.iteration_seconds == pytest.approx(1.57276, rel=0.002)
