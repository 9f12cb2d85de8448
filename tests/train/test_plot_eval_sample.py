"""After a run: `plot` (loss-curve PNG), `eval` (validation loss of the checkpoint), `sample`
(text from it) and the TensorBoard logs, on one tiny run trained once through the CLI, and
`eval`/`sample` on checkpoints written directly with train.checkpoint.save_checkpoint (the
newest valid one, a fallback past a corrupt one, a malicious pickle refused); and their
malformed inputs (exit 2, one line on stderr naming the field)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

import torch

from clirun import cli
from trainbudget.train.checkpointing.checkpoint import (
    CHECKPOINTS_DIR,
    checkpoint_name,
    save_checkpoint,
)
from trainbudget.train.checkpointing.manifest import MANIFEST, write_manifest

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
    """The logged steps (event lines, such as a checkpoint written, left out, as plot does)."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r]


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
    # the checkpoint folder itself works too, and fewer batches are a different sample
    final = run_dir / CHECKPOINTS_DIR / checkpoint_name(STEPS)
    assert d["checkpoint"] == str(final)
    same = run_json("eval", "--checkpoint", str(final))
    assert same["val_loss"] == d["val_loss"]
    one = run_json("eval", "--checkpoint", str(run_dir), "--batches", "1")
    assert one["batches"] == 1 and 0 < one["val_loss"] < 10


def test_eval_text_names_loss_and_perplexity(run_dir: Path) -> None:
    code, out, err = cli("eval", "--checkpoint", str(run_dir))
    assert code == 0, err
    assert "val loss" in out and "perplexity" in out and "python-docs" in out


