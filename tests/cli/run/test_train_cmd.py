"""Issue 13, points 6, 7 and 10, on the real `trainbudget train` command: `--set` changes the
model the run would otherwise train (it used to swap in full-width GPT-2), a run that cannot
fit in memory is refused before its model is built, and the command speaks from its start.

The runs are tiny (one or three steps of 2 x 32 tokens on the 1M-parameter default or smaller)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from clirun import cli  # noqa: E402  (after the importorskip above)
from trainbudget.core.units import GB  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.observe import memory_check  # noqa: E402
from trainbudget.train.observe.memory_check import Available  # noqa: E402

# a short, cheap run; the tests add the model and the step count
QUICK = (
    *("--micro-batch", "2", "--seq-len", "32", "--device", "cpu"),
    *("--eval-batches", "1", "--checkpoint-every", "0", "--no-tensorboard"),
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """The embedded corpus, byte tokenizer (what a run without --data prepares), once."""
    path = tmp_path_factory.mktemp("data") / "prepared"
    prepare(None, path, tokenizer="byte")
    return str(path)


def _spec_of_run(out: Path) -> dict:
    """The model the run trained, as its last checkpoint recorded it."""
    (state,) = out.glob("checkpoints/*/state.json")
    return json.loads(state.read_text())["spec"]


# ---- point 6: --set changes the default model, it does not swap it ------------------------


def test_train_set_overrides_default_model(tmp_path, data):
    out = tmp_path / "run"
    argv = ("--set", "n_layers=2", "--steps", "1", "--out", str(out), "--data", data)
    code, _, err = cli("train", *argv, *QUICK)
    assert code == 0, err
    spec = _spec_of_run(out)
    # the default's width and its byte vocabulary (the data's 257 tokens), with 2 layers;
    # before the fix: d_model 768 and GPT-2's 50257-token vocabulary
    assert (spec["n_layers"], spec["d_model"], spec["n_heads"], spec["d_ff"]) == (2, 128, 4, 512)
    assert spec["vocab_size"] == 257


def test_train_set_keeps_the_named_model_and_its_vocabulary(tmp_path):
    from trainbudget.cli.main import build_parser
    from trainbudget.cli.run.train_cmd import config_and_given
    from trainbudget.train.spec.preflight import preflight

    args = build_parser().parse_args(["train", "--model", "gpt2", "--set", "n_layers=2"])
    pre = preflight(config_and_given(args)[0])
    # --model's own architecture with one field changed: GPT-2's width and vocabulary
    assert (pre.spec.n_layers, pre.spec.d_model, pre.spec.vocab_size) == (2, 768, 50257)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--set", "n_heads=3"], ["n_heads = 3", "must divide d_model (128)", "128 % 3 = 2"]),
        (["--set", "n_layer=2"], ["n_layer", "did you mean 'n_layers'?"]),
        (["--set", "n_layers=two"], ["n_layers = 'two'", "whole number"]),
        (["--set", "bias=maybe"], ["bias = 'maybe'", "true or false"]),
        (["--set", "n_layers"], ["--set = 'n_layers'", "field=value"]),
        (["--set", "mlp=relu"], ["mlp = 'relu'", "gelu"]),
    ],
)
def test_train_set_bad_override_is_refused_before_step_1(tmp_path, argv, words):
    out = tmp_path / "run"
    code, stdout, err = cli("train", *argv, "--steps", "1", "--out", str(out))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainbudget train: error: "), err
    for word in words:
        assert word in lines[0]
    assert stdout == "" and not out.exists()  # refused before anything ran or was written


# ---- point 7: a run that cannot fit is refused before its model is built -----------------


@pytest.fixture
def machine_of_23_gb(monkeypatch):
    """The issue's machine: 23 GB of RAM (its report: llama-3-8b crashed the allocator)."""
    available = Available(bytes=23 * GB, source="the test's machine")
    monkeypatch.setattr(memory_check, "available_memory_bytes", lambda *_: available)


def test_train_refuses_a_model_larger_than_memory(tmp_path, machine_of_23_gb, monkeypatch):
    def no_model(*_args, **_kw):
        raise AssertionError("the model was built")

    monkeypatch.setattr("trainbudget.train.start.build_model", no_model)
    out = tmp_path / "run"
    code, _, err = cli("train", "--model", "llama-3-8b", "--steps", "1", "--out", str(out))
    assert code == 2
    line = err.strip().splitlines()[-1]
    # fp32 weights, gradients and AdamW's two moments alone: 16 bytes x 8.03e9 parameters
    assert line.startswith("trainbudget train: error: predicted peak memory = '129.5 GB'")
    assert "more than the 23 GB available on cpu" in line
    assert "would fit: --set n_layers=1 " in line and "--no-memory-check" in line
    assert not out.exists()


