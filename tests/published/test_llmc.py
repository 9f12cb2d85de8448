"""llm.c's launch-script rows (published/runs/llmc.py): the layout gives the stated tokens a step,
and the GPT-3 125M script's step time, left out, is above what 8 A100s can compute."""

from __future__ import annotations

import pytest

from trainbudget.core.spec.hardware import get_hardware
from trainbudget.published.runs.llmc import GPT3_125M_MS_STATED, LLMC, TOKENS_PER_STEP


@pytest.mark.parametrize("run", LLMC, ids=lambda r: r.id)
def test_layout_gives_the_scripts_tokens_per_step(run) -> None:
    lay = run.layout
    assert lay.micro_batch * run.seq_len * lay.dp == TOKENS_PER_STEP  # -b 64 -t 1024 on 8
    assert lay.grad_accum == 1 and lay.zero == 1 and lay.recompute == "none"


def test_step_times_are_the_scripts_figures() -> None:
    assert [r.measured.iteration_seconds for r in LLMC] == [0.300, 0.820]


def test_the_left_out_gpt3_figure_exceeds_the_a100_peak() -> None:
    """6 x 125M x 524,288 tokens in 0.150 s on 8 GPUs, attention not even counted, is more
    than an A100's dense bf16 peak: the script's figure is not a measured A100 step."""
    per_gpu = 6 * 125e6 * TOKENS_PER_STEP / (GPT3_125M_MS_STATED / 1000) / 8
    assert per_gpu > get_hardware("a100-80gb").peak_flops_per_second("bf16")
