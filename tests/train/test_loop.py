"""The training loop end to end on a tiny model (1 layer, d_model 32, byte vocabulary, 4 x 32
tokens per micro-batch, CPU): what metrics.jsonl and summary.json hold, that the loss falls,
exact resumption, gradient accumulation (the same windows as one bigger batch), precisions
and optimizers, the LR schedule in the log, probes, and the `trainbudget train` command.

The embedded corpus is prepared once per module (byte tokenizer) and every run reads it."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from clirun import cli  # noqa: E402  (after the importorskip above)
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.spec.config import TrainConfig  # noqa: E402

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=32")
TINY_FLAGS = [arg for o in TINY for arg in ("--set", o)]
PHASES = {"data", "forward", "backward", "optimizer"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prepared"
    prepare(None, path, tokenizer="byte")
    return path


def run(data_dir, out, **kw) -> tuple[dict, list[dict]]:
    """A tiny CPU run; returns (summary, metrics.jsonl records)."""
    settings = {
        "model": "gpt2",
        "overrides": TINY,
        "data": str(data_dir),
        "out": str(out),
        "steps": 10,
        "micro_batch": 4,
        "seq_len": 32,
        "device": "cpu",
        "log_interval": 1,
        "eval_batches": 1,
        "tensorboard": False,
        **kw,
    }
    settings.setdefault("eval_interval", settings["steps"])
    summary = train(TrainConfig(**settings))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return summary, [r for r in map(json.loads, lines) if "event" not in r]  # no checkpoints


def newest(out: Path) -> Path:
    """The run's newest checkpoint folder."""
    return list_checkpoints(out / "checkpoints")[0]


def losses(records: list[dict]) -> list[float]:
    return [r["loss"] for r in records]


def test_metrics_and_summary(data_dir, tmp_path):
    summary, records = run(data_dir, tmp_path / "run", steps=20, log_interval=5)
    assert [r["step"] for r in records] == [5, 10, 15, 20]  # one object per logged step
    for r in records:
        assert math.isfinite(r["loss"]) and r["loss"] > 0
        assert r["lr"] > 0
        assert math.isfinite(r["grad_norm"]) and r["grad_norm"] >= 0
        assert r["tokens_per_second"] > 0
        assert r["tokens_per_second"] == pytest.approx(4 * 32 / r["step_seconds"])
        assert r["mfu"] is None and r["hfu"] is None  # no catalog peak for a CPU
        assert r["memory_bytes"]["predicted_peak"] > 0
        assert r["memory_bytes"]["measured_peak"] is None  # allocator statistics need CUDA
        assert set(r["phases_seconds"]) == PHASES
        assert all(v >= 0 for v in r["phases_seconds"].values())
        assert sum(r["phases_seconds"].values()) <= r["step_seconds"] * 1.01
    assert "eval" not in records[0]  # eval_interval = steps: only at the end
    assert records[-1]["eval"]["val_loss"] > 0
    assert set(records[-1]["eval"]["per_source"]) == {"python-docs"}

    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary
    assert summary["steps"] == 20 and summary["tokens_per_step"] == 4 * 32
    assert summary["plan"] == "dp1 tp1 pp1 zero0 mb4x1"  # what the predictions are for
    assert summary["loss_first_logged"] == records[0]["loss"]
    assert summary["loss_final"] == records[-1]["loss"]
    assert 0 < summary["unigram_entropy_nats"] < math.log(257)
    assert summary["step_seconds"]["measured_median"] > 0
    assert summary["tokens_per_second"] == pytest.approx(
        4 * 32 / summary["step_seconds"]["measured_median"]
    )
    assert summary["memory_bytes"]["predicted_peak"] == records[0]["memory_bytes"]["predicted_peak"]
    assert summary["mfu"] == {"measured": None}
    assert summary["notes"] and all(isinstance(n, str) for n in summary["notes"])
    assert any("MFU" in n for n in summary["notes"])
    assert summary["perplexity_final"] == pytest.approx(math.exp(summary["loss_final"]))
    assert json.loads((tmp_path / "run" / "config.json").read_text())["steps"] == 20
    assert (newest(tmp_path / "run") / "state.json").exists()


