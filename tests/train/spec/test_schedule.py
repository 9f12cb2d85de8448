"""Learning-rate schedules: exact values at the landmarks, shape, validation, apply_lr."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.train.spec.schedule import SCHEDULES, Schedule, apply_lr, lr_at

# base 1.0, 10 warmup steps, 110 in all, final rate 0.1: the decay phase is steps 10..110
BASE = dict(base_lr=1.0, warmup_steps=10, total_steps=110, min_lr_ratio=0.1)


def at(kind: str, step: int, **kw) -> float:
    return lr_at(step, schedule=kind, **{**BASE, **kw})


@pytest.mark.parametrize("kind", SCHEDULES)
def test_warmup_is_the_same_for_every_kind(kind):
    # step < W: lr0 * (step + 1) / (W + 1)
    assert at(kind, 0) == pytest.approx(1 / 11)
    assert at(kind, 4) == pytest.approx(5 / 11)
    assert at(kind, 9) == pytest.approx(10 / 11)
    # end of warmup (step == W): the peak
    assert at(kind, 10) == pytest.approx(1.0)


def test_cosine_landmarks():
    # lr_min + (lr0 - lr_min) * (1 + cos(pi q)) / 2 with q = (step - 10) / 100
    assert at("cosine", 35) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    assert at("cosine", 60) == pytest.approx(0.55)  # midpoint: q = 1/2, cos = 0
    assert at("cosine", 110) == pytest.approx(0.1)  # end
    assert at("cosine", 1000) == pytest.approx(0.1)  # past the end: stays at the end value


def test_linear_landmarks():
    # lr_min + (lr0 - lr_min) * (1 - q)
    assert at("linear", 35) == pytest.approx(0.1 + 0.9 * 0.75)
    assert at("linear", 60) == pytest.approx(0.55)
    assert at("linear", 110) == pytest.approx(0.1)
    assert at("linear", 500) == pytest.approx(0.1)


def test_constant_landmarks():
    assert at("constant", 60) == 1.0
    assert at("constant", 109) == 1.0
    assert at("constant", 110) == 1.0  # min_lr_ratio plays no part
    assert at("constant", 500) == 1.0


def test_wsd_landmarks():
    # decay starts at D = max(10, 110 - 0.2 * 110) = 88, then lr_min + 0.9 * (1 - (s - 88) / 22)
    s = Schedule(kind="wsd", **BASE)
    assert s.decay_start == pytest.approx(88)
    assert at("wsd", 60) == 1.0  # midpoint of the run: still stable
    assert at("wsd", 88) == 1.0
    assert at("wsd", 99) == pytest.approx(0.55)  # midpoint of the decay
    assert at("wsd", 110) == pytest.approx(0.1)
    assert at("wsd", 77, decay_fraction=0.5) == pytest.approx(0.1 + 0.9 * (1 - 22 / 55))


def test_wsd_decay_never_starts_inside_warmup():
    s = Schedule(kind="wsd", base_lr=1.0, warmup_steps=50, total_steps=100, decay_fraction=0.8)
    assert s.decay_start == 50  # not 100 - 80 = 20
    assert s(50) == 1.0
    assert s(75) == pytest.approx(0.1 + 0.9 * 0.5)


@pytest.mark.parametrize("kind", SCHEDULES)
def test_monotonic(kind):
    s = Schedule(kind=kind, **BASE)
    values = [s(step) for step in range(0, 121)]
    warm, rest = values[:11], values[10:]
    assert all(a < b for a, b in itertools.pairwise(warm))  # strictly rising through warmup
    assert all(a >= b for a, b in itertools.pairwise(rest))  # never rising afterwards
    assert max(values) == pytest.approx(1.0)
    assert min(values[10:]) == pytest.approx(1.0 if kind == "constant" else 0.1)


def test_wsd_flat_then_decaying():
    s = Schedule(kind="wsd", **BASE)
    assert {s(step) for step in range(10, 89)} == {1.0}
    decay = [s(step) for step in range(88, 111)]
    assert all(a > b for a, b in itertools.pairwise(decay))
    # linear decay: constant differences
    diffs = [a - b for a, b in itertools.pairwise(decay)]
    assert max(diffs) == pytest.approx(min(diffs))


def test_cosine_is_symmetric_about_the_midpoint():
    s = Schedule(kind="cosine", **BASE)
    for k in range(0, 50, 7):
        assert s(60 - k) + s(60 + k) == pytest.approx(2 * 0.55)


def test_no_warmup_and_all_warmup():
    s = Schedule(kind="cosine", base_lr=2.0, warmup_steps=0, total_steps=4, min_lr_ratio=0.0)
    assert [s(k) for k in range(5)] == pytest.approx([2.0, 1.0 + 2**-0.5, 1.0, 1.0 - 2**-0.5, 0])
    s = Schedule(kind="linear", base_lr=1.0, warmup_steps=4, total_steps=4)
    assert [s(k) for k in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert s(4) == pytest.approx(0.1)


def test_schedule_and_lr_at_agree_and_schedule_is_frozen():
    s = Schedule(kind="cosine", base_lr=3e-3, warmup_steps=30, total_steps=300)
    assert s.min_lr == pytest.approx(3e-4)
    for step in (0, 29, 30, 165, 299, 300):
        assert (
            s.lr_at(step)
            == s(step)
            == lr_at(step, schedule="cosine", base_lr=3e-3, warmup_steps=30, total_steps=300)
        )
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.base_lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"total_steps": -5}, "total_steps"),
        ({"total_steps": 0, "warmup_steps": 0}, "total_steps"),
        ({"warmup_steps": 111}, "warmup_steps"),
        ({"warmup_steps": 2.5}, "warmup_steps"),
        ({"total_steps": True}, "total_steps"),
        ({"min_lr_ratio": -0.1}, "min_lr_ratio"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"decay_fraction": 1.01}, "decay_fraction"),
        ({"base_lr": -1e-3}, "base_lr"),
        ({"base_lr": float("inf")}, "base_lr"),
    ],
)
def test_bad_arguments_name_the_field(changes, field):
    with pytest.raises(SpecError) as err:
        Schedule(kind="cosine", **{**BASE, **changes})
    assert err.value.field == field
    with pytest.raises(SpecError):
        lr_at(0, schedule="cosine", **{**BASE, **changes})


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(SpecError) as err:
        lr_at(0, schedule="exponential", **BASE)
    assert err.value.field == "schedule"
    for kind in ("cosine", "linear", "constant", "wsd"):
        assert kind in str(err.value)


def test_negative_step():
    with pytest.raises(SpecError) as err:
        at("cosine", -1)
    assert err.value.field == "step"


def test_edge_ratios_are_accepted():
    assert at("linear", 110, min_lr_ratio=0.0) == 0.0
    assert at("cosine", 60, min_lr_ratio=1.0) == pytest.approx(1.0)
    assert at("wsd", 109, decay_fraction=0.0) == 1.0


class _Groups:
    def __init__(self, *lrs):
        self.param_groups = [{"lr": lr} for lr in lrs]


def test_apply_lr_sets_every_group_and_an_inner_optimizer():
    opt = _Groups(1.0, 2.0)
    opt.inner = _Groups(3.0)
    apply_lr(opt, 0.25)
    assert [g["lr"] for g in opt.param_groups] == [0.25, 0.25]
    assert opt.inner.param_groups[0]["lr"] == 0.25


@pytest.mark.torch
def test_apply_lr_on_torch_optimizers():
    torch = pytest.importorskip("torch")
    from trainbudget.model.optim import MasterWeightOptimizer

    p = torch.nn.Parameter(torch.ones(2))
    sgd = torch.optim.SGD([p], lr=1.0)
    apply_lr(sgd, 0.5)
    p.grad = torch.ones(2)
    sgd.step()
    assert torch.equal(p.detach(), torch.full((2,), 0.5))

    # a tensor lr is filled in place (the tensor a compiled step captured stays the same)
    lr_tensor = torch.tensor(1.0)
    adam = torch.optim.Adam([p], lr=lr_tensor, foreach=False)
    apply_lr(adam, 0.125)
    assert adam.param_groups[0]["lr"] is lr_tensor and lr_tensor.item() == 0.125

    # the master-weight optimizer steps its inner optimizer: that one must change too
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    mw = MasterWeightOptimizer(model, "sgd", lr=1.0)
    apply_lr(mw, 0.0)
    before = [q.detach().clone() for q in model.parameters()]
    model(torch.ones(1, 2, dtype=torch.bfloat16)).sum().backward()
    mw.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert mw.inner.param_groups[0]["lr"] == 0.0
