"""Narayanan et al. 2021 (published/narayanan.py): Table 1 and Table 2 as records, checked
against the tables' own redundant columns."""

from __future__ import annotations

import pytest

from trainbudget.core.single.params import count_params
from trainbudget.published import get_run
from trainbudget.published.narayanan import NARAYANAN
from trainbudget.validation import measured_step_seconds, megatron_flops

# Table 1: run -> (parameters in billions, aggregate petaFLOP/s), the columns the records do
# not use: they check the dimensions and the GPU count read from the other columns
TABLE1 = {
    "narayanan-1.7b-32gpu": (1.7, 4.4),
    "narayanan-3.6b-64gpu": (3.6, 8.8),
    "narayanan-7.5b-128gpu": (7.5, 18.2),
    "narayanan-18b-256gpu": (18.4, 34.6),
    "narayanan-39b-512gpu": (39.1, 70.8),
    "narayanan-76b-1024gpu": (76.1, 143.8),
    "narayanan-145b-1536gpu": (145.6, 227.1),
    "narayanan-310b-1920gpu": (310.1, 297.4),
    "narayanan-530b-2520gpu": (529.6, 410.2),
    "narayanan-1t-3072gpu": (1008.0, 502.0),
}


def test_every_row_of_both_tables_is_a_record():
    assert len(NARAYANAN) == 10 + 6 + 6  # Table 1; Table 2 PTD-P and ZeRO-3
    assert {r.source_key for r in NARAYANAN} == {"narayanan-2021"}


@pytest.mark.parametrize(("run_id", "columns"), TABLE1.items())
def test_table1_parameters_and_aggregate_throughput(run_id, columns):
    billions, petaflops = columns
    run = get_run(run_id)
    # eq. 2 counts the same weights as count_params (tied embedding, learned positions);
    # the table rounds to 0.1B
    assert count_params(run.model).total / 1e9 == pytest.approx(billions, abs=0.06)
    # the per-GPU TFLOP/s is rounded to a whole number: +-0.5 of it on every GPU, plus the
    # aggregate's own rounding to 0.1
    tflops = run.measured.tflops_per_second_per_gpu
    rounding = 0.5 * run.n_gpus / 1000 + 0.05
    assert tflops * run.n_gpus / 1000 == pytest.approx(petaflops, abs=rounding)


def test_step_time_is_eq3_over_the_throughput():
    # Table 1, 1.7B: 96Bslh^2(1 + s/6h + V/16lh) with B 512, l 24, h 2304, at 137 TFLOP/s x 32
    run = get_run("narayanan-1.7b-32gpu")
    flops = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert megatron_flops(run, 4) == pytest.approx(flops)
    assert measured_step_seconds(run) == pytest.approx(flops / (137e12 * 32))


def test_zero3_rows_are_data_parallel_only_with_one_micro_batch_per_step():
    for run in NARAYANAN:
        if run.layout.zero == 3:
            assert (run.layout.tp, run.layout.pp, run.layout.grad_accum) == (1, 1, 1), run.id
            assert run.framework == "megatron-deepspeed-2021"


def test_mtnlg_middle_point_reproduces_its_tflops():
    # Smith et al. 2022 §2.4: 350 servers (2800 GPUs), 50.2 s per iteration, 121 TFLOP/s (eq. 3
    # with V = 50272 gives 120.4: within 1 %, as 125.7 for 126 and 113.5 for 113)
    run = get_run("mtnlg-530b-2800gpu")
    assert megatron_flops(run, 4) / (50.2 * 2800) / 1e12 == pytest.approx(121, rel=0.01)