def test_loss_decreases(data_dir, tmp_path):
    pytest.importorskip("tensorboard")
    summary, records = run(
        data_dir, tmp_path / "run", steps=40, lr=3e-3, log_interval=10, tensorboard=True
    )
    assert [r["step"] for r in records] == [10, 20, 30, 40]
    assert summary["loss_final"] < summary["loss_first_logged"] - 0.5
    assert summary["loss_final"] < math.log(257)  # better than guessing uniformly
    assert records[-1]["loss"] < records[1]["loss"]
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_continues_exactly(data_dir, tmp_path):
    # a constant rate without warmup: the schedule of a 10-step run then equals the first 10
    # steps of a 20-step one (with the defaults it does not: warmup = steps // 10 and the
    # cosine spans cfg.steps, so a 10-step run decays to the floor by step 10)
    same = {"schedule": "constant", "warmup_steps": 0}
    _, whole = run(data_dir, tmp_path / "whole", steps=20, **same)
    _, part1 = run(data_dir, tmp_path / "resumed", steps=10, **same)
    summary, records = run(data_dir, tmp_path / "resumed", steps=20, resume=True, **same)
    part2 = records[len(part1) :]  # metrics.jsonl is appended to
    assert records[: len(part1)] == part1
    assert [r["step"] for r in part2] == list(range(11, 21))  # continues from step 10
    assert summary["loss_first_logged"] == part2[0]["loss"]
    np.testing.assert_allclose(losses(part1), losses(whole[:10]), rtol=0, atol=1e-6)
    np.testing.assert_allclose(losses(part2), losses(whole[10:]), rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        [r["grad_norm"] for r in part2], [r["grad_norm"] for r in whole[10:]], rtol=1e-5
    )
    state = json.loads((newest(tmp_path / "resumed") / "state.json").read_text())
    assert state["step"] == 20 and state["loader"]["step"] == 20


def test_resume_follows_the_new_runs_schedule(data_dir, tmp_path):
    # the default cosine schedule: after resuming, the rate is the 20-step run's
    _, whole = run(data_dir, tmp_path / "whole", steps=20, warmup_steps=2)
    run(data_dir, tmp_path / "resumed", steps=10, warmup_steps=2)
    _, records = run(data_dir, tmp_path / "resumed", steps=20, warmup_steps=2, resume=True)
    assert [r["lr"] for r in records[10:]] == [r["lr"] for r in whole[10:]]


def test_grad_accumulation_equals_a_bigger_batch(data_dir, tmp_path):
    # the loader draws one global batch of micro_batch x grad_accum windows per optimizer step
    # (data.TrainBatches), so 4 x 2 sees row for row the windows of 8 x 1; the loss is divided
    # by grad_accum, so the two trajectories agree up to summation order
    s_acc, acc = run(data_dir, tmp_path / "acc", micro_batch=4, grad_accum=2)
    s_big, big = run(data_dir, tmp_path / "big", micro_batch=8, grad_accum=1)
    assert s_acc["tokens_per_step"] == s_big["tokens_per_step"] == 8 * 32
    assert len(acc) == len(big) == 10
    np.testing.assert_allclose(losses(acc), losses(big), rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        [r["grad_norm"] for r in acc], [r["grad_norm"] for r in big], rtol=1e-4
    )
    assert losses(acc)[0] == pytest.approx(losses(big)[0], abs=1e-6)  # same rows, same model
    state = json.loads((newest(tmp_path / "acc") / "state.json").read_text())
    assert state["loader"]["step"] == 10  # optimizer steps, whatever the accumulation


