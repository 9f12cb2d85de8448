"""SGD and AdaGrad written out (seed 001) against torch's own: same parameters after 20 steps,
state sizes equal to what the estimating core charges, training works, state survives a
save/load; build_optimizer's choices."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.core.spec.precision import (  # noqa: E402
    OPTIMIZERS,
    TRAINABLE_OPTIMIZERS,
    get_optimizer,
    get_precision,
)
from trainbudget.model.optimizers import (  # noqa: E402
    FACTORIES,
    SGD,
    AdaGrad,
    Lion,
    build_optimizer,
)

pytestmark = pytest.mark.torch

# (ours, torch's, keyword arguments both take)
CASES = {
    "sgd": (SGD, torch.optim.SGD, {"lr": 0.05}),
    "sgd-wd": (SGD, torch.optim.SGD, {"lr": 0.05, "weight_decay": 0.1}),
    "momentum": (SGD, torch.optim.SGD, {"lr": 0.02, "momentum": 0.9}),
    "momentum-wd": (SGD, torch.optim.SGD, {"lr": 0.02, "momentum": 0.9, "weight_decay": 0.05}),
    "nesterov-wd": (
        SGD,
        torch.optim.SGD,
        {"lr": 0.02, "momentum": 0.8, "weight_decay": 0.05, "nesterov": True},
    ),
    "adagrad": (AdaGrad, torch.optim.Adagrad, {"lr": 0.1}),
    "adagrad-eps": (AdaGrad, torch.optim.Adagrad, {"lr": 0.1, "eps": 1e-3}),
    "adagrad-lr-decay": (AdaGrad, torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.05}),
    "adagrad-wd": (AdaGrad, torch.optim.Adagrad, {"lr": 0.1, "weight_decay": 0.1}),
    "adagrad-all": (
        AdaGrad,
        torch.optim.Adagrad,
        {
            "lr": 0.1,
            "eps": 1e-6,
            "lr_decay": 0.01,
            "weight_decay": 0.02,
            "initial_accumulator_value": 0.1,
        },
    ),
}


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4, bias=False)
    )


def batches(n: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed random regression problem: y = x @ W + noise."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 4, generator=g)
    out = []
    for _ in range(n):
        x = torch.randn(32, 8, generator=g)
        out.append((x, x @ w + 0.01 * torch.randn(32, 4, generator=g)))
    return out


def train(model, opt, data) -> list[float]:
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("case", list(CASES))
def test_same_parameters_as_torch_over_20_steps(case):
    ours_cls, torch_cls, kwargs = CASES[case]
    data = batches(20)
    a, b = tiny_model(), tiny_model()
    train(a, ours_cls(a.parameters(), **kwargs), data)
    train(b, torch_cls(b.parameters(), foreach=False, **kwargs), data)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=0)
    # and the parameters moved: the comparison is not of two untouched models
    assert not torch.equal(next(a.parameters()), next(tiny_model().parameters()))


def test_seed_adagrad_rule_by_hand():
    """One coordinate, three steps of p -= clr * g / (sqrt(sum g^2) + eps) with lr_decay."""
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = AdaGrad([p], lr=0.5, eps=0.0, lr_decay=0.5)
    expected, total = 1.0, 0.0
    for t, g in enumerate([2.0, -1.0, 3.0], start=1):
        p.grad = torch.tensor([g])
        opt.step()
        total += g * g
        expected -= 0.5 / (1 + (t - 1) * 0.5) * g / total**0.5
    assert p.item() == pytest.approx(expected, rel=1e-6)
    assert opt.state[p]["step"] == 3
    assert opt.state[p]["sum"].item() == pytest.approx(14.0)


def state_bytes(opt) -> int:
    """Bytes of full-size state tensors (scalars such as Adam's `step` excluded)."""
    return sum(
        v.numel() * v.element_size()
        for s in opt.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )


@pytest.mark.parametrize(
    ("name", "per_param"), [("sgd", 0), ("momentum", 4), ("adagrad", 4), ("adamw", 8)]
)
def test_state_bytes_equal_the_core(name, per_param):
    model = tiny_model()
    numel = sum(p.numel() for p in model.parameters())
    opt = build_optimizer(name, model.parameters(), lr=0.01)
    train(model, opt, batches(2))
    core = get_optimizer(name).state_bytes_per_param(get_precision("fp32"))
    assert core == per_param  # AdaGrad: one fp32 sum of squares, 4 bytes per parameter
    assert state_bytes(opt) == core * numel
    if name == "adagrad":
        assert all(set(s) == {"step", "sum"} for s in opt.state.values())
        assert all(isinstance(s["step"], int) for s in opt.state.values())


def test_every_row_has_a_factory_or_is_estimate_only():
    """The core's table and the factories name the same optimizers: a trainable row has a
    factory, an estimate-only row says why it has none, and no factory lacks a row."""
    assert set(FACTORIES) == set(TRAINABLE_OPTIMIZERS)
    assert set(FACTORIES) <= set(OPTIMIZERS)
    for name, row in OPTIMIZERS.items():
        assert row.trainable == (name in FACTORIES), name
        assert row.trainable or row.estimate_only_reason, name


@pytest.mark.parametrize("single_tensor", [False, True])
@pytest.mark.parametrize("name", list(FACTORIES))
def test_factory_state_is_the_rows_state_tensors(name, single_tensor):
    """Each factory's optimizer keeps exactly its row's full-size state tensors, by name, and
    the row's bytes (fp32); torch's own optimizers are for-loop when asked."""
    model = tiny_model()
    opt = build_optimizer(name, model.parameters(), lr=0.01, single_tensor=single_tensor)
    train(model, opt, batches(2))
    row = get_optimizer(name)
    for p, s in opt.state.items():
        full = {k for k, v in s.items() if isinstance(v, torch.Tensor) and v.shape == p.shape}
        assert full == set(row.state_tensors), (name, sorted(s))
    numel = sum(p.numel() for p in model.parameters())
    assert state_bytes(opt) == row.state_bytes_per_param(get_precision("fp32")) * numel
    if single_tensor:
        assert opt.defaults.get("foreach") in (None, False)  # ours have no foreach: for-loop
        assert not opt.defaults.get("fused")


@pytest.mark.parametrize("name", list(FACTORIES))
def test_tiny_model_loss_decreases(name):
    lr = {"sgd": 0.05, "momentum": 0.02, "adagrad": 0.05, "adam": 0.01, "adamw": 0.01}.get(
        name, 0.01
    )
    model = tiny_model()
    losses = train(model, build_optimizer(name, model.parameters(), lr=lr), batches(60))
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


@pytest.mark.parametrize("case", ["momentum-wd", "nesterov-wd", "adagrad-all"])
def test_state_dict_round_trip(case):
    ours_cls, _, kwargs = CASES[case]
    data = batches(10)
    model = tiny_model()
    opt = ours_cls(model.parameters(), **kwargs)
    train(model, opt, data[:5])
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)

    resumed = tiny_model(seed=123)  # different weights, overwritten by the load
    resumed.load_state_dict(saved["model"])
    opt2 = ours_cls(resumed.parameters(), **kwargs)
    opt2.load_state_dict(saved["opt"])
    for s1, s2 in zip(opt.state.values(), opt2.state.values(), strict=True):
        assert s1.keys() == s2.keys()
        for key in s1:
            if isinstance(s1[key], torch.Tensor):
                assert torch.equal(s1[key], s2[key])
                assert s1[key].data_ptr() != s2[key].data_ptr()
            else:
                assert s1[key] == s2[key]

    train(model, opt, data[5:])
    train(resumed, opt2, data[5:])
    for p1, p2 in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p1, p2)


