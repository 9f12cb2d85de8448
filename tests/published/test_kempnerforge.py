"""KempnerForge's MFU-benchmark rows (published/runs/kempnerforge.py): the report's MFU column is
its own PaLM-style count over tok/s, each step time times tok/s is the driver's tokens a step, the
spelled-out 13B has the report's 14.84B parameters, and the memory column is recorded as the
allocated peak in GiB."""

from __future__ import annotations

import pytest

from trainbudget.core.single.params import count_params
from trainbudget.core.units import GiB
from trainbudget.published.runs.kempnerforge import (
    KEMPNERFORGE,
    KF_13B,
    MODELS,
    ROWS_STATED,
    SEQ_LEN,
)
from trainbudget.validation import measured_step_seconds

H200_PEAK = 989e12  # metrics/mfu.py _GPU_PEAK_TFLOPS["H200"] = 989.0
PARAMS_STATED = {"7b": 8.03e9, "13b": 14.84e9, "70b": 70.55e9}  # the report's 'Models' table


def _flops_per_token(name: str) -> float:
    """metrics/mfu.py estimate_model_flops_per_token: 6 P + 12 L D S, P every parameter
    (schema.py num_params_estimate: embedding and untied head included), S = max_seq_len."""
    model = MODELS[name]
    return 6 * count_params(model).total + 12 * model.n_layers * model.d_model * SEQ_LEN


@pytest.mark.parametrize("exp", ROWS_STATED)
def test_mfu_column_is_the_palm_count_over_tok_s(exp) -> None:
    name, gpus, *_, tps, mfu, _, _ = ROWS_STATED[exp]
    assert _flops_per_token(name) * tps / (H200_PEAK * gpus) == pytest.approx(mfu / 100, abs=6e-4)


@pytest.mark.parametrize("run", KEMPNERFORGE, ids=lambda r: r.id)
def test_step_time_times_throughput_is_the_steps_tokens(run) -> None:
    """tokens_in_step = batch_size x seq_len x grad_accum_steps x dp (scripts/train.py); the
    table's step time (3 significant digits) agrees with it to 1 %."""
    stated_step = ROWS_STATED[_exp(run)][-1]
    tokens = run.layout.global_batch * SEQ_LEN
    assert measured_step_seconds(run) == pytest.approx(stated_step, rel=0.01)
    assert run.measured.tokens_per_second_per_gpu * run.n_gpus * stated_step == pytest.approx(
        tokens, rel=0.01
    )


def _exp(run) -> str:
    (exp,) = [
        e
        for e, row in ROWS_STATED.items()
        if run.measured.tokens_per_second_per_gpu * run.n_gpus == pytest.approx(row[7])
    ]
    return exp


@pytest.mark.parametrize("name", sorted(PARAMS_STATED))
def test_models_have_the_reports_parameter_counts(name) -> None:
    assert count_params(MODELS[name]).total == pytest.approx(PARAMS_STATED[name], rel=0.001)
    assert KF_13B.d_ff == 17920  # 256 x ceil(int(4 x 5120 x 2/3 x 1.3) / 256)


def test_memory_is_the_allocated_peak_in_gib_on_every_row() -> None:
    """metrics/memory.py: peak_gb = torch.cuda.max_memory_allocated / 1024**3, printed 'GB'."""
    for run in KEMPNERFORGE:
        assert run.measured.memory_measure == "allocated"
        mem = ROWS_STATED[_exp(run)][9]
        assert run.measured.memory_bytes_per_gpu == pytest.approx(mem * GiB)


def test_layouts_cover_the_table() -> None:
    """Fourteen rows on 1-32 H200, four a node; pure bf16 with FSDP2 full sharding wherever
    there is data parallelism, sequence-parallel norms wherever there is TP."""
    assert len(KEMPNERFORGE) == 14 and {r.gpu for r in KEMPNERFORGE} == {"h200"}
    for run in KEMPNERFORGE:
        lay = run.layout
        assert lay.tp * lay.dp == run.n_gpus and run.gpus_per_node == min(run.n_gpus, 4)
        assert lay.zero == (3 if lay.dp > 1 else 0) and lay.sp == (lay.tp > 1)
        assert run.precision == "bf16" and lay.recompute == "full"


def test_fsdp_rows_memory_follows_the_kempnerforge_row() -> None:
    """The rows run KempnerForge's own stack (framework row 'kempnerforge': no-sync
    accumulation keeping FSDP2's unsharded gradients in its fp32 reduce dtype, the TP head's
    logits gathered whole to every rank, the token embedding replicated over TP). Every row
    with data parallelism comes within 5 % of its max_memory_allocated; the three rows
    without FSDP (one GPU, TP alone) are 12-14 % under and not asserted: what they hold
    beyond the model is not found yet."""
    from trainbudget.validation import compare

    for run in KEMPNERFORGE:
        assert run.framework == "kempnerforge"
        if run.layout.dp > 1:
            assert compare(run).memory_error == pytest.approx(0.0, abs=0.05), run.id


@pytest.mark.parametrize("run", KEMPNERFORGE, ids=lambda r: r.id)
def test_a_row_that_ran_compiled_is_timed_compiled(run) -> None:
    """The table's torch.compile column (--train.compile_model) is the run's `compiled`: all
    rows but the 13B on fsdp8 ran under torch.compile."""
    assert run.compiled is ROWS_STATED[_exp(run)][6]
    assert run.compiled is (run.id != "kforge-13b-fsdp8-8gpu")
