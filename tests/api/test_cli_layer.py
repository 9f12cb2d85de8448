"""The CLI's `estimate` and `plan` print the API's answer: each command reads its options and
hands them to the one function `trainbudget.estimate` / `plan` call, then prints what comes
back (no second path to the numbers)."""

from __future__ import annotations

import json

import pytest
from tests.clirun import cli

import trainbudget.cli.plan.estimate_cmd as estimate_cmd
import trainbudget.cli.plan.plan_cmd as plan_cmd


class Answer:
    """Stands for a result: the document the CLI must print as it is."""

    def json_text(self) -> str:
        return json.dumps({"from": "the api"})


@pytest.mark.parametrize(
    ("module", "name", "argv"),
    [
        (estimate_cmd, "answer_estimate", ["estimate", "--model", "gpt2"]),
        (estimate_cmd, "answer_estimate", ["estimate", "--model", "llama-3-8b", "--gpus", "64"]),
        (plan_cmd, "answer_plan_command", ["plan", "--model", "gpt2", "--gpus", "8"]),
    ],
)
def test_the_json_printed_is_the_answers(monkeypatch, module, name, argv):
    seen = []

    def answer(args, *rest):
        seen.append(args.model)
        return Answer()

    monkeypatch.setattr(module, name, answer)
    code, out, err = cli(*argv, "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"from": "the api"} and seen == [argv[2]]


def test_the_entry_points_call_the_same_functions():
    from trainbudget.api.answers import estimate_answer, plan_answer

    assert estimate_cmd.answer_estimate is estimate_answer.answer_estimate
    assert plan_cmd.answer_plan_command is plan_answer.answer_plan_command
