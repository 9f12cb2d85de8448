"""The orchestrator: it must combine the parts without changing them, and say what it did."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.estimate import EstimateRequest, estimate, flops_formula_used
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.memory import training_memory
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import BareModel
from trainbudget.core.spec.presets import get_preset

H100 = get_hardware("h100-sxm")


def _req(**kw) -> EstimateRequest:
    return EstimateRequest(**{"model": get_preset("llama-2-7b"), "hardware": H100, **kw})


def test_parts_are_the_core_functions_results():
    e = estimate(_req(seq_len=2048, micro_batch=2, recompute="selective"))
    # the request's FlashAttention default (core.spec.defaults) is on
    f = training_flops(get_preset("llama-2-7b"), 2048, recompute="selective", flash_attention=True)
    m = training_memory(
        get_preset("llama-2-7b"),
        seq_len=2048,
        micro_batch=2,
        recompute="selective",
        flash_attention=True,
    )
    assert e.flops == f
    assert e.memory == m
    assert e.flops_per_token == f.model_flops_per_token  # recomputation never in model FLOPs


def test_step_is_micro_batch_times_accumulation_times_gpus():
    e = estimate(_req(seq_len=4096, micro_batch=2, grad_accum=8, n_gpus=16))
    assert e.tokens_per_step == 2 * 8 * 16 * 4096
    assert e.flops_per_step == e.flops_per_token * e.tokens_per_step


def test_time_uses_the_precision_compute_dtype_peak():
    fp32 = estimate(_req(tokens=1e9, precision="fp32"))
    bf16 = estimate(_req(tokens=1e9, precision="bf16-mixed"))
    # same FLOPs, peaks 67.5e12 vs 989.5e12 (seed 001 get_promised_flop_per_sec)
    assert fp32.time.seconds / bf16.time.seconds == pytest.approx(989.5 / 67.5)


def test_bare_model_is_6n_and_says_so():
    req = EstimateRequest(model=BareModel(n_params=70_000_000_000), hardware=H100, tokens=15e12)
    e = estimate(req)
    assert e.flops_per_token == 6 * 70e9
    assert flops_formula_used(req) == "6n"
    assert e.memory.activations is None
    assert any("dense:N has no architecture" in a for a in e.assumptions)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"n_gpus": 0}, "gpus"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"tokens": -1.0}, "tokens"),
        ({"seq_len": 0}, "seq_len"),
        ({"flops_formula": "8n"}, "flops_formula"),
        ({"tokens": 1e308}, "tokens"),  # overflows to inf FLOPs
    ],
)
def test_bad_requests_name_the_field(kw, field):
    with pytest.raises(SpecError) as err:
        estimate(_req(**kw))
    assert err.value.field == field


def test_palm_needs_an_architecture():
    with pytest.raises(SpecError) as err:
        estimate(
            EstimateRequest(model=BareModel(n_params=10**9), hardware=H100, flops_formula="palm")
        )
    assert err.value.field == "flops_formula"


def test_explain_steps_show_formula_and_result():
    e = estimate(_req(tokens=2e12, n_gpus=64, price_per_gpu_hour=2.0))
    names = [s.quantity for s in e.steps]
    for expected in (
        "params N",
        "training FLOPs C",
        "time",
        "GPU-hours",
        "cost",
        "total per GPU",
        "checkpoint",
    ):
        assert expected in names
    time_step = e.steps[names.index("time")]
    assert f"{e.time.days:.2f} days" in time_step.value
