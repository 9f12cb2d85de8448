"""Accelerate's FSDP2 bf16/FP8 rows (published/runs/accelerate_fp8.py): the two stated throughputs
are the README's '~25%' apart and become an 8192-token step per GPU."""

from __future__ import annotations

import pytest

from trainbudget.published.runs.accelerate_fp8 import (
    ACCELERATE_FP8,
    SEQ_LEN,
    TOKENS_PER_SECOND_PER_GPU_STATED,
)
from trainbudget.validation import measured_step_seconds


def test_fp8_over_bf16_is_the_readmes_25_percent() -> None:
    ratio = TOKENS_PER_SECOND_PER_GPU_STATED["fp8"] / TOKENS_PER_SECOND_PER_GPU_STATED["bf16"]
    assert ratio == pytest.approx(1.25)


@pytest.mark.parametrize("run", ACCELERATE_FP8, ids=lambda r: r.id)
def test_one_packed_sequence_per_gpu_and_step(run) -> None:
    assert (run.layout.dp, run.layout.zero, run.layout.global_batch) == (8, 3, 8)
    assert run.layout.recompute == "none" and run.seq_len == SEQ_LEN
    tps = run.measured.tokens_per_second_per_gpu
    assert measured_step_seconds(run) == pytest.approx(SEQ_LEN / tps)
