"""The fits rule the API and the CLI answer with: the device rule by default, the flat rule
with a memory headroom, the same JSON either way (core.parallel.fits)."""

from __future__ import annotations

import pytest
from tests.clirun import cli_json

import trainbudget as tb
from trainbudget.core.parallel.fits import outside_allocator_bytes, rule_for
from trainbudget.core.units import GiB

LAYOUT = {"gpus": 8, "gpu": "h100-sxm", "zero": 3}
ARGV = ("estimate", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-sxm", "--zero", "3")


def test_the_default_is_the_device_rule_against_what_cuda_gives() -> None:
    doc = tb.estimate("llama-3-8b", **LAYOUT).to_json()
    assert doc == cli_json(*ARGV)
    assert doc["memory_headroom"] is None
    assert doc["gpu_memory_bytes"] == 80e9  # the datasheet's "80 GB", the nominal size
    assert doc["device_memory_bytes"] == pytest.approx(79.11 * GiB)  # vllm-project/vllm#27508
    # dp8 holds one NCCL communicator; the margin is the generic row's stored median
    margin = rule_for(None, "generic").error_margin
    limit = doc["memory_limit_bytes"]
    assert (limit + outside_allocator_bytes(1)) * margin == pytest.approx(79.11 * GiB)
    assert doc["fits"] == (doc["memory_bytes"]["total"] <= limit)


def test_a_memory_headroom_sets_the_flat_rule_in_the_api_and_the_cli() -> None:
    doc = tb.estimate("llama-3-8b", memory_headroom=0.5, **LAYOUT).to_json()
    assert doc == cli_json(*ARGV, "--memory-headroom", "0.5")
    assert doc["memory_headroom"] == 0.5
    assert doc["fits_rule"] == "allocated peak at most 50 % of the device's memory"
    assert doc["memory_limit_bytes"] == pytest.approx(0.5 * doc["device_memory_bytes"])
    assert doc["fits"] is False  # a 77 GB peak over 42.5 GB


def test_the_planner_honours_the_headroom_too() -> None:
    loose = tb.plan("llama-3-8b", gpus=8, top=2).to_json()
    tight = tb.plan("llama-3-8b", gpus=8, top=2, memory_headroom=0.5).to_json()
    assert tight["fitting"] < loose["fitting"]
    for p in tight["plans"]:
        assert p["memory_bytes"]["total"] <= 0.5 * p["device_memory_bytes"]
