"""The run config: settings files (TOML, JSON), typing and precedence (defaults < file < flags),
validation naming the field, and the help text taken from the fields' docstrings.

Nothing here imports torch (the config and the CLI's argument handling do not); the malformed
inputs of the whole CLI are test_config_errors.py's."""

from __future__ import annotations

import math

import pytest

from clirun import cli
from trainbudget.cli.main import build_parser
from trainbudget.cli.run.train_cmd import config_from_args
from trainbudget.core.errors import SpecError
from trainbudget.core.spec.precision import TRAINABLE_OPTIMIZERS
from trainbudget.train.spec.config import (
    TrainConfig,
    config_fields,
    field_docs,
    load_config_file,
    make_config,
    merge_overrides,
)

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=32")


def write(tmp_path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def from_argv(*argv: str) -> TrainConfig:
    return config_from_args(build_parser().parse_args(["train", *argv]))


# ---- files -------------------------------------------------------------------------------------


def test_toml_values_reach_the_config(tmp_path):
    path = write(
        tmp_path,
        'steps = 40\nlr = 1e-3\nschedule = "linear"\ntensorboard = false\n'
        'overrides = ["n_layers=2", "d_model=64"]\n',
    )
    doc = load_config_file(path)
    assert doc["overrides"] == ("n_layers=2", "d_model=64")  # a tuple, like the default
    cfg = make_config(doc, {})
    assert (cfg.steps, cfg.lr, cfg.schedule, cfg.tensorboard) == (40, 1e-3, "linear", False)
    assert cfg.warmup_steps == 4  # -1 -> a tenth of the file's steps
    assert cfg.micro_batch == TrainConfig().micro_batch  # untouched fields keep the defaults


def test_json_values_reach_the_config(tmp_path):
    path = write(
        tmp_path,
        '{"steps": 40, "lr": 1, "overrides": ["n_layers=2"], "checkpoint_minutes": "auto"}',
        "run.json",
    )
    cfg = make_config(load_config_file(path), {})
    assert (cfg.steps, cfg.lr, cfg.overrides, cfg.checkpoint_minutes) == (
        40,
        1.0,
        ("n_layers=2",),
        "auto",
    )
    assert isinstance(cfg.lr, float)


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    path = write(tmp_path, "steps = 10\nlearning_rate = 0.1\n")
    with pytest.raises(SpecError) as err:
        load_config_file(path)
    assert err.value.field == f"{path}:learning_rate"
    assert "unknown key" in err.value.rule
    assert "lr" in err.value.rule  # nothing close: the known keys are listed
    path = write(tmp_path, '{"micro-batch": 4}', "dash.json")
    with pytest.raises(SpecError, match="did you mean 'micro_batch'") as err:
        load_config_file(path)
    assert err.value.field == f"{path}:micro-batch"


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ('steps = "ten"\n', "steps", "must be an integer"),
        ("steps = 1.5\n", "steps", "must be an integer"),
        ("lr = true\n", "lr", "must be a number"),
        ('lr = "fast"\n', "lr", "must be a number"),
        ("tensorboard = 1\n", "tensorboard", "true or false"),
        ("schedule = 3\n", "schedule", "must be a string"),
        ('model = ["gpt2"]\n', "model", "must be a string"),
        ("seed = true\n", "seed", "must be an integer"),
        ('overrides = "n_layers=2"\n', "overrides", "list"),
        ('checkpoint_minutes = "sometimes"\n', "checkpoint_minutes", '"auto"'),
    ],
)
def test_file_wrong_type_names_the_file_and_key(tmp_path, text, field, rule):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_config_file(path)
    assert err.value.field == f"{path}:{field}"
    assert rule in err.value.rule


def test_wrong_types_without_a_file_name_the_field():
    with pytest.raises(SpecError) as err:
        make_config({"steps": "ten"}, {})
    assert (err.value.field, err.value.rule) == ("steps", "must be an integer")
    with pytest.raises(SpecError) as err:
        TrainConfig(compile="yes")
    assert err.value.field == "compile"


