"""After a run: `plot` (loss-curve PNG), `eval` (validation loss of the checkpoint), `sample`
(text from it) and the TensorBoard logs, on one tiny run trained once through the CLI; and
their malformed inputs (exit 2, one line on stderr naming the field)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from clirun import cli

pytestmark = pytest.mark.torch

STEPS, LOG_INTERVAL, EVAL_INTERVAL = 12, 2, 6
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRAIN_ARGV = [
    "train",
    "--steps",
    str(STEPS),
    "--log-interval",
    str(LOG_INTERVAL),
    "--eval-interval",
    str(EVAL_INTERVAL),
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "d_ff=64"),
    *("--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--micro-batch", "4", "--device", "cpu"),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "run"
    code, _, err = cli(*TRAIN_ARGV, "--out", str(out))
    assert code == 0, err
    return out


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def run_json(*argv: str) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 1024


def synthetic_run(folder: Path, *, mfu: bool = True, restart: bool = False) -> Path:
    """A run directory holding only a metrics.jsonl (20 logged steps, MFU and eval points)."""
    folder.mkdir(parents=True)
    lines = []
    steps = [*range(1, 6), *range(1, 21)] if restart else range(1, 21)
    for step in steps:
        rec = {"step": step, "loss": 5.0 / step**0.3, "tokens_per_second": 1000.0 + 10 * step}
        rec["mfu"] = 0.3 + 0.001 * step if mfu else None
        if step % 5 == 0:
            rec["eval"] = {"val_loss": 5.1 / step**0.3, "per_source": {"a": 5.1 / step**0.3}}
        lines.append(json.dumps(rec))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


# ---------------------------------------------------------------- plot


def test_plot_writes_png_beside_the_run(run_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    d = run_json("plot", str(run_dir))
    assert Path(d["out"]) == run_dir / "loss.png"
    assert_png(run_dir / "loss.png")
    (run,) = d["runs"]
    recs = records(run_dir)
    assert run["records"] == len(recs) == STEPS // LOG_INTERVAL
    assert run["last_step"] == STEPS
    assert run["loss_final"] == pytest.approx(recs[-1]["loss"])
    assert run["val_loss_final"] == pytest.approx(recs[-1]["eval"]["val_loss"])
    assert run["eval_points"] == STEPS // EVAL_INTERVAL
    assert run["skipped_records"] == 0


def test_plot_compares_runs_and_reads_a_metrics_file(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    other = synthetic_run(tmp_path / "with-mfu")
    out = tmp_path / "compare.png"
    d = run_json("plot", str(run_dir), str(other / "metrics.jsonl"), "--out", str(out))
    assert [r["run"] for r in d["runs"]] == [run_dir.name, "with-mfu"]
    assert_png(out)
    code, text, err = cli("plot", str(other), "--out", str(tmp_path / "one.png"))
    assert code == 0, err
    assert "wrote" in text and "20 logged steps" in text


def test_plot_keeps_the_last_run_in_a_reused_folder(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = synthetic_run(tmp_path / "reused", restart=True)
    (d,) = run_json("plot", str(run))["runs"]
    assert d["skipped_records"] == 5
    assert d["records"] == 20


# ---------------------------------------------------------------- eval


def test_eval_matches_the_last_validation_of_the_run(run_dir: Path) -> None:
    d = run_json("eval", "--checkpoint", str(run_dir))
    assert {"val_loss", "val_perplexity", "per_source", "step"} <= set(d)
    assert d["step"] == STEPS
    last = [r["eval"] for r in records(run_dir) if "eval" in r][-1]
    # the same weights on the same held-out batches on the CPU: deterministic
    assert abs(d["val_loss"] - last["val_loss"]) < 1e-4
    assert d["val_perplexity"] == pytest.approx(last["val_perplexity"], rel=1e-4)
    assert set(d["per_source"]) == set(last["per_source"])
    for source, loss in last["per_source"].items():
        assert abs(d["per_source"][source] - loss) < 1e-4, source
    # the checkpoint/ folder itself works too, and fewer batches are a different sample
    same = run_json("eval", "--checkpoint", str(run_dir / "checkpoint"))
    assert same["val_loss"] == d["val_loss"]
    one = run_json("eval", "--checkpoint", str(run_dir), "--batches", "1")
    assert one["batches"] == 1 and 0 < one["val_loss"] < 10


def test_eval_text_names_loss_and_perplexity(run_dir: Path) -> None:
    code, out, err = cli("eval", "--checkpoint", str(run_dir))
    assert code == 0, err
    assert "val loss" in out and "perplexity" in out and "python-docs" in out


def test_eval_finds_the_data_of_a_moved_run(run_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(run_dir / "checkpoint", moved / "checkpoint")
    code, _, err = cli("eval", "--checkpoint", str(moved), "--json")
    assert code == 2 and "--data" in err  # RUN_DIR/data is not there
    d = run_json("eval", "--checkpoint", str(moved), "--data", str(run_dir / "data"))
    assert d["val_loss"] == run_json("eval", "--checkpoint", str(run_dir))["val_loss"]


# ---------------------------------------------------------------- sample


def test_sample_continues_the_prompt(run_dir: Path) -> None:
    prompt, n = "The list ", 24
    argv = ("sample", "--checkpoint", str(run_dir), "--prompt", prompt)
    d = run_json(*argv, "--max-new-tokens", str(n), "--seed", "3")
    text, ids = d["text"], d["ids"]
    assert isinstance(text, str) and text.startswith(prompt)
    # byte tokenizer: one id per byte, 256 = end-of-text (dropped when decoding)
    assert d["prompt_tokens"] == len(prompt.encode()) and d["new_tokens"] == n
    assert len(ids) == len(prompt.encode()) + n
    assert ids[: len(prompt)] == list(prompt.encode())
    raw = bytes(i for i in ids if i < 256)
    assert len(raw) == len(prompt.encode()) + n - ids.count(256)
    assert text == raw.decode("utf-8", errors="replace")
    # seeded: the same text again, also as plain output
    code, out, err = cli(*argv, "--max-new-tokens", str(n), "--seed", "3")
    assert code == 0, err
    assert out == text + "\n"


# ---------------------------------------------------------------- TensorBoard


def test_tensorboard_logs_the_loss(run_dir: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert "loss" in acc.Tags()["scalars"]
    events = acc.Scalars("loss")
    assert [e.step for e in events] == list(range(LOG_INTERVAL, STEPS + 1, LOG_INTERVAL))
    logged = [r["loss"] for r in records(run_dir)]
    assert [e.value for e in events] == pytest.approx(logged, rel=1e-6)
    assert "eval/val_loss" in acc.Tags()["scalars"]
    assert [e.step for e in acc.Scalars("eval/val_loss")] == [EVAL_INTERVAL, STEPS]


# ---------------------------------------------------------------- malformed input

BAD_METRICS = {
    "not_json": ('{"step": 1, "loss": 2.0}\n{"step": 2, loss: 1.9}\n', ("metrics.jsonl:2",)),
    "no_step": ('{"step": 1, "loss": 2.0}\n\n{"loss": 1.9}\n', ("metrics.jsonl:3", "step")),
    "text_loss": ('{"step": 1, "loss": "low"}\n', ("metrics.jsonl:1", "loss", "low")),
    "no_loss": ('{"step": 1}\n', ("metrics.jsonl:1", "loss")),
    "a_list": ("[1, 2]\n", ("metrics.jsonl:1", "JSON object")),
    "empty": ("\n", ("metrics", "no records")),
}


@pytest.mark.parametrize("case", sorted(BAD_METRICS))
def test_plot_rejects_bad_metrics_lines(case: str, tmp_path: Path) -> None:
    text, needles = BAD_METRICS[case]
    (tmp_path / "metrics.jsonl").write_text(text)
    code, out, err = cli("plot", str(tmp_path), "--out", str(tmp_path / "x.png"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "x.png").exists()


def _bad_cases(run: Path, tmp: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    (tmp / "empty").mkdir()
    synthetic_run(tmp / "a")
    synthetic_run(tmp / "b")
    ckpt = ["--checkpoint", str(run)]
    sample = ["sample", *ckpt, "--prompt", "x"]
    return {
        "plot_not_a_run": (["plot", str(tmp / "empty")], ("run", "not a run directory")),
        "plot_missing": (["plot", str(tmp / "nope")], ("run", "nope")),
        "plot_two_without_out": (["plot", str(tmp / "a"), str(tmp / "b")], ("--out",)),
        "plot_out_not_png": (["plot", str(tmp / "a"), "--out", str(tmp / "x.jpg")], ("out",)),
        "plot_out_no_folder": (
            ["plot", str(tmp / "a"), "--out", str(tmp / "no" / "x.png")],
            ("out", "does not exist"),
        ),
        "eval_missing": (["eval", "--checkpoint", str(tmp / "nope")], ("checkpoint", "nope")),
        "eval_not_a_run": (["eval", "--checkpoint", str(tmp / "empty")], ("checkpoint",)),
        "eval_batches_zero": (["eval", *ckpt, "--batches", "0"], ("batches", "0")),
        "eval_seq_len_too_long": (["eval", *ckpt, "--seq-len", "65"], ("seq_len", "65")),
        "eval_bad_data": (["eval", *ckpt, "--data", str(tmp / "empty")], ("data",)),
        "eval_bad_device": (["eval", *ckpt, "--device", "tpu"], ("device", "tpu")),
        "sample_empty_prompt": (["sample", *ckpt, "--prompt", ""], ("prompt",)),
        "sample_missing": (
            ["sample", "--checkpoint", str(tmp / "nope"), "--prompt", "x"],
            ("checkpoint",),
        ),
        "sample_temperature_zero": ([*sample, "--temperature", "0"], ("temperature", "0")),
        "sample_temperature_negative": ([*sample, "--temperature", "-1"], ("temperature",)),
        "sample_temperature_text": ([*sample, "--temperature", "hot"], ("temperature", "hot")),
        "sample_top_k_negative": ([*sample, "--top-k", "-2"], ("top_k", "-2")),
        "sample_no_tokens": ([*sample, "--max-new-tokens", "0"], ("max_new_tokens",)),
    }


def test_malformed_input_exits_2_with_one_line(run_dir: Path, tmp_path: Path) -> None:
    for name, (argv, needles) in _bad_cases(run_dir, tmp_path).items():
        code, out, err = cli(*argv)
        assert code == 2, (name, err)
        assert out == "", name
        assert err.count("\n") == 1, (name, err)
        for needle in needles:
            assert needle in err, (name, needle, err)
