"""InternLM's 7B scaling rows (published/runs/internlm.py): the page's own columns agree with the
records, and the network the page states moves the rows OUTLIERS lists."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.published import get_run
from trainbudget.published.runs.internlm import (
    GLOBAL_BATCH_MTOKENS_STATED,
    INTERNLM,
    SEQ_LEN,
    TFLOPS_STATED,
)
from trainbudget.validation import (
    OUTLIERS,
    compare,
    measured_step_seconds,
    megatron_flops,
)

MEBI_TOKENS = 2**20  # the page's "0.125M" global batch is 131072 = 2^17 tokens


def test_both_tables_are_recorded_whole() -> None:
    assert len(INTERNLM) == len(TFLOPS_STATED) == len(GLOBAL_BATCH_MTOKENS_STATED) == 22
    assert sum(r.layout.recompute == "full" for r in INTERNLM) == 11
    layouts = {(r.layout.tp, r.layout.pp, r.layout.zero, r.layout.zero_shard) for r in INTERNLM}
    assert layouts == {(1, 1, 1, 8)}


_BATCHES = list(zip(INTERNLM, GLOBAL_BATCH_MTOKENS_STATED, strict=True))


@pytest.mark.parametrize("run, tokens", _BATCHES)
def test_global_batch_column_is_gpus_times_micro_batches(run, tokens) -> None:
    assert run.layout.global_batch * SEQ_LEN == tokens * MEBI_TOKENS


def test_tflops_column_is_megatrons_formula_over_tgs() -> None:
    """The page counts FLOPs 'by the method of the Megatron paper': Narayanan et al.'s eq. 3,
    four passes with checkpointing, three without. From the recorded TGS it gives the page's
    TFLOPS column: 19 of 22 rows within 1.5 %, the other three (32 and 128 GPUs, and 1024
    GPUs at mb4, with checkpointing) 2-3.2 % above it; the two columns look logged apart."""
    deviations = []
    for run, tflops in zip(INTERNLM, TFLOPS_STATED, strict=True):
        passes = 4 if run.layout.recompute == "full" else 3
        per_gpu = megatron_flops(run, passes) / measured_step_seconds(run) / run.n_gpus
        deviations.append(per_gpu / 1e12 / tflops - 1)
    assert max(map(abs, deviations)) < 0.035
    assert sum(abs(d) < 0.015 for d in deviations) == 19


def test_the_rows_are_timed_on_the_pages_roce_network() -> None:
    """The page's hardware table: 4 x 100 Gb/s RoCE a node of 8 GPUs (6.25 GB/s each), a
    quarter of the catalog a100-80gb row's one 200 Gb/s HDR port a GPU. compare() times the rows
    on it (PublishedRun.nic_bytes_per_second); on the catalog's network the rows beyond the
    limit would come out 3-15 points faster still."""
    listed = [r.id for r in INTERNLM if r.id in OUTLIERS]
    assert len(listed) == 6
    for run in INTERNLM:
        assert run.nic_bytes_per_second == 4 * 100e9 / 8 / 8
    for run_id in listed:
        run = get_run(run_id)
        stated = compare(run).error
        catalog = compare(dataclasses.replace(run, nic_bytes_per_second=None)).error
        assert 0.025 < stated - catalog < 0.16, run_id
        assert stated < -0.09, run_id


def test_the_fixed_step_cost_the_outliers_quote() -> None:
    """Two 1024-GPU rows that differ only in the micro-batch count: the measured step has
    0.58 s that does not scale with the batch, the model 0.40 s (the internlm-2023 row's
    optimizer step, the broadcast after it, and the gradient reduction over the page's RoCE
    network, most of it exposed behind one micro-batch's backward)."""
    one, two = (get_run(f"internlm-7b-nockpt-1024gpu-mb2x{k}") for k in (1, 2))
    measured_fixed = 2 * measured_step_seconds(one) - measured_step_seconds(two)
    predicted_fixed = 2 * compare(one).predicted_seconds - compare(two).predicted_seconds
    assert measured_fixed == pytest.approx(0.58, abs=0.01)
    assert predicted_fixed == pytest.approx(0.40, abs=0.01)
