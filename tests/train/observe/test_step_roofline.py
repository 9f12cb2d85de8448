"""train.observe.step_roofline: the step's GEMM shapes against the core's FLOP count, the start-up
measurement's figures and its busy-machine verdict, and the budget built on it. No timing is
asserted: only that the rates are positive and the verdict follows its stated thresholds."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trainbudget.core.single.flops import forward_flops  # noqa: E402
from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.core.spec.precision import get_precision  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.profile.device import DeviceInfo  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.observe import accounting, step_roofline  # noqa: E402
from trainbudget.train.observe.accounting import make_budget, run_plan  # noqa: E402
from trainbudget.train.observe.step_roofline import (  # noqa: E402
    BUSY_CPU_SHARE,
    NOISY_SPREAD,
    measure_step_roofline,
    relative_spread,
    step_gemms,
)
from trainbudget.train.spec.config import TrainConfig  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="a test CPU", catalog_key=None, total_memory_bytes=2**34)
TINY = resolve_model("gpt2", ("n_layers=2", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257"))
PLAN = run_plan("ddp", world_size=1, micro_batch=2, grad_accum=1, recompute="none")


@pytest.mark.parametrize(
    "spec",
    [
        TINY,  # tied head, GELU MLP, fused qkv
        resolve_model(
            "llama-3-8b",
            ("n_layers=2", "d_model=64", "n_heads=4", "n_kv_heads=2", "d_ff=96", "vocab_size=300"),
        ),
    ],
    ids=["gpt2-tied", "llama-untied-gqa"],
)
def test_the_step_gemms_are_three_times_the_cores_weight_matmul_flops(spec) -> None:
    # forward, input gradient, weight gradient: 3 x the forward's FLOPs of every weight
    # matrix (core.flops counts them per formula; step_gemms from the matrix shapes)
    seq_len, batch = 16, 3
    fwd = forward_flops(spec, seq_len)
    weights = fwd.qkv + fwd.attn_proj + fwd.mlp_up + fwd.mlp_gate + fwd.mlp_down + fwd.logits
    gemms = step_gemms(spec, batch * seq_len)
    assert sum(c * 2 * m * n * k for m, n, k, c in gemms) == 3 * batch * weights


def test_the_relative_spread_is_robust_to_one_slow_pass() -> None:
    assert relative_spread([1.0, 1.0, 1.0, 1.0, 3.0]) == 0.0  # one pass slowed: median stands
    assert relative_spread([1.0, 1.2, 1.4, 1.6, 1.8]) == pytest.approx(0.2 / 1.4)


def test_a_measurement_has_positive_rates_and_says_its_conditions() -> None:
    roof = measure_step_roofline(TINY, PLAN, seq_len=16, precision=get_precision("fp32"), repeats=2)
    for rate in (roof.matmul_flops_per_second, roof.elementwise_bytes_per_second):
        assert math.isfinite(rate) and rate > 0
    assert roof.attention_fraction > 0
    assert roof.threads == torch.get_num_threads() and roof.repeats == 2
    assert roof.n_gemm_shapes == len(step_gemms(TINY, 2 * 16))
    assert roof.spread >= 0 and roof.cpu_share > 0
    assert "FLOP/s matmul" in roof.describe()


def _roof(**kw):
    roof = measure_step_roofline(TINY, PLAN, seq_len=16, precision=get_precision("fp32"), repeats=1)
    return dataclasses.replace(roof, **kw)


def test_noisy_follows_the_spread_and_the_cpu_share() -> None:
    assert not _roof(spread=NOISY_SPREAD, cpu_share=BUSY_CPU_SHARE).noisy
    spread = _roof(spread=1.5 * NOISY_SPREAD, cpu_share=1.0)
    assert spread.noisy and "passes spread 15%" in spread.why_noisy()
    shared = _roof(spread=0.0, cpu_share=0.5)
    assert shared.noisy and "got 50%" in shared.why_noisy()


def test_off_the_catalog_the_budget_stands_on_the_measured_roofline(monkeypatch) -> None:
    noisy = _roof(spread=0.3, cpu_share=1.0)
    monkeypatch.setattr(
        "trainbudget.train.observe.step_roofline.measure_step_roofline", lambda *a, **kw: noisy
    )
    monkeypatch.setattr("trainbudget.profile.bench.bandwidth_bench", lambda *a, **kw: 1e10)
    budget = make_budget(TINY, PLAN, device=CPU, precision="fp32", optimizer="adamw", seq_len=16)
    assert budget.roofline is noisy and budget.predicted_step_seconds > 0
    assert budget.peak_flops_per_second is None  # no datasheet: no MFU
    assert any("at the run's shapes" in note for note in budget.notes)
    assert accounting.noisy_note(noisy) in budget.notes
    assert "too busy to trust" in accounting.noisy_note(noisy)


def _readings(monkeypatch, *cpu_shares: float) -> None:
    """Make each measurement's passes steady (1e9 FLOP in 1 s) with these CPU shares."""
    readings = iter([([(1e9, 1.0, 0.1, 0.1)] * 3, share) for share in cpu_shares])
    monkeypatch.setattr(step_roofline._Kernels, "time", lambda self, repeats: next(readings))


def test_a_noisy_measurement_is_taken_again(monkeypatch) -> None:
    _readings(monkeypatch, 0.5, 1.0)
    roof = measure_step_roofline(TINY, PLAN, seq_len=16, precision=get_precision("fp32"))
    assert roof.attempts == 2 and roof.cpu_share == 1.0 and not roof.noisy
    assert roof.matmul_flops_per_second == 1e9


def test_when_every_attempt_is_noisy_the_steadiest_is_kept(monkeypatch) -> None:
    _readings(monkeypatch, 0.4, 0.6, 0.5)
    roof = measure_step_roofline(TINY, PLAN, seq_len=16, precision=get_precision("fp32"))
    assert roof.attempts == 3 and roof.cpu_share == 0.6 and roof.noisy
    assert "steadiest of 3" in roof.describe()


def test_a_cpu_run_summary_says_what_its_prediction_stood_on(tmp_path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        prepare(None, tmp_path / "data", tokenizer="byte")
    overrides = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257")
    cfg = TrainConfig(
        overrides=(*overrides, "max_seq_len=32"),
        data=str(tmp_path / "data"),
        out=str(tmp_path / "run"),
        steps=4,
        micro_batch=2,
        seq_len=16,
        device="cpu",
        eval_batches=1,
        tensorboard=False,
    )
    summary = train(cfg)
    roof = summary["roofline"]
    assert roof["threads"] == torch.get_num_threads() and roof["repeats"] == 5
    assert roof["matmul_flops_per_second"] > 0 and roof["noisy_above"] == NOISY_SPREAD
    assert summary["step_seconds"]["cpu_share"] > 0  # 3 timed steps' CPU over their wall time
