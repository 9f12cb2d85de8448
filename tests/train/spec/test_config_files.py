"""Settings files (TOML, JSON) and flags into a run config: typing, precedence (defaults < file
< flags), the overrides merged field by field, and errors naming `FILE:key`
(train.spec.config_files). The malformed inputs of the whole CLI are test_config_errors.py's."""

from __future__ import annotations

import pytest

from trainbudget.cli.main import build_parser
from trainbudget.cli.run.train_cmd import config_from_args
from trainbudget.core.errors import SpecError
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.config_files import load_config_file, make_config, merge_overrides


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
