"""The core's prediction against PyTorch's own measurement of the reference model's training
step (fake tensors, MemTracker, FlopCounterMode), over the 32-case matrix of
trainbudget.profile.matrix. Targets (issue: measure what PyTorch really does): peak within
3 %, parameters / gradients / optimizer state within 1 %, FLOPs per step within 1 %.
docs/validation.md shows the same table (scripts/profile_matrix.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from clirun import cli_json  # noqa: E402
from trainbudget.profile.matrix import matrix  # noqa: E402
from trainbudget.profile.report import profile_step  # noqa: E402

CASES = matrix()


def test_matrix_covers_the_axes():
    assert len(CASES) >= 24
    assert {c.micro_batch for c in CASES} >= {1, 8} and {c.seq_len for c in CASES} >= {128, 2048}
    assert {c.precision for c in CASES} == {"fp32", "bf16-mixed"}
    assert {c.optimizer for c in CASES} == {"adamw", "sgd"}
    assert {c.recompute for c in CASES} == {"none", "full"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_prediction_matches_measurement(case):
    r = profile_step(
        case.spec,
        micro_batch=case.micro_batch,
        seq_len=case.seq_len,
        precision=case.precision,
        optimizer=case.optimizer,
        recompute=case.recompute,
    )
    err = r["error"]
    assert abs(err["peak"]) < 0.03, r
    for key in ("params", "grads", "optimizer", "flops_per_step"):
        assert abs(err[key]) < 0.01, (key, r)


def test_profile_command_json():
    j = cli_json(
        "profile",
        "--model",
        "gpt2",
        "--set",
        "n_layers=1",
        "--micro-batch",
        "2",
        "--seq-len",
        "128",
        "--precision",
        "bf16-mixed",
    )
    assert j["device"] == "fake-cpu"
    for side in ("predicted", "measured"):
        assert set(j[side]) == {
            "params",
            "grads",
            "optimizer",
            "activations",
            "peak",
            "flops_per_step",
        }
    assert abs(j["error"]["peak"]) < 0.03