def test_range_error_of_a_file_value_names_the_file(tmp_path):
    path = write(tmp_path, "keep = 1\nsteps = 5\n")
    with pytest.raises(SpecError) as err:
        make_config(load_config_file(path), {}, source=path)
    assert err.value.field == f"{path}:keep"
    # a flag that sets it is what is wrong, and is named as the field
    with pytest.raises(SpecError) as err:
        make_config(load_config_file(path), {"keep": 0}, source=path)
    assert err.value.field == "keep"


def test_int_for_a_float_field_is_accepted(tmp_path):
    cfg = make_config(load_config_file(write(tmp_path, "lr = 1\ngrad_clip = 0\n")), {})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.grad_clip == 0.0 and isinstance(cfg.grad_clip, float)


@pytest.mark.parametrize(
    ("name", "text", "rule"),
    [
        ("bad.toml", "steps = = 3\n", "not valid TOML"),
        ("bad.json", '{"steps": 3,}', "not valid JSON"),
        ("list.json", "[1, 2]", "JSON object"),
        ("run.yaml", "steps: 3\n", ".toml or .json"),
        ("run.py", "steps = 3\n", ".toml or .json"),  # a config is data, never executed
    ],
)
def test_file_that_is_not_a_settings_file(tmp_path, name, text, rule):
    with pytest.raises(SpecError, match=rule) as err:
        load_config_file(write(tmp_path, text, name))
    assert err.value.field == "--config"


def test_missing_file_and_duplicate_json_key(tmp_path):
    with pytest.raises(SpecError, match="cannot be read") as err:
        load_config_file(str(tmp_path / "missing.toml"))
    assert err.value.field == "--config"
    path = write(tmp_path, '{"steps": 3, "steps": 4}', "dup.json")
    with pytest.raises(SpecError, match="given twice") as err:
        load_config_file(path)
    assert err.value.field == f"{path}:steps"


def test_flags_override_file_values(tmp_path):
    path = write(tmp_path, 'steps = 40\nlr = 1e-3\nprecision = "bf16-mixed"\nseed = 7\n')
    cfg = make_config(load_config_file(path), {"steps": 50, "lr": None, "precision": "fp32"})
    assert (cfg.steps, cfg.lr, cfg.precision, cfg.seed) == (50, 1e-3, "fp32", 7)
    # the same through the CLI's own argument handling
    cfg = from_argv("--config", path, "--steps", "60", "--lr", "2e-3")
    assert (cfg.steps, cfg.lr, cfg.precision, cfg.seed) == (60, 2e-3, "bf16-mixed", 7)
    assert cfg.warmup_steps == 6  # derived from the flag's steps, not the file's
    # --set changes the file's model overrides field by field; boolean flags win over the file
    path = write(tmp_path, 'overrides = ["n_layers=2"]\ntensorboard = true\n', "b.toml")
    cfg = from_argv("--config", path, "--set", "n_layers=3", "--no-tensorboard")
    assert cfg.overrides == ("n_layers=3",) and cfg.tensorboard is False


def test_a_model_named_alone_gets_no_default_overrides(tmp_path):
    assert make_config({}, {"model": "gpt2"}).overrides == ()
    assert make_config({"model": "gpt2"}, {}).overrides == ()
    assert make_config({}, {}).overrides == TrainConfig().overrides  # the tiny default
    # --set alone keeps the file's model and changes its overrides field by field
    path = write(tmp_path, 'model = "llama-2-7b"\noverrides = ["n_layers=2", "d_model=512"]\n')
    cfg = from_argv("--config", path, "--set", "n_layers=1", "--set", "n_heads=8")
    assert (cfg.model, cfg.overrides) == ("llama-2-7b", ("n_layers=1", "d_model=512", "n_heads=8"))
    # a model named in the file alone: --set changes that model as it is
    path = write(tmp_path, 'model = "llama-2-7b"\n', "alone.toml")
    assert from_argv("--config", path, "--set", "n_layers=1").overrides == ("n_layers=1",)


