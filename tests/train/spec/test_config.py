"""The run config (train.spec.config): the CLI's flags typed into it, and the help text taken
from the fields' docstrings. Nothing here imports torch (the config and the CLI's argument
handling do not); files are test_config_files.py's, the rules test_config_checks.py's."""

from __future__ import annotations

import pytest

from clirun import cli
from trainbudget.cli.main import build_parser
from trainbudget.cli.run.train_cmd import config_from_args
from trainbudget.train.spec.config import TrainConfig, config_fields, field_docs


def write(tmp_path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def from_argv(*argv: str) -> TrainConfig:
    return config_from_args(build_parser().parse_args(["train", *argv]))


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