def test_eval_finds_the_data_of_a_moved_run(run_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(run_dir / CHECKPOINTS_DIR, moved / CHECKPOINTS_DIR)
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


# ---------------------------------------------------------------- checkpoints written directly

SPEC_OVERRIDES = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257")
EVAL_CONFIG = {"eval_batches": 2, "micro_batch": 4, "seq_len": 32}


def save_model(root: Path, step: int, data: Path):
    """A checkpoint as the trainer writes it (its files, a randomly initialised model);
    returns the model."""
    from trainbudget.core.spec.model_source.model_arg import resolve_model
    from trainbudget.model.transformer import build_model
    from trainbudget.train.rng import capture_rng_state

    spec = resolve_model("gpt2", (*SPEC_OVERRIDES, "max_seq_len=64"))
    model = build_model(spec, seed=step)
    spec_dict = {k: v for k, v in dataclasses.asdict(spec).items() if k != "sources"}
    state = {
        "step": step,
        "tokens_seen": 128 * step,
        "config": {**EVAL_CONFIG, "data": str(data)},
        "spec": spec_dict,
        "loader": {},
    }
    files = {
        "model.pt": model.state_dict(),
        "optimizer.pt": {},
        "state.json": state,
        "rank-00000.pt": {"rng": capture_rng_state()},
    }
    save_checkpoint(root / CHECKPOINTS_DIR, step, files=files)
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """(run folder with checkpoints at steps 1 and 2, data folder, {step: model})."""
    from trainbudget.data.prepare import prepare

    base = tmp_path_factory.mktemp("built")
    prepare(None, base / "data", tokenizer="byte")
    run = base / "run"
    models = {step: save_model(run, step, base / "data") for step in (1, 2)}
    return run, base / "data", models


@pytest.fixture
def run_copy(built, tmp_path: Path) -> Path:
    """A copy of the built run, free to corrupt."""
    shutil.copytree(built[0], tmp_path / "run")
    return tmp_path / "run"


def step_folder(run: Path, step: int) -> Path:
    return run / CHECKPOINTS_DIR / checkpoint_name(step)


def test_eval_reads_the_newest_checkpoint(built) -> None:
    from trainbudget.train.data import RunData
    from trainbudget.train.evaluate import evaluate

    run, data, models = built
    d = run_json("eval", "--checkpoint", str(run))
    assert d["step"] == 2 and d["checkpoint"] == str(step_folder(run, 2))
    assert d["data"] == str(data)  # from the config in state.json
    expected = evaluate(models[2], RunData(data), SimpleNamespace(**EVAL_CONFIG), "cpu")
    assert d["val_loss"] == pytest.approx(expected["val_loss"], abs=1e-5)
    # one step folder, or the checkpoints/ folder
    older = run_json("eval", "--checkpoint", str(step_folder(run, 1)))
    assert older["step"] == 1 and older["val_loss"] != d["val_loss"]
    assert run_json("eval", "--checkpoint", str(run / CHECKPOINTS_DIR))["step"] == 2


def test_sample_longer_than_the_context_is_refused_before_loading(run_dir: Path) -> None:
    # the failure: --max-new-tokens 1000000 ran on for hours with no word
    argv = ("sample", "--checkpoint", str(run_dir), "--prompt", "The ")
    code, out, err = cli(*argv, "--max-new-tokens", "1000000")
    assert code == 2 and out == ""
    assert err == (
        "trainbudget sample: error: max_new_tokens = 1000000: must be at most the model's "
        "context, max_seq_len (64): past it the model no longer sees the prompt\n"
    )


def test_a_long_sample_shows_its_progress_on_stderr(run_dir: Path, monkeypatch) -> None:
    from trainbudget.cli.run import sample_cmd

    monkeypatch.setattr(sample_cmd, "LONG_SAMPLE_TOKENS", 10)
    argv = ("sample", "--checkpoint", str(run_dir), "--prompt", "The ", "--max-new-tokens")
    code, _, err = cli(*argv, "20")
    assert code == 0, err
    lines = err.splitlines()
    assert [line.split("  ")[0] for line in lines] == [f"step {n}/20" for n in range(2, 21, 2)]
    assert all("new tokens  ETA " in line for line in lines)
    code, _, err = cli(*argv, "10")  # short: silent
    assert code == 0 and err == ""


def test_sample_reads_the_newest_checkpoint(built) -> None:
    run, _, _ = built
    d = run_json("sample", "--checkpoint", str(run), "--prompt", "The ", "--max-new-tokens", "5")
    assert d["step"] == 2 and d["text"].startswith("The ") and d["new_tokens"] == 5


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_eval_falls_back_past_a_corrupt_checkpoint(run_copy: Path) -> None:
    newest = step_folder(run_copy, 2)
    flip_middle_byte(newest / "model.pt")
    code, out, err = cli("eval", "--checkpoint", str(run_copy), "--json")
    assert code == 0, err
    assert json.loads(out)["step"] == 1
    assert err.count("\n") == 1, err
    assert err.startswith("checkpoint step-00000002 rejected: ")
    assert str(newest / "model.pt") in err and "SHA-256 differs" in err
    assert err.rstrip().endswith("falling back to step-00000001")
    # the corrupt folder given by name: refused, naming the file
    code, out, err = cli("sample", "--checkpoint", str(newest), "--prompt", "x")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert str(newest / "model.pt") in err and "SHA-256" in err
    # nothing valid left
    (step_folder(run_copy, 1) / "state.json").unlink()
    code, out, err = cli("eval", "--checkpoint", str(run_copy))
    assert code == 2 and out == ""
    assert err.count("\n") == 3, err  # two rejections, then the error
    assert "missing (listed in the manifest)" in err and "has no valid checkpoint" in err


class Shell:
    """Unpickling this runs a shell command: pickle calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def rewrite_manifest(folder: Path) -> None:
    """What an attacker who controls the folder does: hashes that match the files."""
    (folder / MANIFEST).unlink()
    write_manifest(folder, int(folder.name.split("-")[1]), 1)


def test_eval_refuses_a_malicious_pickle(run_copy: Path, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    newest = step_folder(run_copy, 2)
    torch.save({"w": Shell(f"touch {pwned}")}, newest / "model.pt")
    rewrite_manifest(newest)
    for argv in (
        ["eval", "--checkpoint", str(run_copy)],
        ["sample", "--checkpoint", str(newest), "--prompt", "x"],
    ):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert str(newest / "model.pt") in err
        assert "refused by torch.load(weights_only=True)" in err
    assert not pwned.exists()


def test_eval_names_a_bad_state_file(run_copy: Path) -> None:
    newest = step_folder(run_copy, 2)
    state = json.loads((newest / "state.json").read_text())
    del state["spec"]
    (newest / "state.json").write_text(json.dumps(state))
    rewrite_manifest(newest)
    code, out, err = cli("eval", "--checkpoint", str(run_copy))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert str(newest / "state.json") in err and "'spec'" in err


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
    "not_json": ('{"step": 2, loss: 1.9}\n', ("metrics.jsonl:1",)),
    "no_step": ('\n{"loss": 1.9}\n', ("metrics.jsonl:2", "step")),
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


def test_plot_draws_the_valid_prefix_and_names_what_it_skipped(tmp_path: Path) -> None:
    # the failure: a torn last line (a full disk, a kill inside a write) made plot refuse the
    # whole run
    pytest.importorskip("matplotlib")
    lines = '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n{"step": 3, "lo'
    (tmp_path / "metrics.jsonl").write_text(lines)
    code, out, err = cli("plot", str(tmp_path), "--out", str(tmp_path / "x.png"))
    assert code == 0, err
    assert "2 logged steps to 2" in out
    (note,) = [line for line in out.splitlines() if "metrics.jsonl:3" in line]
    assert "is cut short" in note and "skipped 1 line" in note
    assert_png(tmp_path / "x.png")


def test_plot_to_an_unwritable_out_is_one_line_naming_out(tmp_path: Path) -> None:
    # a folder in the PNG's place fails the write as a read-only folder would (root writes
    # anywhere): one line, not the OSError's traceback
    pytest.importorskip("matplotlib")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    (tmp_path / "l.png").mkdir()
    code, out, err = cli("plot", str(tmp_path), "--out", str(tmp_path / "l.png"))
    assert code == 2 and out == ""
    assert err == (
        f"trainbudget plot: error: out = '{tmp_path / 'l.png'}': cannot be written "
        "(Is a directory); choose a writable --out\n"
    )


def _bad_cases(run: Path, tmp: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    (tmp / "empty").mkdir()
    (tmp / "old" / "checkpoint").mkdir(parents=True)  # the layout before checkpoints/
    (tmp / "old" / "checkpoint" / "state.json").write_text("{}")
    (tmp / "no-ckpt" / CHECKPOINTS_DIR).mkdir(parents=True)
    (tmp / "step-00000005").mkdir()
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
        "eval_old_layout": (
            ["eval", "--checkpoint", str(tmp / "old")],
            ("checkpoint", "not a run directory or a checkpoint"),
        ),
        "eval_no_checkpoint": (
            ["eval", "--checkpoint", str(tmp / "no-ckpt")],
            ("checkpoint", "has no valid checkpoint"),
        ),
        "eval_step_without_manifest": (
            ["eval", "--checkpoint", str(tmp / "step-00000005")],
            ("checkpoint", MANIFEST, "missing"),
        ),
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
