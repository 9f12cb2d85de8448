"""The run config: TOML loading, typing and precedence (defaults < file < flags), validation
naming the field, and `trainbudget train`'s malformed inputs (exit 2, one line on stderr).

Everything here but the last two CLI cases runs without torch (the config and the CLI's
argument handling do not import it)."""

from __future__ import annotations

import math

import pytest

from clirun import cli
from trainbudget.cli.main import build_parser
from trainbudget.cli.train_cmd import config_from_args
from trainbudget.core.errors import SpecError
from trainbudget.train.config import TrainConfig, load_toml, make_config

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=32")


def write(tmp_path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def from_argv(*argv: str) -> TrainConfig:
    return config_from_args(build_parser().parse_args(["train", *argv]))


# ---- TOML -------------------------------------------------------------------------------------


def test_toml_values_reach_the_config(tmp_path):
    path = write(
        tmp_path,
        'steps = 40\nlr = 1e-3\nschedule = "linear"\ntensorboard = false\n'
        'overrides = ["n_layers=2", "d_model=64"]\n',
    )
    doc = load_toml(path)
    assert doc["overrides"] == ("n_layers=2", "d_model=64")  # a tuple, like the default
    cfg = make_config(doc, {})
    assert (cfg.steps, cfg.lr, cfg.schedule, cfg.tensorboard) == (40, 1e-3, "linear", False)
    assert cfg.warmup_steps == 4  # -1 -> a tenth of the file's steps
    assert cfg.micro_batch == TrainConfig().micro_batch  # untouched fields keep the defaults


def test_toml_unknown_key_is_named(tmp_path):
    path = write(tmp_path, "steps = 10\nlearning_rate = 0.1\n")
    with pytest.raises(SpecError) as err:
        load_toml(path)
    assert "learning_rate" in err.value.field
    assert "unknown key" in str(err.value)
    assert "lr" in err.value.rule  # the known keys are listed


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ('steps = "ten"\n', "steps", "must be"),
        ("steps = 1.5\n", "steps", "must be"),
        ("lr = true\n", "lr", "must be"),
        ('lr = "fast"\n', "lr", "must be"),
        ("tensorboard = 1\n", "tensorboard", "true or false"),
        ("schedule = 3\n", "schedule", "must be"),
    ],
)
def test_toml_wrong_type_names_the_field(tmp_path, text, field, rule):
    with pytest.raises(SpecError) as err:
        make_config(load_toml(write(tmp_path, text)), {})
    assert err.value.field == field
    assert rule in err.value.rule


def test_toml_bool_for_an_int_field_is_refused(tmp_path):
    with pytest.raises(SpecError) as err:
        make_config(load_toml(write(tmp_path, "seed = true\n")), {})
    assert err.value.field == "seed"


def test_toml_int_for_a_float_field_is_accepted(tmp_path):
    cfg = make_config(load_toml(write(tmp_path, "lr = 1\ngrad_clip = 0\n")), {})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.grad_clip == 0.0 and isinstance(cfg.grad_clip, float)


def test_toml_overrides_must_be_a_list(tmp_path):
    with pytest.raises(SpecError) as err:
        make_config(load_toml(write(tmp_path, 'overrides = "n_layers=2"\n')), {})
    # named like the unknown-key errors: the file, then the key
    assert err.value.field.endswith(":overrides")


def test_toml_syntax_error_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML") as err:
        load_toml(write(tmp_path, "steps = = 3\n"))
    assert err.value.field == "--config"
    with pytest.raises(SpecError, match="cannot be read") as err:
        load_toml(str(tmp_path / "missing.toml"))
    assert err.value.field == "--config"


def test_flags_override_file_values(tmp_path):
    path = write(tmp_path, 'steps = 40\nlr = 1e-3\nprecision = "bf16-mixed"\nseed = 7\n')
    cfg = make_config(load_toml(path), {"steps": 50, "lr": None, "precision": "fp32"})
    assert (cfg.steps, cfg.lr, cfg.precision, cfg.seed) == (50, 1e-3, "fp32", 7)
    # the same through the CLI's own argument handling
    cfg = from_argv("--config", path, "--steps", "60", "--lr", "2e-3")
    assert (cfg.steps, cfg.lr, cfg.precision, cfg.seed) == (60, 2e-3, "bf16-mixed", 7)
    assert cfg.warmup_steps == 6  # derived from the flag's steps, not the file's
    # --set replaces the file's model overrides; boolean flags win over the file too
    path = write(tmp_path, 'overrides = ["n_layers=2"]\ntensorboard = true\n', "b.toml")
    cfg = from_argv("--config", path, "--set", "n_layers=3", "--no-tensorboard")
    assert cfg.overrides == ("n_layers=3",) and cfg.tensorboard is False


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
    ],
)
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        TrainConfig(**kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field} = ")


def test_valid_edges_are_accepted():
    assert TrainConfig(steps=10, warmup_steps=10).warmup_steps == 10  # warmup == steps
    assert TrainConfig(steps=10, warmup_steps=0).warmup_steps == 0
    assert TrainConfig(steps=5).warmup_steps == 0  # 5 // 10
    assert TrainConfig(grad_clip=0.0, weight_decay=0.0, min_lr_ratio=0.0).grad_clip == 0.0


def test_unknown_optimizer_is_refused_by_the_config():
    with pytest.raises(SpecError) as err:
        TrainConfig(optimizer="lion")
    assert err.value.field == "optimizer"


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


def one_error_line(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trainbudget train: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (("--steps", "ten"), ("steps", "ten")),
        (("--steps", "0"), ("steps",)),
        (("--steps", "1.5"), ("steps", "1.5")),
        (("--micro-batch", "-4"), ("micro_batch",)),
        (("--lr", "fast"), ("lr", "fast")),
        (("--precision", "fp8"), ("precision", "fp8", "bf16-mixed")),
        (("--schedule", "step"), ("schedule", "step", "cosine")),
        (("--device", "tpu"), ("device", "tpu")),
        (("--strategy", "zero3"), ("strategy", "zero3")),
        (("--steps", "10", "--warmup-steps", "20"), ("warmup_steps", "20")),
        (("--config", "{tmp}/missing.toml"), ("--config", "missing.toml", "cannot be read")),
        (("--config", "{tmp}/bad.toml"), ("bad.toml", "stepz", "unknown key")),
        (("--config", "{tmp}/typed.toml"), ("steps", "must be")),
    ],
)
def test_cli_malformed_input_exits_2_with_one_line(tmp_path, argv, needles):
    write(tmp_path, "stepz = 3\n", "bad.toml")
    write(tmp_path, 'steps = "many"\n', "typed.toml")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    one_error_line(*cli("train", "--out", str(tmp_path / "run"), *argv), *needles)
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.torch
def test_cli_data_not_a_prepared_dir(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "notes.txt").write_text("just text\n")
    code, out, err = cli(
        "train", "--data", str(tmp_path / "raw"), "--out", str(tmp_path / "run"), "--steps", "2"
    )
    one_error_line(code, out, err, "data", "raw", "meta.json")


@pytest.mark.torch
def test_cli_set_unknown_model_field(tmp_path):
    pytest.importorskip("torch")
    from trainbudget.data.prepare import prepare

    prepare(None, tmp_path / "data", tokenizer="byte")
    code, out, err = cli(
        "train",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--set",
        "n_layerz=2",
    )
    one_error_line(code, out, err, "n_layerz")
