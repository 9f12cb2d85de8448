"""Numerical faults in a real run (issue 6, must-show 5): an injected NaN loss or gradient never
reaches the weights and is counted; an injected loss spike rolls the run back to its last
checkpoint, skips the batches since then, and the run finishes; a NaN inside the spike window
does not stall later steps; retries are bounded. In-process runs of a 1-layer model (~2 s each).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.checkpointing.recovery import TrainingHalted  # noqa: E402
from trainbudget.train.launch.faults import Faults  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.spec.config_files import make_config  # noqa: E402

pytestmark = pytest.mark.torch

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


def config(out: Path, data: Path, **changes):
    values = {
        "overrides": TINY,
        "data": str(data),
        "out": str(out),
        "steps": 16,
        "micro_batch": 4,
        "seq_len": 32,
        "lr": 1e-3,
        "schedule": "constant",
        "warmup_steps": 0,
        "log_interval": 1,
        "eval_interval": 100,
        "tensorboard": False,
        "device": "cpu",
        "seed": 3,
        "checkpoint_every": 1,
        "keep": 40,
        "spike_window": 8,
    }
    return make_config({}, {**values, **changes})


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def last_steps(out: Path) -> dict[int, dict]:
    return {r["step"]: r for r in records(out) if "event" not in r}


def state_at(out: Path, step: int) -> tuple[dict, dict]:
    path = out / "checkpoints" / f"step-{step:08d}"
    model = torch.load(path / "model.pt", weights_only=True)
    optimizer = torch.load(path / "optimizer.pt", weights_only=True)
    return model, optimizer


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_nan_loss_and_nan_gradient_leave_the_weights_untouched(tmp_path, data):
    out = tmp_path / "run"
    summary = train(config(out, data), faults=Faults(nan_loss_batches=(4,), nan_grad_batches=(7,)))
    for bad in (4, 7):
        before, after = state_at(out, bad - 1), state_at(out, bad)
        assert same(before[0], after[0]), f"step {bad} changed the weights"
        # Adam's moments and its step count too: the optimizer never saw the step
        for index, per_param in before[1]["state"].items():
            for key, value in per_param.items():
                assert torch.equal(value, after[1]["state"][index][key]), (bad, index, key)
        assert not same(state_at(out, bad + 1)[0], after[0])  # the next step trains again
    skipped = [r for r in records(out) if r.get("event") == "skipped_nonfinite"]
    assert [(r["step"], r["detail"]) for r in skipped] == [
        (4, "loss is nan"),
        (7, "gradient norm is nan"),
    ]
    assert summary["reliability"]["skipped_nonfinite"] == 2
    assert all(torch.isfinite(v).all() for v in state_at(out, 16)[0].values())
    assert last_steps(out)[16]["skipped_nonfinite"] == 2


def test_on_nonfinite_halt_stops_the_run(tmp_path, data):
    out = tmp_path / "run"
    with pytest.raises(TrainingHalted, match="step 5: loss is nan"):
        train(config(out, data, on_nonfinite="halt"), faults=Faults(nan_loss_batches=(5,)))
    assert list_checkpoints(out / "checkpoints")[0].name == "step-00000004"


def test_a_loss_spike_rolls_back_skips_its_batches_and_the_run_finishes(tmp_path, data):
    ref = tmp_path / "reference"
    train(config(ref, data, steps=24, checkpoint_every=4))
    out = tmp_path / "run"
    summary = train(
        config(out, data, steps=24, checkpoint_every=4), faults=Faults(spike_batches=(18,))
    )
    (rollback,) = [r for r in records(out) if r.get("event") == "rollback"]
    # checkpoint 16 is the newest; batches 17 (fine) and 18 (the spike) are dropped
    assert rollback["checkpoint"] == "step-00000016"
    assert rollback["skipped_batches"] == [17, 18]
    assert summary["reliability"]["rollbacks"] == 1
    got, want = last_steps(out), last_steps(ref)
    assert sorted(got) == list(range(1, 25))  # every step logged, the run finished
    # after the rollback, step 17 trains on batch 19: the reference's step-19 batch
    assert got[17]["batch_crc32"] == want[19]["batch_crc32"]
    assert got[16]["loss"] == want[16]["loss"]  # identical up to the checkpoint
    assert got[24]["loss"] < got[1]["loss"]


def test_rollback_without_a_checkpoint_drops_the_batch(tmp_path, data):
    out = tmp_path / "run"
    summary = train(config(out, data, checkpoint_every=0), faults=Faults(spike_batches=(12,)))
    (rollback,) = [r for r in records(out) if r.get("event") == "rollback"]
    assert rollback["checkpoint"].startswith("none")
    assert rollback["skipped_batches"] == [12, 12]
    assert summary["reliability"]["rollbacks"] == 1 and max(last_steps(out)) == 16


def test_a_nan_inside_the_spike_window_does_not_stall_later_steps(tmp_path, data):
    out = tmp_path / "run"
    summary = train(config(out, data, steps=30), faults=Faults(nan_loss_batches=(12,)))
    assert summary["reliability"] == {
        **summary["reliability"],
        "skipped_nonfinite": 1,
        "rollbacks": 0,
    }
    logged = last_steps(out)
    assert sorted(logged) == [s for s in range(1, 31) if s != 12]
    assert all(logged[s]["loss"] < logged[1]["loss"] for s in range(13, 31))


def test_rollbacks_are_bounded(tmp_path, data):
    out = tmp_path / "run"
    spikes = tuple(range(12, 40))  # every batch from 12 on is bad
    with pytest.raises(TrainingHalted, match="after 2 rollbacks"):
        train(config(out, data, steps=20, max_rollbacks=2), faults=Faults(spike_batches=spikes))
    assert len([r for r in records(out) if r.get("event") == "rollback"]) == 2


def test_young_daly_checkpoint_interval(tmp_path, data):
    # "auto": one early save measures the write time, then sqrt(2 x write x MTBF) -- hours
    # for one device at 0.27 %/day -- so only the final save follows in a 6-step run
    out = tmp_path / "run"
    summary = train(config(out, data, steps=6, checkpoint_every=0, checkpoint_minutes="auto"))
    saves = [r["step"] for r in records(out) if r.get("event") == "checkpoint"]
    assert saves == [1, 6]
    assert summary["reliability"]["last_checkpoint_seconds"] > 0
