"""The API's option tables are the CLI parsers' defaults: a keyword left out means what an
option left off the command line means."""

from __future__ import annotations

import inspect

import pytest

import trainbudget as tb
from trainbudget.api.inputs.options import ESTIMATE_DEFAULTS, PLAN_DEFAULTS, as_text, namespace
from trainbudget.cli.main import build_parser
from trainbudget.core.errors import SpecError

PARSER_ONLY = {"command", "model", "_module"}


def _parsed(command: str) -> dict:
    args = build_parser(only=command).parse_args([command, "--model", "gpt2", "--gpus", "1"])
    return {k: v for k, v in vars(args).items() if k not in PARSER_ONLY}


@pytest.mark.parametrize(
    ("command", "table"), [("estimate", ESTIMATE_DEFAULTS), ("plan", PLAN_DEFAULTS)]
)
def test_the_tables_are_the_parsers_defaults(command, table):
    parsed = _parsed(command)
    parsed["gpus"] = table["gpus"]  # given above: plan requires it
    assert table == parsed


@pytest.mark.parametrize(
    ("function", "table"), [(tb.estimate, ESTIMATE_DEFAULTS), (tb.plan, PLAN_DEFAULTS)]
)
def test_every_keyword_is_an_option_and_its_default_means_the_same(function, table):
    params = dict(inspect.signature(function).parameters)
    params.pop("model")
    cli_only = {"json", "emit", "emit_out"}  # printing and files: trainbudget.emit returns text
    assert set(params) == set(table) - cli_only
    for name, p in params.items():
        if p.default in (None, ()) or p.default is inspect.Parameter.empty:
            continue  # None: the option's own default; () no --set
        assert as_text(name, p.default) == table[name], name


def test_numbers_become_the_text_a_user_types():
    args = namespace(ESTIMATE_DEFAULTS, "gpt2", {"gpus": 1024, "mfu": 0.4, "tokens": "15T"})
    assert (args.gpus, args.mfu, args.tokens) == ("1024", "0.4", "15T")
    assert namespace(PLAN_DEFAULTS, "gpt2", {"zero_stages": (0, 3)}).zero_stages == "0,3"
    one = namespace(ESTIMATE_DEFAULTS, "gpt2", {"overrides": "n_layers=4"}).overrides
    assert one == namespace(ESTIMATE_DEFAULTS, "gpt2", {"overrides": ["n_layers=4"]}).overrides
    assert one == ["n_layers=4"]  # one --set, not one per character


def test_an_unusable_value_names_the_field():
    with pytest.raises(SpecError, match=r"^gpus = \{\}: must be a number or a string"):
        as_text("gpus", {})
    with pytest.raises(SpecError, match=r"^gpus = True: must be a number or a string"):
        tb.estimate("gpt2", gpus=True)
    with pytest.raises(SpecError, match=r"^sp = 'yes': must be True or False"):
        tb.estimate("gpt2", sp="yes")
