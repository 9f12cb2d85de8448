"""Seed 001's worked examples checked against real PyTorch objects: what torch allocates, what
FlopCounterMode counts and what autograd saves must equal the core's analytic figures.
Each test names its row of /work/shared/seed-examples.md."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.single.flops import matmul_flops
from trainbudget.core.single.linear_chain import cruncher_memory, linear_chain_flops
from trainbudget.core.spec.dtypes import tensor_bytes
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.profile.bench import matmul_bench

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402  (after the importorskip above)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

LOCAL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def counted_flops(fn) -> int:
    """Matmul FLOPs that PyTorch's FlopCounterMode sees while `fn` runs (elementwise ops such
    as pow, mean and the optimizer's update are not counted: the 6ND convention)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_tensor_mem() -> None:
    """S-tensor-mem: a 4x8 fp32 tensor holds 128 bytes."""
    x = torch.zeros(4, 8)
    assert x.dtype == torch.float32
    assert x.numel() * x.element_size() == 4 * 8 * 4 == 128
    assert tensor_bytes((4, 8), "fp32") == x.numel() * x.element_size()


def test_matmul_flops() -> None:
    """S-matmul-flops: (B, D) @ (D, K) is 2BDK FLOPs."""
    b, d, k = 8, 16, 4
    x, w = torch.randn(b, d), torch.randn(d, k)
    assert counted_flops(lambda: x @ w) == 2 * b * d * k == matmul_flops(b, d, k)


@pytest.mark.parametrize("input_grad", [True, False])
def test_linear_fwd_bwd(input_grad: bool) -> None:
    """S-linear-fwd-bwd: x -w1(DxD)-> h1 -w2(DxK)-> h2. Forward 2BDD + 2BDK; backward
    4BDD + 4BDK when x's gradient is computed (total 6 x B x params); without it autograd
    skips the (B, D) input gradient of the first matmul, 2BDD fewer."""
    b, d, k = 8, 16, 4
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(b, d, generator=gen).requires_grad_(input_grad)
    w1 = torch.randn(d, d, generator=gen, requires_grad=True)
    w2 = torch.randn(d, k, generator=gen, requires_grad=True)
    out = {}

    def forward() -> None:
        h1 = x @ w1  # (B, D)
        h2 = h1 @ w2  # (B, K)
        out["loss"] = h2.pow(2).mean()

    forward_flops = counted_flops(forward)
    backward_flops = counted_flops(lambda: out["loss"].backward())
    expected = linear_chain_flops(b, [d, d, k], input_grad=input_grad)
    assert forward_flops == 2 * b * d * d + 2 * b * d * k == expected.forward
    if input_grad:
        assert backward_flops == 4 * b * d * d + 4 * b * d * k == expected.backward
        assert forward_flops + backward_flops == 6 * b * (d * d + d * k)
    else:
        assert backward_flops == 2 * b * d * d + 4 * b * d * k == expected.backward
    assert (x.grad is not None) == input_grad


def test_mfu_on_local_device() -> None:
    """S-mfu: achieved FLOP/s of fp32 and bf16 matmuls on this device; on a CPU no catalog
    peak exists, so mfu is None rather than a guess."""
    results = matmul_bench([128], ["fp32", "bf16"], LOCAL_DEVICE, warmup=1, repeats=3)
    assert [r.dtype for r in results] == ["fp32", "bf16"]
    for r in results:
        assert r.flops == 2 * 128**3
        assert r.achieved_flops_per_second > 0
        if LOCAL_DEVICE == "cpu":
            assert r.mfu is None
            assert r.peak_flops_per_second is None


@pytest.mark.gpu
@needs_cuda
def test_mfu_on_gpu_within_peak() -> None:
    """S-mfu on a catalogued GPU: large matmuls reach a fraction of the datasheet peak in (0, 1]."""
    from trainbudget.profile.device import identify_device

    info = identify_device("cuda")
    if info.catalog_key is None:
        pytest.skip(f"no catalog peak for {info.name}")
    results = matmul_bench([4096], ["fp32", "bf16"], "cuda", warmup=3, repeats=10)
    assert len(results) == 2
    for r in results:
        assert r.mfu is not None
        assert 0 < r.mfu <= 1, r


# ---------------------------------------------------------------- the lecture's Cruncher


def _cruncher(d: int, n_layers: int, gen: torch.Generator) -> list[nn.Parameter]:
    """The deep linear model's weights: n_layers of (D, D) and a final (D, 1), no biases."""
    shapes = [(d, d)] * n_layers + [(d, 1)]
    return [nn.Parameter(torch.randn(s, generator=gen) / math.sqrt(s[0])) for s in shapes]


def _cruncher_forward(weights: list[nn.Parameter], x: torch.Tensor) -> torch.Tensor:
    h = x  # (B, D)
    for w in weights:
        h = h @ w  # (B, D), then (B, 1) after the final layer
    return h.squeeze(-1)  # (B,)


def _adagrad_step(
    weights: list[nn.Parameter], sum_sq: dict[int, torch.Tensor], lr: float = 0.01
) -> None:
    """AdaGrad (Duchi et al. 2011): one running sum of squared gradients per parameter, and a
    step of lr * g / sqrt(that sum). The sum is the optimizer's only state."""
    with torch.no_grad():
        for i, w in enumerate(weights):
            acc = sum_sq.setdefault(i, torch.zeros_like(w))
            acc.add_(w.grad * w.grad)
            w.sub_(lr * w.grad / (acc + 1e-10).sqrt())


