"""`TRAINBUDGET_MAX_STEPS` (cli.run.train_cmd.capped_steps): the variable the README names to cut
every run's steps, so that its commands run in order in seconds (tests/test_readme_order.py).
It must cut (never raise) the steps, wherever they came from, cut a warmup that would then
exceed them, say so, and refuse a bad value in one line naming the variable. No torch needed:
the configuration is built, not run."""

from __future__ import annotations

import pytest

from clirun import one_line_error
from trainbudget.cli.run.train_cmd import MAX_STEPS_ENV, capped_steps, config_from_args


def _config(*argv: str):
    from trainbudget.cli.main import build_parser

    return config_from_args(build_parser(only="train").parse_args(["train", *argv]))


def test_the_flag_and_the_default_are_cut_to_the_cap(monkeypatch, capsys):
    monkeypatch.setenv(MAX_STEPS_ENV, "20")
    cfg = _config("--steps", "2000", "--checkpoint-every", "200")
    assert (cfg.steps, cfg.warmup_steps, cfg.checkpoint_every) == (20, 2, 200)
    assert "TRAINBUDGET_MAX_STEPS=20: 2000 steps cut to 20" in capsys.readouterr().err
    assert _config().steps == 20  # the default, 300


def test_a_shorter_run_is_left_alone(monkeypatch, capsys):
    monkeypatch.setenv(MAX_STEPS_ENV, "20")
    assert _config("--steps", "5").steps == 5
    assert capsys.readouterr().err == ""


def test_a_warmup_beyond_the_cap_is_cut_with_it():
    changed = capped_steps({"steps": 1000, "warmup_steps": 100}, {MAX_STEPS_ENV: "1e1"})
    assert changed == {"steps": 10, "warmup_steps": 10}
    assert capped_steps({"steps": 1000}, {}) == {}
    # a worker under torchrun says nothing (rank 0 does)
    assert capped_steps({"steps": 30}, {MAX_STEPS_ENV: "20", "RANK": "1"}) == {"steps": 20}


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5"])
def test_a_bad_cap_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(MAX_STEPS_ENV, value)
    line = one_line_error(("train", "--steps", "10"))
    assert line == (
        f"trainbudget train: error: TRAINBUDGET_MAX_STEPS = '{value}': must be a whole number "
        ">= 1 (the most steps a run takes)"
    )
