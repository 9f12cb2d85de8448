"""The MoE layer (model.moe): an expert without tokens stays in the graph with a zero gradient,
the auxiliary losses against hand computations, the capacity rule's drops and queue order."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.spec.model_spec import ModelSpec

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trainbudget.model.moe import (  # noqa: E402
    MoE,
    balance_loss,
    expert_capacity,
    router_stats,
    z_loss,
)
from trainbudget.model.transformer import build_model  # noqa: E402

D, E = 8, 4
SPEC = ModelSpec(
    name="tiny-moe",
    vocab_size=32,
    d_model=D,
    n_layers=2,
    n_heads=2,
    d_ff=16,
    max_seq_len=16,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    n_experts=E,
    experts_per_token=1,
)


def _layer(spec: ModelSpec = SPEC, favourite: int = 0) -> MoE:
    """A layer whose router sends every token with a positive feature 0 to `favourite` first,
    then to the experts in index order (logits 10*x0, 3*x0, 2*x0, ... for the others)."""
    torch.manual_seed(0)
    layer = MoE(spec, {})
    with torch.no_grad():
        layer.router.weight.zero_()
        others = [e for e in range(spec.n_experts) if e != favourite]
        layer.router.weight[favourite, 0] = 10.0
        for rank, e in enumerate(others):
            layer.router.weight[e, 0] = 3.0 - rank
    return layer


def _tokens(n: int) -> torch.Tensor:
    """(1, n, D) inputs with feature 0 positive: the router's order above holds."""
    x = torch.randn(1, n, D, generator=torch.Generator().manual_seed(1))
    x[..., 0] = x[..., 0].abs() + 0.5
    return x


def test_an_expert_without_tokens_keeps_a_zero_gradient() -> None:
    # the crash: DDP and FSDP2 need every expert's gradient on every rank, even when
    # routing gave it nothing; here every token goes to expert 2
    layer = _layer(SPEC.replace(capacity_factor=0.0), favourite=2)
    layer(_tokens(6)).square().sum().backward()
    for e, expert in enumerate(layer.experts):
        for name, p in expert.named_parameters():
            assert p.grad is not None, (e, name)
            if e == 2:
                assert torch.count_nonzero(p.grad) > 0, (e, name)
            else:
                assert torch.count_nonzero(p.grad) == 0, (e, name)
    assert torch.count_nonzero(layer.router.weight.grad) > 0


def test_a_whole_model_gives_every_parameter_a_gradient() -> None:
    # micro-batch 1 of 4 tokens over 4 experts, top-1: some expert gets nothing in some layer
    model = build_model(SPEC.replace(capacity_factor=1.0), seed=3)
    idx = torch.randint(0, 32, (1, 4), generator=torch.Generator().manual_seed(2))
    _, loss = model(idx, idx)
    stats = router_stats(model)
    (loss + stats.balance_loss + stats.z_loss).backward()
    assert all(p.grad is not None for p in model.parameters())
    idle = [
        e
        for block in model.blocks
        for e, expert in enumerate(block.mlp.experts)
        if all(torch.count_nonzero(p.grad) == 0 for p in expert.parameters())
    ]
    assert idle  # the case in question: an expert that got no token


def test_top1_gate_is_the_router_probability_so_the_task_loss_trains_the_router() -> None:
    # Switch eq. 2: y = p_i(x) E_i(x); renormalised over one expert the gate would be 1 and the
    # router's gradient from the output 0
    layer = _layer(SPEC.replace(capacity_factor=0.0))
    layer(_tokens(3)).sum().backward()
    assert torch.count_nonzero(layer.router.weight.grad) > 0


def test_balance_and_z_loss_by_hand() -> None:
    # 3 tokens, 2 experts; softmax rows (1/4, 3/4), (1/4, 3/4), (3/4, 1/4); top-1 picks 1, 1, 0
    # f = (1/3, 2/3); P = (5/12, 7/12); Switch eq. 4 without alpha: 2 * (5/36 + 14/36) = 19/18
    # each row's logsumexp is ln(1 + 3) = ln 4: ST-MoE eq. 5 gives (ln 4)^2
    t = math.log(3)
    logits = torch.tensor([[0.0, t], [0.0, t], [t, 0.0]])
    chosen = logits.topk(1, dim=-1).indices
    assert chosen.flatten().tolist() == [1, 1, 0]
    assert balance_loss(logits.softmax(-1), chosen).item() == pytest.approx(19 / 18)
    assert z_loss(logits).item() == pytest.approx(math.log(4) ** 2)
    # uniform routing: f = P = 1/E, the loss is 1 whatever E
    even = torch.zeros(4, 4)
    assert balance_loss(even.softmax(-1), torch.arange(4)[:, None]).item() == pytest.approx(1.0)