def test_set_changes_the_default_model_field_by_field():
    """Issue 13, point 6: `--set n_layers=2` trained full-width GPT-2 (the default's other
    overrides, its width and byte vocabulary among them, were dropped)."""
    default = TrainConfig().overrides
    cfg = from_argv("--set", "n_layers=2")
    assert cfg.model == "gpt2" and cfg.overrides == ("n_layers=2", *default[1:])
    assert from_argv("--model", "gpt2", "--set", "n_layers=2").overrides == ("n_layers=2",)
    # new fields follow the default's; the last value of a field wins
    cfg = from_argv("--set", "bias=false", "--set", "d_model=64", "--set", "d_model=96")
    assert cfg.overrides[1] == "d_model=96" and cfg.overrides[-1] == "bias=false"


def test_merge_overrides_keeps_places_and_malformed_items():
    assert merge_overrides(("a=1", "b=2"), ("b=3", "c=4")) == ("a=1", "b=3", "c=4")
    assert merge_overrides(("a=1",), ("oops",)) == ("a=1", "oops")  # resolve_model refuses it


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": -3}, "steps"),
        ({"steps": True}, "steps"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"seq_len": 0}, "seq_len"),
        ({"log_interval": 0}, "log_interval"),
        ({"steps": 10, "warmup_steps": 11}, "warmup_steps"),
        ({"warmup_steps": -2}, "warmup_steps"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"schedule": "step"}, "schedule"),
        ({"precision": "fp8"}, "precision"),
        ({"precision": "fp16-mixed"}, "precision"),
        ({"device": "tpu"}, "device"),
        ({"strategy": "zero3"}, "strategy"),
        ({"recompute": "selective"}, "recompute"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"out": " "}, "out"),
        ({"log_interval": 10, "eval_interval": 15}, "eval_interval"),
        ({"keep": 1}, "keep"),
        ({"spike_window": 3}, "spike_window"),
        ({"max_rollbacks": -1}, "max_rollbacks"),
        ({"checkpoint_every": -1}, "checkpoint_every"),
        ({"checkpoint_minutes": "sometimes"}, "checkpoint_minutes"),
        ({"checkpoint_minutes": -1.0}, "checkpoint_minutes"),
        ({"gpu_failure_rate_per_day": 1.0}, "gpu_failure_rate_per_day"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite"),
        ({"spike_sigmas": 0.0}, "spike_sigmas"),
        ({"spike_min_excess": -0.1}, "spike_min_excess"),
        ({"max_consecutive_skips": 0}, "max_consecutive_skips"),
        ({"resume": True, "overwrite": True}, "overwrite"),
    ],
)
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        TrainConfig(**kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field} = ")


def test_eval_interval_is_a_multiple_of_log_interval():
    # the loop evaluates on logged steps only: 15 with logs every 10 would evaluate at 30, 60, ...
    with pytest.raises(SpecError, match="multiple of log_interval") as err:
        TrainConfig(log_interval=10, eval_interval=15, steps=100)
    assert err.value.field == "eval_interval"
    assert TrainConfig(log_interval=10, eval_interval=30).eval_interval == 30
    # at or past the end: only the final evaluation, which every run does
    assert TrainConfig(steps=25, log_interval=10, eval_interval=25).eval_interval == 25