@pytest.mark.parametrize(
    ("precision", "optimizer"),
    [
        ("bf16-mixed", "adamw"),
        ("bf16", "adamw"),
        ("fp32", "sgd"),
        ("fp32", "momentum"),
        ("fp32", "adagrad"),
        ("bf16-mixed", "momentum"),
    ],
)
def test_precisions_and_optimizers_train(data_dir, tmp_path, precision, optimizer):
    summary, records = run(
        data_dir,
        tmp_path / "run",
        steps=10,
        precision=precision,
        optimizer=optimizer,
        lr=1e-2,
    )
    assert len(records) == 10
    assert all(math.isfinite(x) for x in losses(records))
    assert math.isfinite(summary["loss_final"])
    assert summary["loss_final"] < summary["loss_first_logged"]
    weights = torch.load(newest(tmp_path / "run") / "model.pt", weights_only=True)
    expected = torch.float32 if precision == "fp32" else torch.bfloat16
    assert {t.dtype for t in weights.values()} == {expected}
    if precision == "bf16-mixed":  # the fp32 master copy is in the optimizer's checkpoint
        state = torch.load(newest(tmp_path / "run") / "optimizer.pt", weights_only=True)
        assert {m.dtype for m in state["masters"]} == {torch.float32}


def test_lr_follows_warmup_then_cosine(data_dir, tmp_path):
    lr0, floor, warmup, total = 1e-2, 0.1, 5, 20
    _, records = run(
        data_dir,
        tmp_path / "run",
        steps=total,
        lr=lr0,
        min_lr_ratio=floor,
        warmup_steps=warmup,
        schedule="cosine",
    )
    lrs = [r["lr"] for r in records]
    for i, lr in enumerate(lrs):  # record i is optimizer step i (0-based)
        if i < warmup:
            expected = lr0 * (i + 1) / (warmup + 1)
        else:
            q = (i - warmup) / (total - warmup)
            expected = lr0 * floor + lr0 * (1 - floor) * 0.5 * (1 + math.cos(math.pi * q))
        assert lr == pytest.approx(expected, rel=1e-12), i
    assert all(a < b for a, b in itertools.pairwise(lrs[: warmup + 1]))
    assert lrs[warmup] == pytest.approx(lr0)  # the peak at the end of warmup
    assert all(a > b for a, b in itertools.pairwise(lrs[warmup:]))
    assert lr0 * floor < lrs[-1] < lrs[warmup]


def test_probes(data_dir, tmp_path):
    probes = tmp_path / "probes.tsv"
    probes.write_text("# prompt<TAB>target\nimport\t os\n\ndef main(\t):\n", encoding="utf-8")
    _, records = run(data_dir, tmp_path / "run", steps=10, eval_interval=5, probes=str(probes))
    with_probes = [r for r in records if "probes" in r]
    assert [r["step"] for r in with_probes] == [5, 10]  # on the eval steps
    for r in with_probes:
        assert set(r["probes"]) == {"import-> os", "def main(->):"}
        assert all(0 < p <= 1 for p in r["probes"].values())


# ---- the command ------------------------------------------------------------------------------


def cli_train(data_dir, out, *extra: str):
    return cli(
        "train",
        "--data",
        str(data_dir),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--seq-len",
        "32",
        "--micro-batch",
        "4",
        "--eval-batches",
        "1",
        "--no-tensorboard",
        *TINY_FLAGS,
        *extra,
    )


def test_cli_train_prints_the_summary(data_dir, tmp_path):
    code, out, err = cli_train(data_dir, tmp_path / "run", "--steps", "4")
    assert code == 0, err
    assert "4 steps ->" in out and "tokens/s" in out and "peak memory" in out
    assert "predictions for the layout that ran: dp1 tp1 pp1 zero0 mb" in out
    assert "step 4/4" in err  # the progress line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    code, out, err = cli_train(data_dir, tmp_path / "run2", "--steps", "4", "--json")
    assert code == 0, err
    assert json.loads(out).keys() == summary.keys()


def test_cli_train_one_step(data_dir, tmp_path):
    code, _, err = cli_train(data_dir, tmp_path / "run", "--steps", "1")
    assert code == 0, err


def test_cli_resume_a_finished_run(data_dir, tmp_path):
    code, _, err = cli_train(data_dir, tmp_path / "run", "--steps", "3")
    assert code == 0, err
    code, _, err = cli_train(data_dir, tmp_path / "run", "--steps", "3", "--resume")
    assert code in (0, 2), err
