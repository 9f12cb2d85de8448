"""Per-source training loss (train.observe.source_loss): the sums by hand, the log line's rule, and
runs on a two-source data set -- each logged step holds each source's loss and tokens, their
token-weighted mean is the step's loss, and two ranks report what one process does."""

from __future__ import annotations

import contextlib
import io
import json
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.observe.source_loss import SourceLoss, log_line_part  # noqa: E402
from trainbudget.train.spec.config import TrainConfig  # noqa: E402
from trainrun import free_port, ok, run_env  # noqa: E402

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=32")
MEAN_RTOL = 1e-5
"""The step's loss is a sum of fp32 token losses; the sources' sums are fp64 rounded to fp32
for the all-reduce: they agree to a few fp32 ulps (~1e-7), far inside this."""
RANKS_RTOL = 1e-4
"""Two ranks against one process: the same windows, other summation orders (as
test_distributed's RTOL)."""


def test_sums_per_source_over_micro_batches() -> None:
    acc = SourceLoss(["a", "b", "c"], torch.device("cpu"))
    acc.add(torch.tensor([[1.0, 3.0], [2.0, 2.0]]), torch.tensor([0, 1]))  # a: 2, b: 2
    acc.add(torch.tensor([[5.0, 7.0], [0.0, 4.0]]), torch.tensor([0, 0]))  # a: 6, 2
    fields = acc.record(acc.packet().tolist())
    # a: (1 + 3 + 5 + 7 + 0 + 4) / 6 tokens; b: (2 + 2) / 2; c drew nothing: left out
    assert fields["train_loss_by_source"] == {"a": 20 / 6, "b": 2.0}
    assert fields["train_tokens_by_source"] == {"a": 6, "b": 2}


def test_two_ranks_packets_add_up() -> None:
    # what the all-reduce does: the ranks' packets summed element by element
    one, two = (
        SourceLoss(["a", "b"], torch.device("cpu")),
        SourceLoss(["a", "b"], torch.device("cpu")),
    )
    one.add(torch.tensor([[1.0, 1.0]]), torch.tensor([0]))
    two.add(torch.tensor([[3.0, 3.0]]), torch.tensor([0]))
    fields = one.record((one.packet() + two.packet()).tolist())
    assert fields["train_loss_by_source"] == {"a": 2.0}
    assert fields["train_tokens_by_source"] == {"a": 4}


def test_the_log_line_shows_up_to_four_sources_else_the_worst() -> None:
    assert log_line_part({"only": 2.0}) == ""  # one source: its loss is the loss
    assert log_line_part({"web": 2.5, "code": 1.25}) == "  (web 2.500, code 1.250)"
    five = {f"s{i}": float(i) for i in range(5)}
    assert log_line_part(five) == "  (worst of 5 sources: s4 4.000)"


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory) -> Path:
    """'rhyme': one sentence over and over (learned fast); 'noise': uniform random letters
    (its loss cannot go below ln 28 = 3.33 nats); weights 1 : 1."""
    root = tmp_path_factory.mktemp("two-sources")
    rng = random.Random(0)
    noise = "".join(rng.choices(string.ascii_lowercase + " \n", k=8000))
    (root / "noise.txt").write_text(noise, encoding="utf-8")
    (root / "rhyme.txt").write_text("the cat sat on the mat.\n" * 400, encoding="utf-8")
    sources = [f"rhyme={root / 'rhyme.txt'}:1", f"noise={root / 'noise.txt'}:1"]
    with contextlib.redirect_stdout(io.StringIO()):
        prepare(sources, root / "data", tokenizer="byte")
    return root / "data"


def _records(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r]


def test_a_run_logs_each_sources_loss(two_sources, tmp_path, capsys) -> None:
    cfg = TrainConfig(
        model="gpt2",
        overrides=TINY,
        data=str(two_sources),
        out=str(tmp_path / "run"),
        steps=12,
        micro_batch=4,
        grad_accum=2,  # summed over the micro-batches
        seq_len=32,
        device="cpu",
        log_interval=4,
        eval_interval=12,
        eval_batches=1,
        tensorboard=False,
    )
    train(cfg)
    records = _records(tmp_path / "run")
    assert [r["step"] for r in records] == [4, 8, 12]
    for r in records:
        losses, tokens = r["train_loss_by_source"], r["train_tokens_by_source"]
        assert set(losses) == set(tokens) <= {"rhyme", "noise"}
        assert sum(tokens.values()) == 2 * 4 * 32  # the step's tokens: 2 micro-batches of 4 x 32
        mean = sum(losses[s] * tokens[s] for s in losses) / sum(tokens.values())
        assert mean == pytest.approx(r["loss"], rel=MEAN_RTOL)
    last = records[-1]["train_loss_by_source"]
    assert last["rhyme"] < last["noise"] - 0.3  # the repeated sentence is learned faster
    assert "rhyme " in capsys.readouterr().err  # on the log line: two sources


@pytest.mark.slow
def test_two_ranks_report_the_single_process_per_source_loss(two_sources, tmp_path) -> None:
    # the same global batch of 8 rows per step (TrainBatches): one process with 8 rows, two
    # ranks with 4 each; the per-source sums reach rank 0 through the step's all-reduce
    got = {}
    for nproc, micro in ((1, "8"), (2, "4")):
        out = tmp_path / f"n{nproc}"
        cmd = ["-m", "trainbudget", "train", *(a for o in TINY for a in ("--set", o))]
        cmd += ["--data", str(two_sources), "--out", str(out), "--steps", "4"]
        cmd += ["--micro-batch", micro, "--seq-len", "32", "--log-interval", "2"]
        cmd += ["--eval-interval", "4", "--eval-batches", "1", "--device", "cpu"]
        if nproc > 1:
            launch = ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
            cmd = [*launch, "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *cmd]
        ok(
            subprocess.run(
                [sys.executable, *cmd],
                env=run_env(None),
                capture_output=True,
                text=True,
                timeout=240,
            )
        )
        got[nproc] = _records(out)
    for one, two in zip(got[1], got[2], strict=True):
        assert two["train_tokens_by_source"] == one["train_tokens_by_source"]
        for source, loss in one["train_loss_by_source"].items():
            assert two["train_loss_by_source"][source] == pytest.approx(loss, rel=RANKS_RTOL)
