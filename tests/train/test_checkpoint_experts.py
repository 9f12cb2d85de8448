"""train.checkpointing.experts: an optimizer state re-keyed by parameter name and back by
position over another parameter list -- how an expert-parallel rank's state joins the whole
model's optimizer.pt and is cut out of it again. torch's AdamW and the bf16-mixed
MasterWeightOptimizer, in one process (the 2-rank round trip is test_expert_parallel's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trainbudget.model.optim import MasterWeightOptimizer  # noqa: E402
from trainbudget.train.checkpointing.experts import named_state, positional_state  # noqa: E402


def _stepped(optimizer, model: torch.nn.Module):
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    return optimizer


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


NAMES = ["0.weight", "0.bias", "1.weight", "1.bias"]


@pytest.mark.parametrize("kind", ["adamw", "bf16-mixed"])
def test_a_state_survives_names_and_back(kind):
    model = _model()
    if kind == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    else:
        optimizer = MasterWeightOptimizer(model, "adamw", 0.1)
    state = _stepped(optimizer, model).state_dict()
    named = named_state(state, NAMES)
    back = positional_state(named, NAMES)
    inner, inner_back = (state, back) if kind == "adamw" else (state["inner"], back["inner"])
    assert inner_back["param_groups"] == inner["param_groups"]
    assert sorted(inner_back["state"]) == sorted(inner["state"]) == [0, 1, 2, 3]
    for i, per_param in inner["state"].items():
        for key, value in per_param.items():
            assert torch.equal(inner_back["state"][i][key], value)
    if kind == "bf16-mixed":
        assert all(
            torch.equal(a, b) for a, b in zip(back["masters"], state["masters"], strict=True)
        )


def test_a_part_of_the_parameters_takes_its_own_entries_at_its_own_positions():
    # a rank holding the second layer only: the whole state cut to it, positions 0 and 1
    model = _model()
    optimizer = _stepped(torch.optim.AdamW(model.parameters(), lr=0.1), model)
    full = optimizer.state_dict()
    part = positional_state(named_state(full, NAMES), ["1.weight", "1.bias"])
    assert part["param_groups"][0]["params"] == [0, 1]
    assert torch.equal(part["state"][0]["exp_avg"], full["state"][2]["exp_avg"])
    assert torch.equal(part["state"][1]["exp_avg_sq"], full["state"][3]["exp_avg_sq"])
    # and it loads into an optimizer over those parameters
    second = torch.optim.AdamW(model[1].parameters(), lr=0.1)
    second.load_state_dict(part)
    assert torch.equal(second.state[model[1].weight]["exp_avg"], full["state"][2]["exp_avg"])