def test_gradient_is_not_modified():
    model = tiny_model()
    for cls, kwargs in [
        (SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1, "nesterov": True}),
        (AdaGrad, {"lr": 0.1, "weight_decay": 0.1}),
    ]:
        opt = cls(model.parameters(), **kwargs)
        x, y = batches(1)[0]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        opt.step()
        for p, g in zip(model.parameters(), grads, strict=True):
            assert torch.equal(p.grad, g)


def test_parameters_without_gradient_are_skipped():
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(3))
    opt = AdaGrad([a, b], lr=0.1)
    a.grad = torch.ones(3)
    opt.step()
    assert torch.equal(b, torch.ones(3)) and b not in opt.state
    assert opt.state[a]["step"] == 1


def test_closure_and_param_groups():
    w = torch.nn.Parameter(torch.tensor([2.0]))
    v = torch.nn.Parameter(torch.tensor([2.0]))
    opt = SGD([{"params": [w]}, {"params": [v], "lr": 0.5}], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w**2).sum() + (v**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == pytest.approx(8.0)
    assert w.item() == pytest.approx(2.0 - 0.25 * 4.0)
    assert v.item() == pytest.approx(2.0 - 0.5 * 4.0)


def test_complex_adagrad_matches_torch():
    torch.manual_seed(0)
    init = torch.randn(5, dtype=torch.complex64)
    a = torch.nn.Parameter(init.clone())
    b = torch.nn.Parameter(init.clone())
    oa = AdaGrad([a], lr=0.1, weight_decay=0.1)
    ob = torch.optim.Adagrad([b], lr=0.1, weight_decay=0.1, foreach=False)
    for _ in range(5):
        g = torch.randn(5, dtype=torch.complex64)
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (SGD, {"lr": -1.0}, "lr"),
        (SGD, {"lr": 0.1, "momentum": -0.5}, "momentum"),
        (SGD, {"lr": 0.1, "weight_decay": -1.0}, "weight_decay"),
        (SGD, {"lr": 0.1, "nesterov": True}, "nesterov"),
        (AdaGrad, {"lr": float("nan")}, "lr"),
        (AdaGrad, {"eps": -1e-10}, "eps"),
        (AdaGrad, {"lr_decay": -0.1}, "lr_decay"),
        (AdaGrad, {"initial_accumulator_value": -1.0}, "initial_accumulator_value"),
    ],
)
def test_bad_hyperparameters(cls, kwargs, field):
    with pytest.raises(SpecError) as err:
        cls([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    assert err.value.field == field


def test_build_optimizer_classes_and_settings():
    params = list(tiny_model().parameters())
    sgd = build_optimizer("sgd", params, lr=0.1, weight_decay=0.01)
    assert type(sgd) is SGD and sgd.defaults["momentum"] == 0
    assert sgd.defaults["weight_decay"] == 0.01
    mom = build_optimizer("momentum", params, lr=0.1)
    assert type(mom) is SGD and mom.defaults["momentum"] == 0.9
    assert build_optimizer("momentum", params, lr=0.1, momentum=0.5).defaults["momentum"] == 0.5
    ada = build_optimizer("adagrad", params, lr=0.1, weight_decay=0.01)
    assert type(ada) is AdaGrad and ada.defaults["weight_decay"] == 0.01

    adamw = build_optimizer("adamw", params, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    assert type(adamw) is torch.optim.AdamW
    assert adamw.defaults["betas"] == (0.9, 0.95) and adamw.defaults["weight_decay"] == 0.1
    # plain CPU parameters: torch's fused CPU kernel (the fastest there)
    assert adamw.defaults["fused"] is True and not adamw.defaults["foreach"]
    adam = build_optimizer("adam", params, lr=1e-3, fused=False)
    assert type(adam) is torch.optim.Adam and adam.defaults["foreach"] is True
    # a generator of param groups works as for torch's optimizers
    groups = build_optimizer("adamw", iter([{"params": params[:1]}, {"params": params[1:]}]), lr=1)
    assert len(groups.param_groups) == 2


def test_build_optimizer_forced_fused_on_cpu():
    # torch >= 2.4 has a fused CPU Adam; forcing it must reach torch unchanged
    model = tiny_model()
    opt = build_optimizer("adamw", model.parameters(), lr=0.01, fused=True)
    assert opt.defaults["fused"] is True and not opt.defaults["foreach"]
    losses = train(model, opt, batches(30))
    assert losses[-1] < losses[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_build_optimizer_fused_on_cuda():
    model = tiny_model().cuda()
    opt = build_optimizer("adamw", model.parameters(), lr=0.01)
    assert opt.defaults["fused"] is True and not opt.defaults["foreach"]
    data = [(x.cuda(), y.cuda()) for x, y in batches(30)]
    losses = train(model, opt, data)
    assert losses[-1] < losses[0]
    # SGD and AdaGrad run on CUDA as well, equal to torch's there too
    for ours_cls, torch_cls, kwargs in (CASES["nesterov-wd"], CASES["adagrad-all"]):
        a, b = tiny_model().cuda(), tiny_model().cuda()
        train(a, ours_cls(a.parameters(), **kwargs), data[:20])
        train(b, torch_cls(b.parameters(), foreach=False, **kwargs), data[:20])
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(pa, pb, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["adamww", "AdamW"])
def test_build_optimizer_unknown_name(name):
    with pytest.raises(SpecError, match="unknown") as err:
        build_optimizer(name, [torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    assert err.value.field == "optimizer"
    for known in OPTIMIZERS:
        assert known in str(err.value)


@pytest.mark.parametrize("name", ["adafactor", "adamw-8bit"])
def test_build_optimizer_estimate_only_name(name):
    with pytest.raises(SpecError, match="estimate-only") as err:
        build_optimizer(name, [torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    assert err.value.field == "optimizer"
    for trainable in FACTORIES:
        assert trainable in str(err.value)


# ---- Lion ------------------------------------------------------------------------------------


def lion_by_hand(theta, grads, *, lr, beta1, beta2, weight_decay):
    """Chen et al. 2023 (arXiv 2302.06675), Algorithm 2, one coordinate at a time in Python
    floats: c = b1 m + (1 - b1) g; theta -= lr (sign(c) + wd theta); m = b2 m + (1 - b2) g."""
    theta, m = list(theta), [0.0] * len(theta)
    for g in grads:
        for i, gi in enumerate(g):
            c = beta1 * m[i] + (1 - beta1) * gi
            sign = (c > 0) - (c < 0)
            theta[i] -= lr * (sign + weight_decay * theta[i])
            m[i] = beta2 * m[i] + (1 - beta2) * gi
    return theta, m


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_lion_follows_the_papers_rule(weight_decay):
    """Five steps on four coordinates whose gradients change sign, so that sign(c) flips where
    the momentum and the new gradient disagree (the paper's defaults betas 0.9, 0.99)."""
    theta0 = [0.5, -1.0, 2.0, 0.25]
    grads = [
        [1.0, -2.0, 0.5, 3.0],
        [-3.0, 1.0, 0.5, -0.1],
        [0.2, 0.3, -4.0, -0.2],
        [-0.4, -0.5, 1.0, 5.0],
        [2.0, 0.1, -0.3, -6.0],
    ]
    p = torch.nn.Parameter(torch.tensor(theta0, dtype=torch.float64))
    opt = build_optimizer("lion", [p], lr=0.01, weight_decay=weight_decay)
    assert type(opt) is Lion and opt.defaults["betas"] == (0.9, 0.99)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    theta, m = lion_by_hand(
        theta0, grads, lr=0.01, beta1=0.9, beta2=0.99, weight_decay=weight_decay
    )
    assert p.tolist() == pytest.approx(theta, abs=1e-12)
    assert opt.state[p]["exp_avg"].tolist() == pytest.approx(m, abs=1e-12)
    assert set(opt.state[p]) == {"exp_avg"}  # the one state tensor of the core's row


def test_lion_step_is_lr_in_every_coordinate():
    """The update is a sign: without decay every coordinate moves by exactly lr."""
    p = torch.nn.Parameter(torch.zeros(3))
    opt = Lion([p], lr=0.5)
    p.grad = torch.tensor([1e-6, -3.0, 200.0])
    opt.step()
    assert p.tolist() == [-0.5, 0.5, -0.5]


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"betas": (0.9, 1.0)}, "betas[1]"), ({"lr": -1}, "lr")]
)
def test_lion_bad_hyperparameters(kwargs, field):
    with pytest.raises(SpecError) as err:
        Lion([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    assert err.value.field == field
