"""Issue 6, must-show 7: malformed configs -- TOML files, JSON files and flags; bad types,
ranges, unknown keys, divisibility, conflicts, plan files, data folders, model overrides --
each refused by the real CLI with exit code 2 and one stderr line naming the field (and the
file), no traceback, and nothing written to the output folder.

All of them are refused before torch is imported (test_preflight.py proves it in a fresh
interpreter), so the whole file takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import cli, cli_json
from trainbudget.data.prepare import prepare

# name -> text of the settings files the cases use
FILES = {
    "unknown.toml": "steps = 10\nstepz = 3\n",
    "far.json": '{"learning_rate": 0.1}',
    "dash.json": '{"micro-batch": 4}',
    "string_int.toml": 'steps = "many"\n',
    "float_int.toml": "micro_batch = 2.5\n",
    "bool_number.toml": "lr = true\n",
    "list_str.toml": 'model = ["gpt2"]\n',
    "table.toml": '[model]\nname = "gpt2"\n',
    "syntax.toml": "steps = = 3\n",
    "keep.toml": "keep = 1\n",
    "eval.toml": "log_interval = 10\neval_interval = 25\nsteps = 100\n",
    "list.json": "[1, 2]",
    "invalid.json": '{"steps": 3,}',
    "duplicate.json": '{"steps": 3, "steps": 4}',
    "str_bool.json": '{"tensorboard": "yes"}',
    "minutes.json": '{"checkpoint_minutes": "sometimes"}',
    "overrides.json": '{"overrides": ["n_layers=2", 3]}',
    "spike.json": '{"spike_window": 3}',
    "settings.yaml": "steps: 3\n",
    "settings.py": "steps = 3\n",
    "probes.tsv": "The capital of France is\t Paris\nno tab on this line\n",
    # issue 15, item 8: nesting that made the parsers raise RecursionError
    "deep.toml": "steps = " + "[" * 5000 + "]" * 5000 + "\n",
    "deep.json": '{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}",
    # issue 15, item 9: a value quoted whole in the error line (1 MB here; the was 50)
    "long.json": json.dumps({"model": "x" * 2**20}),
}

# (argv, environment, words the one error line must contain); {d} is the files' folder
CASES = {
    # flags: types
    "flag-int-word": (["--steps", "ten"], {}, ["steps", "'ten'", "integer"]),
    "flag-int-float": (["--micro-batch", "1.5"], {}, ["micro_batch", "integer"]),
    "flag-float-word": (["--lr", "fast"], {}, ["lr", "number"]),
    "flag-minutes-word": (
        ["--checkpoint-minutes", "sometimes"],
        {},
        ["checkpoint_minutes", '"auto"'],
    ),
    # flags: ranges and choices
    "flag-steps-zero": (["--steps", "0"], {}, ["steps = 0", "positive"]),
    "flag-grad-accum-negative": (["--grad-accum", "-2"], {}, ["grad_accum", "positive"]),
    "flag-lr-zero": (["--lr", "0"], {}, ["lr", "positive"]),
    "flag-lr-nan": (["--lr", "nan"], {}, ["lr", "finite"]),
    "flag-min-lr-ratio": (["--min-lr-ratio", "1.5"], {}, ["min_lr_ratio", "[0, 1]"]),
    "flag-seed-negative": (["--seed", "-1"], {}, ["seed", "2**32"]),
    "flag-keep-1": (["--keep", "1"], {}, ["keep = 1", ">= 2"]),
    "flag-spike-window-3": (["--spike-window", "3"], {}, ["spike_window = 3", ">= 8"]),
    "flag-max-rollbacks-negative": (["--max-rollbacks", "-1"], {}, ["max_rollbacks", ">= 0"]),
    "flag-minutes-negative": (["--checkpoint-minutes", "-5"], {}, ["checkpoint_minutes"]),
    "flag-failure-rate": (
        ["--gpu-failure-rate-per-day", "1.5"],
        {},
        ["gpu_failure_rate_per_day", "(0, 1)"],
    ),
    "flag-on-nonfinite": (["--on-nonfinite", "ignore"], {}, ["on_nonfinite", "skip, halt"]),
    "flag-precision": (["--precision", "fp8"], {}, ["precision", "fp8", "bf16-mixed"]),
    "flag-strategy": (["--strategy", "zero3"], {}, ["strategy", "ddp, zero1, zero2, fsdp, hsdp"]),
    "flag-out-empty": (["--out", ""], {}, ["out", "folder"]),
    # flags: across fields
    "flag-warmup-past-steps": (["--steps", "10", "--warmup-steps", "20"], {}, ["warmup_steps"]),
    "flag-hsdp-without-shard": (
        ["--strategy", "hsdp"],
        {},
        ["zero_shard = 0", "with strategy hsdp"],
    ),
    "flag-shard-without-hsdp": (["--zero-shard", "2"], {}, ["zero_shard = 2", "(strategy ddp)"]),
    "flag-shard-negative": (["--zero-shard", "-1"], {}, ["zero_shard = -1", ">= 0"]),
    "flag-eval-not-multiple": (
        ["--log-interval", "10", "--eval-interval", "15"],
        {},
        ["eval_interval = 15", "multiple of log_interval (10)"],
    ),
    # the model
    "model-dense": (["--model", "dense:7B"], {}, ["model", "dense:7B", "architecture"]),
    "model-unknown": (["--model", "gpt5"], {}, ["model", "gpt5"]),
    "set-unknown-field": (["--set", "n_layerz=2"], {}, ["n_layerz", "unknown field"]),
    "set-not-divisible": (["--set", "n_heads=5"], {}, ["n_heads", "d_model"]),
    "set-vocab-too-small": (["--set", "vocab_size=100"], {}, ["vocab_size = 100", "257"]),
    "seq-len-past-positions": (["--seq-len", "512"], {}, ["seq_len = 512", "max_seq_len (256"]),
    # data and probes
    "data-not-prepared": (["--data", "{d}/raw"], {}, ["data", "raw", "meta.json"]),
    "data-missing": (["--data", "{d}/nowhere"], {}, ["data", "nowhere", "meta.json"]),
    "data-corrupt-meta": (["--data", "{d}/corrupt"], {}, ["data", "meta.json", "cannot be read"]),
    "data-truncated": (["--data", "{d}/truncated"], {}, ["data", "train.bin", "re-prepare"]),
    "probes-missing": (["--probes", "{d}/none.tsv"], {}, ["probes", "none.tsv", "cannot be read"]),
    "probes-no-tab": (["--probes", "{d}/probes.tsv"], {}, ["probes:2", "prompt<TAB>target"]),
    # settings files
    "file-missing": (["--config", "{d}/missing.toml"], {}, ["--config", "missing.toml", "read"]),
    "file-yaml": (["--config", "{d}/settings.yaml"], {}, ["--config", "settings.yaml", ".json"]),
    "file-python": (["--config", "{d}/settings.py"], {}, ["--config", "settings.py", ".toml"]),
    "toml-unknown-key": (
        ["--config", "{d}/unknown.toml"],
        {},
        ["unknown.toml:stepz", "did you mean 'steps'"],
    ),
    "toml-string-for-int": (["--config", "{d}/string_int.toml"], {}, ["string_int.toml:steps"]),
    "toml-float-for-int": (
        ["--config", "{d}/float_int.toml"],
        {},
        ["float_int.toml:micro_batch", "integer"],
    ),
    "toml-bool-for-number": (
        ["--config", "{d}/bool_number.toml"],
        {},
        ["bool_number.toml:lr", "number"],
    ),
    "toml-list-for-str": (["--config", "{d}/list_str.toml"], {}, ["list_str.toml:model", "string"]),
    "toml-table": (["--config", "{d}/table.toml"], {}, ["table.toml:model", "string"]),
    "toml-syntax": (["--config", "{d}/syntax.toml"], {}, ["--config", "syntax.toml", "TOML"]),
    "toml-range": (["--config", "{d}/keep.toml"], {}, ["keep.toml:keep", ">= 2"]),
    "toml-divisibility": (
        ["--config", "{d}/eval.toml"],
        {},
        ["eval.toml:eval_interval", "multiple of log_interval"],
    ),
    "json-unknown-key": (
        ["--config", "{d}/far.json"],
        {},
        ["far.json:learning_rate", "known:", "lr"],
    ),
    "json-dashed-key": (
        ["--config", "{d}/dash.json"],
        {},
        ["dash.json:micro-batch", "'micro_batch'"],
    ),
    "json-not-object": (["--config", "{d}/list.json"], {}, ["--config", "list.json", "object"]),
    "json-invalid": (["--config", "{d}/invalid.json"], {}, ["--config", "invalid.json", "JSON"]),
    "json-duplicate-key": (["--config", "{d}/duplicate.json"], {}, ["duplicate.json:steps"]),
    "json-string-for-bool": (
        ["--config", "{d}/str_bool.json"],
        {},
        ["str_bool.json:tensorboard", "true or false"],
    ),
    "json-minutes-sometimes": (
        ["--config", "{d}/minutes.json"],
        {},
        ["minutes.json:checkpoint_minutes", '"auto"'],
    ),
    "json-overrides-not-strings": (
        ["--config", "{d}/overrides.json"],
        {},
        ["overrides.json:overrides", "field=value"],
    ),
    "json-spike-window": (["--config", "{d}/spike.json"], {}, ["spike.json:spike_window"]),
    # plan files
    "plan-missing": (["--plan", "{d}/none.json"], {}, ["plan", "none.json", "cannot be read"]),
    "plan-not-plan-output": (["--plan", "{d}/far.json"], {}, ["plan", '"plans" list']),
    "plan-missing-key": (["--plan", "{d}/plan_no_dp.json"], {}, ["plan", '"dp"']),
    "plan-context-parallel": (
        ["--plan", "{d}/plan_cp.json"],
        {"WORLD_SIZE": "1"},
        ["plan", "cp(2) = 2 processes", "torchrun --nproc-per-node 2"],
    ),
    "plan-wrong-process-count": (
        ["--plan", "{d}/plan.json"],
        {},
        ["plan", "dp(2) * tp(1)", "torchrun --nproc-per-node 2"],
    ),
    "plan-conflicting-micro-batch": (
        ["--plan", "{d}/plan.json", "--micro-batch", "4"],
        {"WORLD_SIZE": "2"},
        ["micro_batch = 4", "conflicts with the plan"],
    ),
    "plan-conflicting-strategy": (
        ["--plan", "{d}/plan.json", "--strategy", "fsdp"],
        {"WORLD_SIZE": "2"},
        ["strategy = 'fsdp'", "conflicts with the plan"],
    ),
    "plan-inconsistent-batch": (
        ["--plan", "{d}/plan_batch.json"],
        {"WORLD_SIZE": "2"},
        ["plan", "global_batch (48)"],
    ),
    "world-size-word": (["--steps", "5"], {"WORLD_SIZE": "two"}, ["WORLD_SIZE", "two"]),
    # issue 15, items 8 and 9
    "toml-nested-5000-deep": (["--config", "{d}/deep.toml"], {}, ["deep.toml", "too deeply"]),
    "json-nested-100000-deep": (["--config", "{d}/deep.json"], {}, ["deep.json", "too deeply"]),
    "value-of-a-megabyte": (
        ["--config", "{d}/long.json"],
        {},
        ["model = 'xxx", "... (1,048,578 characters)"],
    ),
    "out-under-a-file": (["--out", "{d}/settings.py/run"], {}, ["out", "which is a file"]),
    "failure-rate-too-small-for-auto": (
        ["--gpu-failure-rate-per-day", "1e-320", "--checkpoint-minutes", "auto"],
        {},
        ["gpu_failure_rate_per_day = 1e-320", "infinite MTBF"],
    ),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("malformed")
    for name, text in FILES.items():
        (d / name).write_text(text, encoding="utf-8")
    doc = cli_json(
        "plan",
        *("--model", "gpt2", "--gpus", "2", "--gpu", "h100-sxm"),
        *("--global-batch", "32", "--seq-len", "1024", "--zero-stages", "1"),
    )
    (d / "plan.json").write_text(json.dumps(doc))
    for name, change in (
        ("plan_no_dp.json", lambda p: p.pop("dp")),
        ("plan_cp.json", lambda p: p.update(cp=2, dp=1, global_batch=p["global_batch"] // 2)),
        ("plan_batch.json", lambda p: p.update(global_batch=48)),
    ):
        edited = json.loads(json.dumps(doc))
        change(edited["plans"][0]["plan"])
        (d / name).write_text(json.dumps(edited))
    (d / "raw").mkdir()
    (d / "raw" / "notes.txt").write_text("just text\n")
    text = d / "tiny.txt"
    text.write_text("a few words of training text. " * 50)
    for name in ("corrupt", "truncated"):
        prepare([str(text)], d / name, tokenizer="byte")
    (d / "corrupt" / "meta.json").write_text("{not json")
    train = d / "truncated" / "train.bin"
    train.write_bytes(train.read_bytes()[:10])
    return d


def test_at_least_30_malformed_configs():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_config_is_refused(folder, tmp_path, monkeypatch, case):
    argv, env, needles = CASES[case]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "run"
    argv = [a.replace("{d}", str(folder)) for a in argv]
    code, stdout, stderr = cli("train", "--out", str(out), *argv)
    assert code == 2, (stdout, stderr)
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("trainbudget train: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert len(lines[0]) < 1000  # a value is quoted by its start, never whole
    assert not out.exists()  # refused before anything was written


def test_out_that_is_a_file_is_left_alone(tmp_path):
    out = tmp_path / "run"
    out.write_text("someone's notes\n")
    code, stdout, stderr = cli("train", "--out", str(out))
    assert (code, stdout) == (2, "")
    assert stderr.startswith("trainbudget train: error: out = ") and "is a file" in stderr
    assert out.read_text() == "someone's notes\n"
