"""report.plan_data: every number of the plan report is the core's (the same as `trainbudget
plan` prints for the same inputs), the parts sum to their totals, and nothing pulls in torch or
matplotlib."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cli_json
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.reliability import ASSUMPTIONS as RELIABILITY_ASSUMPTIONS
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.report.plan_assumptions import overlap_rules
from trainbudget.report.plan_data import MEMORY_PARTS, PlanQuestion, as_json, plan_report
from trainbudget.report.scaling_data import scaling_counts

SRC = str(Path(__file__).resolve().parents[2] / "src")
PLAN_ARGS = (
    *("--model", "llama-3-70b", "--tokens", "15T", "--gpus", "1024", "--gpu", "h100-sxm"),
    *("--seq-len", "8192", "--global-batch", "512"),
    *("--gpu-failure-rate-per-day", "0.0005", "--checkpoint-write-bytes-per-second", "50GB/s"),
)


def question(**over) -> PlanQuestion:
    values = {
        "model": resolve_model("llama-3-70b"),
        "cluster": Cluster(hardware=get_hardware("h100-sxm"), n_gpus=1024),
        "tokens": 15e12,
        "global_batch": 512,
        "seq_len": 8192,
        "precision": get_precision("bf16-mixed"),
        "optimizer": get_optimizer("adamw"),
        "gpu_failure_rate_per_day": 0.0005,
        "checkpoint_write_bytes_per_second": 50e9,
        "scaling_gpus": (256, 1024, 4096),
        "notes": ("a default the caller filled in",),
    }
    return PlanQuestion(**{**values, **over})


@pytest.fixture(scope="module")
def report():
    return plan_report(question())


@pytest.fixture(scope="module")
def plan_json() -> dict:
    return cli_json("plan", *PLAN_ARGS)


def test_the_answer_is_the_plan_commands(report, plan_json) -> None:
    best = plan_json["plans"][0]
    a = report.answer
    assert a.plan == best["plan"]["description"]
    assert a.step_seconds == best["step_seconds"]
    assert a.tokens_per_second == best["tokens_per_second"]
    assert a.mfu == best["mfu"]
    assert a.train_days == pytest.approx(best["time_days"], rel=1e-12)
    assert a.gpu_hours == pytest.approx(best["gpu_hours"], rel=1e-12)
    assert a.why == plan_json["why"]
    assert (a.evaluated, a.n_fitting) == (plan_json["evaluated"], plan_json["fitting"])
    assert a.cost is None  # no price given


def test_candidates_are_the_plan_commands(report, plan_json) -> None:
    assert len(report.candidates) == len(plan_json["plans"]) == 5
    for c, p in zip(report.candidates, plan_json["plans"], strict=True):
        assert c.plan == p["plan"]["description"]
        assert c.total_memory_bytes == p["memory_bytes"]["total"]
        assert c.memory_bytes["activations"] == p["memory_bytes"]["activations"]
        assert c.step_seconds == p["step_seconds"]
        assert c.exposed_comm_seconds == {
            k: v for k, v in p["step_breakdown_seconds"].items() if k.endswith("_comm")
        }


def test_parts_sum_to_their_totals(report) -> None:
    for c in report.candidates:
        assert sum(c.memory_bytes[k] for k in MEMORY_PARTS) == pytest.approx(c.total_memory_bytes)
        assert sum(c.step_seconds_by_part.values()) == pytest.approx(c.step_seconds)
    for p in report.scaling:
        assert sum(p.step_seconds_by_part.values()) == pytest.approx(p.step_seconds)


def test_failures_are_the_plan_commands(report, plan_json) -> None:
    f, rel = report.failures, plan_json["reliability"]
    assert f.mtbf_seconds / 3600 == pytest.approx(rel["mtbf_hours"])
    assert f.goodput == pytest.approx(rel["goodput"])
    assert f.daly_interval_seconds == pytest.approx(rel["optimal_checkpoint_interval_seconds"])
    assert f.wall_clock_days == pytest.approx(rel["wall_clock_days"])
    assert f.expected_failures == pytest.approx(rel["expected_failures"])
    # the optimum is the curve's highest point
    assert max(g for _, g in f.goodput_curve) == pytest.approx(f.goodput, rel=1e-3)


def test_scaling_curve(report) -> None:
    counts = [p.n_gpus for p in report.scaling]
    assert counts == [256, 1024, 4096]
    asked = report.scaling[1]
    assert asked.train_days == report.answer.train_days  # the headline's own numbers
    assert max(p.scaling_efficiency for p in report.scaling) == 1.0
    # at 4096 GPUs exposed communication eats into the speed-up
    assert report.scaling[2].scaling_efficiency < 0.9
    assert report.scaling[2].train_days < asked.train_days


def test_default_scaling_counts_are_whole_nodes() -> None:
    q = question(scaling_gpus=(), cluster=Cluster(hardware=get_hardware("h100-sxm"), n_gpus=24))
    # 24 x 2**k: 1.5 is not whole GPUs, 3 and 6 fit in one node of 8, 12 is not whole nodes
    assert scaling_counts(q) == (3, 6, 24, 48, 96, 192, 384)


def test_assumptions_list_the_models_rules_and_the_callers(report) -> None:
    text = "\n".join(report.assumptions)
    assert len(overlap_rules()) >= 4
    for rule in overlap_rules():
        assert rule in text
    for assumption in RELIABILITY_ASSUMPTIONS:  # the reliability model's, as the command lists
        assert assumption in report.assumptions
    assert "a default the caller filled in" in text
    assert "in training, less each GEMM's tile and wave quantization" in text


def test_json_is_strict(report) -> None:
    doc = as_json(report)
    json.dumps(doc, allow_nan=False)
    assert doc["answer"]["plan"] == report.answer.plan


def test_tokens_must_be_positive() -> None:
    with pytest.raises(SpecError, match="tokens"):
        plan_report(question(tokens=0.0))


def test_a_scaling_count_without_a_layout_is_listed_not_fatal() -> None:
    r = plan_report(question(scaling_gpus=(1024, 3000)))
    assert [p.n_gpus for p in r.scaling] == [1024]
    assert r.scaling_skipped and r.scaling_skipped[0].startswith("3000 GPUs")


def test_no_torch_no_matplotlib() -> None:
    code = (
        "import sys, trainbudget.report.plan_data, trainbudget.train.spec.run_files\n"
        "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_question_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        question().tokens = 1.0  # type: ignore[misc]


def test_the_framework_reaches_the_search_and_the_assumptions(report) -> None:
    from trainbudget.core.spec.frameworks import get_framework

    assert report.framework == "generic"
    assert any(a.startswith("framework: generic (none named; ") for a in report.assumptions)
    small = {"cluster": Cluster(hardware=get_hardware("h100-sxm"), n_gpus=64)}
    small["scaling_gpus"] = (64,)
    mega = plan_report(question(framework=get_framework("megatron"), **small))
    assert mega.framework == "megatron"
    assert any(a.startswith("framework: megatron (") for a in mega.assumptions)
    # the same question as `trainbudget plan` on 64 GPUs (PLAN_ARGS's last --gpus wins)
    best = cli_json("plan", *PLAN_ARGS, "--gpus", "64", "--framework", "megatron")["plans"][0]
    assert mega.answer.plan == best["plan"]["description"]
    assert mega.answer.step_seconds == best["step_seconds"]