def test_router_stats_sum_the_layers_and_are_taken_once() -> None:
    model = build_model(SPEC.replace(capacity_factor=0.0), seed=1)
    idx = torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(0))
    model(idx)
    layers = [b.mlp.stats for b in model.blocks]
    total = router_stats(model)
    assert total.n_layers == 2 and total.assigned == 2 * 10 and total.dropped == 0
    torch.testing.assert_close(total.balance_loss, layers[0].balance_loss + layers[1].balance_loss)
    assert router_stats(model) is None  # taken
    model.eval()
    with torch.no_grad():
        model(idx)
    assert router_stats(model) is None  # evaluation keeps no training figures


def test_capacity_follows_switch() -> None:
    # Switch Sec. 2.2: capacity = tokens per batch / experts x capacity factor (rounded up)
    assert expert_capacity(32, 1, 8, 1.25) == 5
    assert expert_capacity(32, 2, 8, 1.0) == 8  # top-2: twice the assignments
    assert expert_capacity(32, 1, 8, 0.0) == 32  # dropless: never binds


def test_capacity_drops_the_overflow_which_passes_through() -> None:
    # 8 tokens all choosing expert 0, capacity 1.0 * 8 / 4 = 2: tokens 0 and 1 are kept, 6 are
    # dropped and the layer adds nothing for them (the block's residual carries them on)
    layer = _layer(SPEC.replace(capacity_factor=1.0))
    out = layer(_tokens(8))[0]  # (8, D)
    assert (layer.stats.dropped, layer.stats.assigned) == (6, 8)
    assert torch.count_nonzero(out[:2].abs().sum(-1)) == 2
    assert torch.count_nonzero(out[2:]) == 0
    # evaluation keeps every token
    layer.eval()
    with torch.no_grad():
        assert torch.count_nonzero(layer(_tokens(8))[0].abs().sum(-1)) == 8


def test_first_choices_queue_before_second_choices() -> None:
    # GShard's priority: every token's first choice queues before any second choice, then
    # token order. 3 tokens, top-2 of 4 experts, capacity ceil(0.5 * 3 * 2 / 4) = 1:
    # expert 0 is token 2's first choice and tokens 0 and 1's second: it keeps token 2;
    # expert 1 is token 0's first choice and token 2's second: it keeps token 0
    layer = MoE(SPEC.replace(experts_per_token=2, capacity_factor=0.5), {})
    seen: dict[int, torch.Tensor] = {}
    for e, expert in enumerate(layer.experts):
        expert.register_forward_hook(lambda _m, args, _out, e=e: seen.__setitem__(e, args[0]))
    flat = torch.randn(3, D)
    chosen = torch.tensor([[1, 0], [2, 0], [0, 1]])
    _, dropped = layer._dispatch(flat, chosen, torch.full((3, 2), 0.5))
    assert dropped == 3  # expert 0 drops 2, expert 1 drops 1
    torch.testing.assert_close(seen[0], flat[[2]])
    torch.testing.assert_close(seen[1], flat[[0]])
    torch.testing.assert_close(seen[2], flat[[1]])
    assert seen[3].shape == (0, D)  # the idle expert ran on an empty slice


def test_router_bias_gets_a_zero_gradient_edge() -> None:
    layer = MoE(SPEC.replace(router_bias=True), {})
    layer(_tokens(4)).sum().backward()
    assert layer.score_bias.grad is not None
    assert torch.count_nonzero(layer.score_bias.grad) == 0


@pytest.mark.parametrize("favourite", [None, 0], ids=["random-router", "collapsed"])
def test_tokens_the_experts_take_stay_within_the_cores_slots(favourite) -> None:
    # the core counts spec.routed_slots_per_token x N slots for the experts' buffers (their
    # activations and all-to-all bytes); the layer never fills more than E x capacity of them,
    # which is that figure rounded up to whole slots per expert
    spec = SPEC.replace(experts_per_token=2, capacity_factor=1.25)
    layer = MoE(spec, {}) if favourite is None else _layer(spec, favourite)
    n = 24
    layer(_tokens(n))
    kept = layer.stats.assigned - layer.stats.dropped
    slots = spec.routed_slots_per_token * n  # 1.25 x 2 x 24 = 60
    assert kept <= E * expert_capacity(n, 2, E, 1.25) == math.ceil(slots / E) * E
    if favourite is not None:  # collapsed: experts 0 and 1 (its 2nd choice) full, 2 and 3 idle
        assert kept == 2 * expert_capacity(n, 2, E, 1.25)