def test_valid_edges_are_accepted():
    assert TrainConfig(steps=10, warmup_steps=10).warmup_steps == 10  # warmup == steps
    assert TrainConfig(steps=10, warmup_steps=0).warmup_steps == 0
    assert TrainConfig(steps=5).warmup_steps == 0  # 5 // 10
    assert TrainConfig(grad_clip=0.0, weight_decay=0.0, min_lr_ratio=0.0).grad_clip == 0.0
    assert TrainConfig(seed=0).seed == 0 and TrainConfig(seed=2**32 - 1).seed == 2**32 - 1
    assert TrainConfig(spike_window=0, checkpoint_every=0, max_rollbacks=0).spike_window == 0
    assert TrainConfig(checkpoint_minutes=5).checkpoint_minutes == 5.0


def test_unknown_optimizer_is_refused_by_the_config():
    with pytest.raises(SpecError) as err:
        TrainConfig(optimizer="adamww")
    assert err.value.field == "optimizer"
    assert "must be one of" in err.value.rule and "adafactor" not in err.value.rule


def test_estimate_only_optimizer_is_refused_with_its_reason():
    """adafactor is a row of the core's table but the trainer has no factory for it."""
    with pytest.raises(SpecError, match="estimate-only") as err:
        TrainConfig(optimizer="adafactor")
    assert err.value.field == "optimizer"


def test_trainable_optimizers_are_accepted():
    for name in TRAINABLE_OPTIMIZERS:
        assert TrainConfig(optimizer=name).optimizer == name


@pytest.mark.parametrize(
    ("field", "value"),
    [("grad_clip", math.nan), ("weight_decay", math.nan), ("lr", math.inf)],
)
def test_non_finite_numbers_are_refused(field, value):
    with pytest.raises(SpecError) as err:
        TrainConfig(**{field: value})
    assert err.value.field == field


# ---- the CLI's flags --------------------------------------------------------------------------


def test_flags_parse_units_and_types():
    cfg = from_argv("--steps", "1000", "--lr", "3e-4", "--micro-batch", "2", "--grad-clip", "0")
    assert (cfg.steps, cfg.lr, cfg.micro_batch, cfg.grad_clip) == (1000, 3e-4, 2, 0.0)


@pytest.mark.parametrize(
    ("flag", "field"), [("--warmup-steps", "warmup_steps"), ("--seed", "seed")]
)
def test_zero_is_a_valid_warmup_and_seed(flag, field):
    # the flags leave range rules to TrainConfig: 0 is a valid warmup and seed
    assert getattr(from_argv("--steps", "10", flag, "0"), field) == 0


def test_steps_zero_says_positive():
    code, _, err = cli("train", "--steps", "0")
    assert code == 2
    assert "steps = 0: must be a positive integer" in err


def test_flags_for_booleans_turn_file_values_off(tmp_path):
    path = write(tmp_path, "resume = true\ncompile = true\n")
    cfg = from_argv("--config", path, "--no-resume", "--no-compile")
    assert (cfg.resume, cfg.compile) == (False, False)
    assert from_argv("--resume").resume is True


# ---- help -------------------------------------------------------------------------------------


def test_every_field_has_a_docstring():
    docs = field_docs()
    assert set(docs) == set(config_fields())
    assert all(docs.values())
    assert docs["keep"].startswith("How many checkpoints to keep")
    assert "\n" not in docs["checkpoint_minutes"]  # whitespace collapsed for the help


def test_help_shows_docstrings_defaults_and_groups():
    code, out, _ = cli("train", "--help")
    assert code == 0
    text = " ".join(out.split())  # argparse wraps lines
    for title in (
        "model and data:",
        "optimisation:",
        "precision, device and parallelism:",
        "checkpoints and faults:",
        "logging and evaluation:",
    ):
        assert title in text
    assert "--keep N How many checkpoints to keep" in text
    assert "(default: 3)" in text
    assert "8 % of GPUs per month" in text  # % survives argparse's formatting
    assert "--schedule {cosine,linear,constant,wsd}" in text
    assert "--resume, --no-resume" in text
    for name in config_fields():
        flag = "--set" if name == "overrides" else "--" + name.replace("_", "-")
        assert flag in text, flag
