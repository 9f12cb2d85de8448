"""estimate and plan show how sure their step time is and which unstated assumption matters."""

from __future__ import annotations

import pytest

from clirun import cli, cli_json

EST = ("estimate", "--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-80gb", "--tp", "2")
PLAN = ("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "16", "--no-cp", "--top", "2")


def test_estimate_json_carries_the_range_around_the_step():
    j = cli_json(*EST, "--global-batch", "16", "--tokens", "1e9")
    r = j["step_seconds_range"]
    assert r["low"] < r["high"] and r["runs"] >= 5 and r["basis"]
    assert r["low"] == pytest.approx(j["step_seconds"] * r["low_factor"])
    days = j["time_days_range"]
    assert days["low"] == pytest.approx(j["time_days"] * r["low_factor"])
    assert days["high"] == pytest.approx(j["time_days"] * r["high_factor"])
    assert j["time_seconds_range"]["high"] == pytest.approx(days["high"] * 86400)


def test_an_unstated_recompute_is_evaluated_and_a_stated_one_is_not():
    unstated = cli_json(*EST, "--global-batch", "16")["sensitivity"]
    recompute = [e for e in unstated if e["assumption"] == "recompute"]
    assert [(e["assumed"], e["alternative"]) for e in recompute] == [
        ("none", "selective"),
        ("none", "full"),
    ]
    full = recompute[-1]
    assert full["memory_change"] < 0 < full["time_change"]  # recomputing trades time for memory
    assert set(full) >= {"step_seconds", "memory_bytes", "time_change", "memory_change"}
    stated = cli_json(*EST, "--global-batch", "16", "--recompute", "none")["sensitivity"]
    assert not [e for e in stated if e["assumption"] == "recompute"]


def test_micro_batch_alternatives_keep_the_global_batch():
    sens = cli_json(*EST, "--global-batch", "16", "--micro-batch", "2", "--recompute", "full")
    assert {e["assumption"] for e in sens["sensitivity"]} == {"flash_attention", "framework"}
    unstated = cli_json(*EST, "--global-batch", "16", "--recompute", "full")["sensitivity"]
    mb = [e for e in unstated if e["assumption"] == "micro_batch"]
    assert [(e["assumed"], e["alternative"]) for e in mb] == [("1", "2")]
    base = cli_json(*EST, "--global-batch", "16", "--recompute", "full", "--micro-batch", "2")
    assert mb[0]["step_seconds"] == pytest.approx(base["step_seconds"])


def test_every_assumption_stated_leaves_nothing_to_vary():
    j = cli_json(
        *EST,
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--flash-attention",
        "--framework",
        "megatron",
    )
    assert j["sensitivity"] == []


def test_estimate_text_prints_the_range_and_the_leading_assumption():
    code, out, err = cli(*EST, "--global-batch", "16", "--tokens", "1e9")
    assert code == 0, err
    assert "range        " in out and "similar published runs" in out
    assert "s per step (10th-90th percentile of the model's error on" in out
    assert "assumption   " in out and "was not given" in out
    assert "days (" in out  # the plan time with its range


def test_estimate_without_a_layout_has_no_range():
    j = cli_json("estimate", "--model", "gpt2", "--tokens", "1e9")
    assert "step_seconds_range" not in j and "sensitivity" not in j


def test_plan_json_gives_the_best_plan_its_range():
    j = cli_json(*PLAN, "--tokens", "1e9")
    best, second = j["plans"]
    assert best["step_seconds_range"]["low"] < best["step_seconds"]
    assert best["time_days_range"]["low"] < best["time_days"] < best["time_days_range"]["high"]
    assert "step_seconds_range" not in second
    code, out, err = cli(*PLAN)
    assert code == 0, err
    assert "range        " in out and "similar published runs" in out