def test_train_memory_check_suggests_a_micro_batch_that_fits(tmp_path, monkeypatch):
    from trainbudget.core.spec.model_source.model_arg import resolve_model
    from trainbudget.train.observe.accounting import run_plan
    from trainbudget.train.spec.config import TrainConfig

    spec = resolve_model("gpt2", TrainConfig().overrides)

    def peak(micro_batch: int) -> float:
        plan = run_plan(
            "ddp", world_size=1, micro_batch=micro_batch, grad_accum=1, recompute="none"
        )
        step = memory_check.Step(
            spec=spec, plan=plan, precision="fp32", optimizer="adamw", seq_len=128
        )
        return step.peak_bytes()

    # room for micro-batch 8 of the default 16, not for 16
    room = (peak(8) + peak(16)) / 2
    available = Available(bytes=room, source="the test's machine")
    monkeypatch.setattr(memory_check, "available_memory_bytes", lambda *_: available)
    code, _, err = cli("train", "--steps", "1", "--out", str(tmp_path / "run"), "--device", "cpu")
    assert code == 2
    assert "would fit: --micro-batch 8 --grad-accum 2 (predicted" in err


def test_train_no_memory_check_starts_anyway(tmp_path, monkeypatch, data):
    nothing = Available(bytes=1.0, source="the test's machine")
    monkeypatch.setattr(memory_check, "available_memory_bytes", lambda *_: nothing)
    out = tmp_path / "run"
    code, _, err = cli("train", "--steps", "1", "--out", str(out), *QUICK)
    assert code == 2 and "--no-memory-check to start anyway" in err
    argv = ("--steps", "1", "--out", str(out), "--data", data, "--no-memory-check")
    code, _, err = cli("train", *argv, *QUICK)
    assert code == 0, err


def test_train_help_states_the_memory_flag():
    code, out, _ = cli("train", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "--memory-check, --no-memory-check" in text and "starts anyway" in text


# ---- point 10: no long silence before the first logged step ------------------------------


def test_train_speaks_from_the_start_and_at_step_1(tmp_path, data):
    out = tmp_path / "run"
    argv = ("--steps", "3", "--log-interval", "3", "--eval-interval", "3", "--out", str(out))
    argv += ("--data", data)
    code, _, err = cli("train", *argv, *QUICK)
    assert code == 0, err
    lines = err.splitlines()
    said = [line for line in lines if line.startswith("trainbudget train: ")]
    phases = ("loading PyTorch", "memory: predicted peak", "opening the data", "building")
    phases += ("predicting step time", "training 3 steps")
    # each phase said as it starts, in this order, before the first step's line
    where = [next(i for i, line in enumerate(said) if phase in line) for phase in phases]
    assert where == sorted(where), said
    assert lines.index(said[where[-1]]) < next(i for i, x in enumerate(lines) if x[:5] == "step ")
    assert "lines at steps 1, 2, then every 3 steps and the last" in err
    steps = [line.split()[1] for line in lines if line.startswith("step ")]
    assert steps == ["1/3", "2/3", "3/3"]  # step 1 on the terminal, not only step 3
    assert "warm-up included" in next(line for line in lines if line.startswith("step 1/3"))
    # metrics.jsonl keeps the log_interval rule: only the logged step
    records = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "event" not in r] == [3]


def _config(*argv: str):
    from trainbudget.cli.main import build_parser
    from trainbudget.cli.run.train_cmd import config_from_args

    return config_from_args(build_parser(only="train").parse_args(["train", *argv]))


def test_train_step_counts_take_integral_scientific_notation_like_set():
    # `--set n_layers=32e3` took it and `--steps 1e3` did not
    cfg = _config("--steps", "1e3", "--warmup-steps", "2e2", "--eval-interval", "1k")
    assert (cfg.steps, cfg.warmup_steps, cfg.eval_interval) == (1000, 200, 1000)
    code, out, err = cli("train", "--steps", "1.5e0")
    assert code == 2 and out == ""
    assert err == (
        "trainbudget train: error: steps = '1.5e0': must be an integer such as 1000, 1e3 or 4k\n"
    )


def test_train_pp_in_one_process_names_torchrun_not_grad_accum(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, err = cli("train", "--pp", "2", "--out", str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err == (
        "trainbudget train: error: pp = 2: runs one pipeline stage per process and this run "
        "has 1 process(es); launch it with torchrun --nproc-per-node 2 -m trainbudget train "
        "...\n"
    )
    assert not (tmp_path / "run").exists()


def test_train_prints_the_largest_measured_rank_peak(capsys):
    # off CUDA with several ranks: memory_bytes has no measured peak, the ranks' rows do
    from types import SimpleNamespace

    from trainbudget.cli.run.train_cmd import _print_summary

    rows = [
        {"rank": 0, "peak_bytes_measured": 20_000_000, "instrument": "tracked CPU tensors"},
        {"rank": 1, "peak_bytes_measured": 31_400_000, "instrument": "tracked CPU tensors"},
    ]
    summary = {
        "step_seconds": {"measured_median": 0.1, "predicted": 0.1},
        "memory_bytes": {"predicted_peak": 28_100_000, "measured_peak": None},
        "peak_memory_bytes_per_rank": {"ranks": rows},
        "loss_first_logged": 5.0,
        "loss_final": 4.0,
        "unigram_entropy_nats": 4.5,
        "plan": "dp2",
        "tokens_per_second": 1000.0,
        "notes": [],
    }
    _print_summary(SimpleNamespace(steps=2, out="run"), summary)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("peak memory")]
    assert line == (
        "peak memory: predicted 28.1 MB, measured 31.4 MB on rank 1, the largest of 2 rank(s) "
        "(tracked CPU tensors)"
    )
