"""`estimate` and `profile` give the same one-GPU peak: estimate's memory is the phase model's
(core.single.peak_memory.training_peak) for every case of the profile matrix
(trainbudget.profile.matrix, the 32 configurations `profile` is held to MemTracker on), and for
the issue's example (GPT-2 with 2 layers, bf16-mixed, micro-batch 4, sequence 512) the two
commands print the same figure."""

from __future__ import annotations

import pytest

from clirun import cli_json
from trainbudget.cli.plan.estimate_cmd import to_json
from trainbudget.core.parallel.fits import rule_for
from trainbudget.core.single.estimate import EstimateRequest, estimate
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.profile.matrix import matrix

CASES = matrix()
# the example ("Numbers you can trust", item 1): 2.04 GB by the old sum of parts
GPT2_2L = ("--model", "gpt2", "--set", "n_layers=2", "--micro-batch", "4", "--seq-len", "512")
GPT2_2L += ("--precision", "bf16-mixed")


def _step(case) -> dict:
    return {
        "precision": case.precision,
        "optimizer": case.optimizer,
        "seq_len": case.seq_len,
        "micro_batch": case.micro_batch,
        "recompute": case.recompute,
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_estimate_json_peak_is_training_peak(case) -> None:
    # profile runs the reference model's SDPA: the same step in estimate is --flash-attention
    req = EstimateRequest(
        model=case.spec, hardware=get_hardware("h100-sxm"), flash_attention=True, **_step(case)
    )
    out = to_json(
        estimate(req), rule_for(None, "generic")
    )  # the default rule: no --memory-headroom
    peak = training_peak(case.spec, **_step(case))
    mem = out["memory_bytes"]
    assert mem["total"] == pytest.approx(peak.total_bytes, rel=1e-9)
    p = peak.peak
    assert out["memory_model"]["peak_phase"] == p.phase
    assert mem["params"] == p.params_bytes and mem["grads"] == p.grads_bytes
    assert mem["optimizer"] == pytest.approx(p.optimizer_bytes, rel=1e-12)
    assert (mem["activations"], mem["temporaries"]) == (p.activations_bytes, p.temporaries_bytes)
    assert any("phase model" in a for a in out["assumptions"])


def test_gpt2_argv_maps_like_profile() -> None:
    est = cli_json("estimate", *GPT2_2L, "--flash-attention")
    eager = cli_json("estimate", *GPT2_2L, "--no-flash-attention")
    phases = est["memory_model"]["phases_bytes"]
    assert est["memory_bytes"]["total"] == max(phases.values())
    assert est["memory_model"]["peak_phase"] == eager["memory_model"]["peak_phase"]
    # with --no-flash-attention each layer also keeps its s x s attention matrix, in bf16:
    # 2 layers x 12 heads x 512^2 x batch 4 x 2 bytes, at the backward-start peak (both runs)
    extra = eager["memory_bytes"]["total"] - est["memory_bytes"]["total"]
    flash_stats = 2 * 12 * 512 * 4 * 4  # the fp32 logsumexp FlashAttention keeps instead
    assert extra == 2 * 12 * 512 * 512 * 4 * 2 - flash_stats


@pytest.mark.torch
def test_estimate_and_profile_print_the_same_peak() -> None:
    pytest.importorskip("torch")
    from trainbudget.core.spec.presets import get_preset
    from trainbudget.profile.report import profile_step

    est = cli_json("estimate", *GPT2_2L, "--flash-attention")
    # the CLI's profile on fake tensors prints the same prediction (no compute, a few seconds)
    prof = cli_json("profile", *GPT2_2L, "--device", "fake-cpu")
    assert est["memory_bytes"]["total"] == pytest.approx(prof["predicted"]["peak"], rel=1e-9)
    assert est["memory_bytes"]["activations"] == prof["predicted"]["activations"]
    # and what a real CPU step measures (MemTracker, the same function `profile --device cpu`
    # calls, without its timing runs), within profile's own tolerance
    spec = get_preset("gpt2").replace(n_layers=2)
    real = profile_step(
        spec, micro_batch=4, seq_len=512, precision="bf16-mixed", optimizer="adamw", device="cpu"
    )
    assert real["measured"]["peak"] == pytest.approx(est["memory_bytes"]["total"], rel=1e-3)