def test_cruncher_memory() -> None:
    """S-cruncher-mem: D=4, 2 layers + final (D->1), batch 2, AdaGrad, fp32: params 36,
    activations 16, gradients 36, AdaGrad state 36 -> 4 x 124 = 496 bytes."""
    d, n_layers, b = 4, 2, 2
    gen = torch.Generator().manual_seed(0)
    weights = _cruncher(d, n_layers, gen)
    x, y = torch.randn(b, d, generator=gen), torch.tensor([4.0, 5.0])

    # what autograd keeps for backward, minus the weights and the input batch (which exist
    # anyway): the hidden layers' outputs h1, h2 of shape (B, D)
    kept = {w.data_ptr() for w in weights} | {x.data_ptr()}
    saved_activations = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in kept:
            saved_activations.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        pred = _cruncher_forward(weights, x)
    nn.functional.mse_loss(pred, y).backward()
    sum_sq: dict[int, torch.Tensor] = {}
    _adagrad_step(weights, sum_sq)

    n_params = sum(w.numel() for w in weights)
    n_activations = sum(saved_activations)
    n_grads = sum(w.grad.numel() for w in weights)
    n_state = sum(s.numel() for s in sum_sq.values())
    assert (n_params, n_activations, n_grads, n_state) == (36, 16, 36, 36)
    element = weights[0].element_size()
    total_bytes = element * (n_params + n_activations + n_grads + n_state)
    core = cruncher_memory(d=d, n_layers=n_layers, batch=b, optimizer="adagrad", precision="fp32")
    assert (core.n_params, core.n_activations, core.n_gradients, core.n_optimizer_states) == (
        n_params,
        n_activations,
        n_grads,
        n_state,
    )
    assert total_bytes == core.total_bytes == 496


@pytest.mark.parametrize(("input_grad", "expected"), [(True, 432), (False, 368)])
def test_cruncher_step_flops(input_grad: bool, expected: int) -> None:
    """S-cruncher-mem: one training step is 6 x B x params = 432 FLOPs when, as the 6ND
    convention does, the first layer's input gradient is counted; autograd skips it when the
    batch needs no gradient (2 x B x D x D = 64 fewer). The AdaGrad update is elementwise and
    FlopCounterMode, like the convention, does not count it."""
    d, n_layers, b = 4, 2, 2
    gen = torch.Generator().manual_seed(0)
    weights = _cruncher(d, n_layers, gen)
    x = torch.randn(b, d, generator=gen).requires_grad_(input_grad)
    y = torch.tensor([4.0, 5.0])

    def step() -> None:
        nn.functional.mse_loss(_cruncher_forward(weights, x), y).backward()
        _adagrad_step(weights, {})

    n_params = sum(w.numel() for w in weights)
    assert counted_flops(step) == expected
    core = linear_chain_flops(b, [d] * (n_layers + 1) + [1], input_grad=input_grad)
    assert core.total == expected
    if input_grad:
        assert expected == 6 * b * n_params


# ---------------------------------------------------------------- initialisation


def _trunc_normal(d_in: int, d_out: int, gen: torch.Generator) -> torch.Tensor:
    std = 1 / math.sqrt(d_in)
    return nn.init.trunc_normal_(
        torch.empty(d_in, d_out), std=std, a=-3 * std, b=3 * std, generator=gen
    )


@pytest.mark.parametrize("d_in", [16384, 1024])
def test_init_output_scale_independent_of_width(d_in: int) -> None:
    """S-init: with std 1/sqrt(d_in) truncated at 3 std, x @ w of x ~ N(0, 1) has std ~1 for
    any width; plain N(0, 1) weights give std ~sqrt(d_in) instead."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, d_in, generator=gen)  # (samples, d_in)
    scaled = (x @ _trunc_normal(d_in, 32, gen)).std().item()
    plain = (x @ torch.randn(d_in, 32, generator=gen)).std().item()
    assert scaled == pytest.approx(1.0, rel=0.10)
    assert plain == pytest.approx(math.sqrt(d_in), rel=0.10)


def test_model_init_weights_std() -> None:
    """S-init in the reference model: init_weights gives each Linear std 1/sqrt(fan_in), with
    no weight beyond 3 std."""
    from trainbudget.model.transformer import build_model

    spec = ModelSpec(vocab_size=64, d_model=64, n_layers=2, n_heads=4, d_ff=256, max_seq_len=16)
    model = build_model(spec, seed=0)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears
    for layer in linears:
        std = 1 / math.sqrt(layer.in_features)
        w = layer.weight.detach()
        # truncation at +-3 std lowers the std by ~1.3 %; the sample std of >= 4096 weights
        # is within a few % of it
        assert w.std().item() == pytest.approx(std, rel=0.10), layer
        assert w.abs().max().item() <= 3 * std * (1 + 1e-6), layer


# ---------------------------------------------------------------- GPU memory


@pytest.mark.gpu
@needs_cuda
def test_gpu_memory_delta() -> None:
    """S-gpu-delta: two 32x32 fp32 tensors on the GPU raise allocated memory by 8192 bytes."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = torch.zeros(32, 32).to("cuda:0")
    z = torch.zeros(32, 32, device="cuda:0")
    after = torch.cuda.memory_allocated()
    assert y.device == z.device == torch.device("cuda", 0)
    assert after - before == 2 * (32 * 32 * 4) == 8192
