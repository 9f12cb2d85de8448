"""`trainbudget.estimate` and `trainbudget.plan` answer as the CLI does: `to_json()` is the
document `--json` prints for the same question (one GPU, the planner on 1,024 GPUs, a given
layout, tokens with a price, a pasted config), and bad input is the CLI's one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.clirun import cli_json, one_line_error

import trainbudget as tb
from trainbudget.core.errors import SpecError

HF = Path(__file__).resolve().parents[1] / "data" / "hf"

QUESTIONS = {
    "one GPU": (
        ("gpt2",),
        {},
        "--model gpt2",
    ),
    "planner on 1,024 GPUs": (
        ("llama-3-70b",),
        {"tokens": "15T", "gpus": 1024, "gpu": "h100-sxm", "seq_len": 8192},
        "--model llama-3-70b --tokens 15T --gpus 1024 --seq-len 8192",
    ),
    "explicit layout": (
        ("llama-3-8b",),
        {"gpus": 16, "tp": 2, "pp": 2, "zero": 1, "global_batch": 64, "recompute": "selective"},
        "--model llama-3-8b --gpus 16 --tp 2 --pp 2 --zero 1 --global-batch 64 "
        "--recompute selective",
    ),
    "tokens and price, explained": (
        ("llama-3-8b",),
        {"tokens": 1e12, "gpus": 64, "price_per_gpu_hour": "$2.5", "explain": True},
        "--model llama-3-8b --tokens 1e12 --gpus 64 --price-per-gpu-hour $2.5 --explain",
    ),
    "6ND at an MFU, with --set": (
        ("gpt2",),
        {"tokens": "300B", "gpus": 8, "mfu": 0.4, "overrides": ["n_layers=24"]},
        "--model gpt2 --tokens 300B --gpus 8 --mfu 0.4 --set n_layers=24",
    ),
    "a compiled step under a layout": (
        ("gpt2",),
        {"gpus": 8, "zero": 1, "compiled": True},
        "--model gpt2 --gpus 8 --zero 1 --compiled",
    ),
    "FP8 weights gathered in FP8 under FSDP": (
        ("llama-3-8b",),
        {"gpus": 16, "zero": 3, "precision": "fp8", "fp8_param_gather": True},
        "--model llama-3-8b --gpus 16 --zero 3 --precision fp8 --fp8-param-gather",
    ),
    "a stated attention kernel and FP8 recipe": (
        ("llama-3-8b",),
        {
            "gpus": 8,
            "zero": 3,
            "precision": "fp8",
            "framework": "torchtitan",
            "attention_kernel": "flash3",
            "fp8_recipe": "torchao-rowwise",
        },
        "--model llama-3-8b --gpus 8 --zero 3 --precision fp8 --framework torchtitan "
        "--attention-kernel flash3 --fp8-recipe torchao-rowwise",
    ),
    "a cluster's own network": (
        ("llama-2-7b",),
        {"gpus": 64, "gpu": "a100-80gb", "dp": 64, "zero": 1, "nic_bandwidth": "50Gb/s"},
        "--model llama-2-7b --gpus 64 --gpu a100-80gb --dp 64 --zero 1 --nic-bandwidth 50Gb/s",
    ),
    "dense:N under a layout": (
        ("dense:70e9",),
        {"gpus": 64, "zero": 3},
        "--model dense:70e9 --gpus 64 --zero 3",
    ),
}


@pytest.mark.parametrize("question", QUESTIONS, ids=list(QUESTIONS))
def test_to_json_is_the_clis_json(question):
    args, kwargs, argv = QUESTIONS[question]
    assert tb.estimate(*args, **kwargs).to_json() == cli_json("estimate", *argv.split())


def test_a_pasted_config_is_the_config_file():
    config = json.loads((HF / "mistral-7b.json").read_text(encoding="utf-8"))
    pasted = tb.estimate({**config, "_name_or_path": "mistral-7b"}, gpus=8, tokens="1T")
    path = str(HF / "mistral-7b.json")
    assert pasted.to_json() == cli_json(
        "estimate", "--model", path, "--gpus", "8", "--tokens", "1T"
    )


def test_plan_is_the_clis_plan_but_for_the_search_time():
    result = tb.plan("llama-3-8b", gpus=64, gpu="h100-sxm", global_batch=512, tokens="15T")
    ours = result.to_json()
    theirs = cli_json(
        "plan", "--model", "llama-3-8b", "--gpus", "64", "--global-batch", "512", "--tokens", "15T"
    )
    assert ours.pop("search_seconds") > 0 and theirs.pop("search_seconds") > 0  # wall clock
    assert ours == theirs
    assert result.best is result.plans[0] and result.best.fits
    assert result.best.plan.describe() == ours["plans"][0]["plan"]["description"]


def test_the_issues_example_reads_the_planned_answer():
    e = tb.estimate("llama-3-70b", tokens="15T", gpus=1024, gpu="h100-sxm", seq_len=8192)
    doc = e.to_json()
    assert e.kind == "planner"
    assert e.time_days == doc["time_days"] and e.gpu_hours == doc["gpu_hours"]
    assert e.plan.describe() == doc["plan"]["description"]
    assert e.memory.peak_bytes == doc["memory_bytes"]["total"]
    assert e.memory.stages_bytes == doc["memory_bytes_per_stage"]
    assert e.step.step_seconds == doc["step_seconds"]
    # the memory bar's parts are the peak's: they add up to it
    assert sum(e.memory.parts_bytes.values()) == pytest.approx(e.memory.peak_bytes, rel=1e-12)
    assert e.memory.fits == doc["fits"] and e.memory.fits is (
        e.memory.peak_bytes <= e.memory.usable_bytes
    )


def test_one_gpu_memory_is_the_one_gpu_figure():
    e = tb.estimate("llama-3-8b", tokens="15T")
    doc = e.to_json()
    assert e.plan is None and e.step is None and e.kind == "one-gpu"
    assert e.memory.peak_bytes == doc["memory_bytes"]["total"]
    assert sum(e.memory.parts_bytes.values()) == pytest.approx(e.memory.peak_bytes, rel=1e-12)
    assert e.memory.fits is doc["fits_in_gpu_memory"]
    assert e.mfu == doc["mfu"] and e.time_days == doc["time_days"]


def test_results_are_frozen_and_to_json_is_a_fresh_copy():
    e = tb.estimate("gpt2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.kind = "planner"
    doc = e.to_json()
    doc["params"] = 0
    assert e.to_json()["params"] == e.single.n_params
    assert json.loads(e.json_text()) == e.to_json()  # the text the CLI prints


@pytest.mark.parametrize(
    ("kwargs", "argv"),
    [
        ({"gpus": 0}, ["--gpus", "0"]),
        ({"tokens": "15Q"}, ["--tokens", "15Q"]),
        ({"gpu": "h100"}, ["--gpu", "h100"]),
        ({"gpus": 8, "tp": 3}, ["--gpus", "8", "--tp", "3"]),
        ({"price_per_gpu_hour": 2}, ["--price-per-gpu-hour", "2"]),
        ({"gpus": 8, "micro_batch": 2}, ["--gpus", "8", "--micro-batch", "2"]),
        # options naming one of a few values: the core's line, not argparse's "invalid choice"
        ({"recompute": "ful"}, ["--recompute", "ful"]),
        ({"gpus": 8, "recompute": "ful"}, ["--gpus", "8", "--recompute", "ful"]),
        ({"optimizer": "adamw8"}, ["--optimizer", "adamw8"]),
        ({"flops_formula": "6N"}, ["--flops-formula", "6N"]),
        (
            {"gpus": 8, "tp": 2, "schedule": "1F1B"},
            ["--gpus", "8", "--tp", "2", "--schedule", "1F1B"],
        ),
        (
            {"gpus": 8, "zero": 3, "offload_optimizer": "disk"},
            ["--gpus", "8", "--zero", "3", "--offload-optimizer", "disk"],
        ),
        (
            {"gpus": 8, "zero": 3, "offload_params": "ssd"},
            ["--gpus", "8", "--zero", "3", "--offload-params", "ssd"],
        ),
    ],
)
def test_bad_input_is_the_clis_line(kwargs, argv):
    with pytest.raises(SpecError) as err:
        tb.estimate("llama-3-8b", **kwargs)
    assert one_line_error(("estimate", "--model", "llama-3-8b", *argv)) == (
        f"trainbudget estimate: error: {err.value}"
    )


def test_a_bad_model_and_a_bad_plan_question_are_the_clis_lines():
    with pytest.raises(SpecError) as err:
        tb.estimate("llama-3-8bb")
    assert one_line_error(("estimate", "--model", "llama-3-8bb")) == (
        f"trainbudget estimate: error: {err.value}"
    )
    with pytest.raises(SpecError) as err:
        tb.plan("dense:70e9", gpus=8)
    assert one_line_error(("plan", "--model", "dense:70e9", "--gpus", "8")) == (
        f"trainbudget plan: error: {err.value}"
    )
    for kwargs, argv in (
        ({"recompute": "ful"}, ["--recompute", "ful"]),
        ({"optimizer": "adamw8"}, ["--optimizer", "adamw8"]),
    ):
        with pytest.raises(SpecError, match=r"^(recompute|optimizer) = ") as err:
            tb.plan("llama-3-8b", gpus=8, **kwargs)
        assert one_line_error(("plan", "--model", "llama-3-8b", "--gpus", "8", *argv)) == (
            f"trainbudget plan: error: {err.value}"
        )
    with pytest.raises(SpecError, match=r"^config:model_type: missing"):
        tb.estimate({"hidden_size": 4096})


def test_a_real_process_prints_the_same_document():
    """The installed command's process (its own start-up settings: no gc, malloc thresholds)
    prints what the API returns."""
    import subprocess
    import sys

    argv = [
        "--model",
        "llama-3-70b",
        "--tokens",
        "15T",
        "--gpus",
        "1024",
        "--seq-len",
        "8192",
        "--json",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "trainbudget", "estimate", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    e = tb.estimate("llama-3-70b", tokens="15T", gpus=1024, seq_len=8192)
    assert json.loads(out) == e.to_json()


def test_an_accounted_pipeline_split_is_in_the_json_and_the_clis():
    # issue 23 item 4: 126 layers + the embedding and loss slots on pp8 x vpp8
    kw = dict(gpus=128, gpu="h200", tp=8, pp=8, vpp=8, global_batch=32, seq_len=8192)
    kw |= dict(zero=1, sp=True, recompute="full")
    e = tb.estimate("llama-3-405b", **kw, account_for_embedding=True, account_for_loss=True)
    plan = e.to_json()["plan"]
    assert plan["embedding_in_pp_split"] and plan["loss_in_pp_split"]
    argv = "--model llama-3-405b --gpus 128 --gpu h200 --tp 8 --pp 8 --vpp 8 --global-batch 32"
    argv += " --seq-len 8192 --zero 1 --sp --recompute full"
    assert e.to_json() == cli_json(
        "estimate", *argv.split(), "--account-for-embedding", "--account-for-loss"
    )
    plain = tb.estimate("llama-3-70b", gpus=8, tp=8, global_batch=8).to_json()["plan"]
    assert not plain["embedding_in_pp_split"] and not plain["loss_in_pp_split"]
