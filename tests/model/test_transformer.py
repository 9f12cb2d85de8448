"""The reference transformer against the core: parameter counts and shapes for every preset,
then the layers' numerics (RMSNorm, RoPE, causal attention, recomputation, initialisation) on
tiny CPU models."""

from __future__ import annotations

import functools
import math
from collections import Counter

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.presets import PRESETS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402  (after the importorskip above)
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

from trainbudget.model.transformer import (  # noqa: E402
    RMSNorm,
    _RMSNormFunction,
    apply_rope,
    build_model,
    count_model_params,
    rope_tables,
)

V, T = 256, 32  # tiny vocabulary and sequence: the whole file runs in seconds on 2 cores

GPT2_LIKE = ModelSpec(
    name="tiny-gpt2",
    vocab_size=V,
    d_model=64,
    n_layers=2,
    n_heads=4,
    d_ff=256,
    max_seq_len=T,
    bias=True,
)
LLAMA_LIKE = ModelSpec(
    name="tiny-llama",
    vocab_size=V,
    d_model=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    d_ff=128,
    max_seq_len=T,
    mlp="swiglu",
    norm="rmsnorm",
    position="rope",
    tied_embeddings=False,
)
MOE_LIKE = LLAMA_LIKE.replace(
    name="tiny-moe", d_ff=64, n_experts=4, experts_per_token=2, n_shared_experts=1
)
# Qwen3-like: heads of 32 on a 64-wide stream (n_heads * head_dim != d_model), QK-norm
QWEN3_LIKE = LLAMA_LIKE.replace(name="tiny-qwen3", head_dim=32, qk_norm=True)
# Gemma-like: GeGLU, post-norms, tied head, windows of 8 with every 2nd layer global
GEMMA_LIKE = LLAMA_LIKE.replace(
    name="tiny-gemma",
    head_dim=32,
    qk_norm=True,
    gate_activation="gelu_tanh",
    post_norms=True,
    tied_embeddings=True,
    sliding_window=8,
    global_every=2,
)
# DeepSeek-V3-like: MLA (q and kv latents, 8 of each head rotary), one dense layer, then MoE
# with a shared expert and a router bias
MLA_LIKE = LLAMA_LIKE.replace(
    name="tiny-mla",
    n_kv_heads=4,
    head_dim=24,
    q_lora_rank=32,
    kv_lora_rank=16,
    rope_head_dim=8,
    v_head_dim=16,
    n_experts=4,
    experts_per_token=2,
    n_shared_experts=1,
    d_ff_expert=32,
    n_dense_layers=1,
    router_bias=True,
)
TINY = [GPT2_LIKE, LLAMA_LIKE, MOE_LIKE, QWEN3_LIKE, GEMMA_LIKE, MLA_LIKE]
TINY_IDS = [s.name for s in TINY]


def _tokens(spec: ModelSpec, batch: int = 2, seq: int = T, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (batch, seq), generator=gen)


# ---- one source of truth: the torch model has the core's parameters (STYLE.md point 2) ------


@functools.cache
def _meta_model(name: str):
    """Every preset, even llama-3-405b, on the meta device: shapes without storage."""
    return build_model(PRESETS[name], device="meta")


# Which core matrix (core.params.matrix_shapes) each 2-D parameter is, and whether it is stored
# transposed: nn.Linear keeps (out, in) while the core lists linear layers as (in, out); the
# embeddings and the head are listed as (V or max_seq_len) x d, exactly as they are stored.
def _core_matrix(param_name: str) -> tuple[str, bool]:
    leaf = param_name.split(".")[-2]
    table = {
        "tok": ("embedding/token", False),
        "pos": ("embedding/position", False),
        "head": ("head", False),
        "qkv": ("attention/qkv", True),
        "q": ("attention/q", True),
        "q_down": ("attention/q_down", True),
        "q_up": ("attention/q_up", True),
        "kv_down": ("attention/kv_down", True),
        "kv_up": ("attention/kv_up", True),
        "proj": ("attention/proj", True),
        "up": ("mlp/in", True),
        "gate": ("mlp/in", True),
        "down": ("mlp/down", True),
        "router": ("moe/router", True),
    }
    return table[leaf]


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_param_count_matches_core(name: str) -> None:
    """The published counts themselves are pinned in tests/core/spec/test_presets.py."""
    assert count_model_params(_meta_model(name)) == count_params(PRESETS[name]).total


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_matrix_shapes_match_core(name: str) -> None:
    spec, model = PRESETS[name], _meta_model(name)
    built: Counter = Counter()
    vector_numel = 0
    for pname, p in model.named_parameters():
        assert p.device.type == "meta"
        if p.dim() == 1:  # norms and biases
            vector_numel += p.numel()
            continue
        assert p.dim() == 2, pname
        core_name, transposed = _core_matrix(pname)
        rows, cols = reversed(p.shape) if transposed else p.shape
        built[(core_name, rows, cols)] += 1
    expected = Counter({(n, r, c): k for n, r, c, k in matrix_shapes(spec)})
    assert built == expected
    matrix_numel = sum(r * c * k for _, r, c, k in matrix_shapes(spec))
    assert matrix_numel + vector_numel == count_params(spec).total


@pytest.mark.parametrize("spec", TINY, ids=TINY_IDS)
def test_tiny_param_count_and_shapes_match_core(spec: ModelSpec) -> None:
    model = build_model(spec, device="meta")
    assert count_model_params(model) == count_params(spec).total
    built: Counter = Counter()
    for pname, p in model.named_parameters():
        if p.dim() == 2:
            core_name, transposed = _core_matrix(pname)
            rows, cols = reversed(p.shape) if transposed else p.shape
            built[(core_name, rows, cols)] += 1
    assert built == Counter({(n, r, c): k for n, r, c, k in matrix_shapes(spec)})


def test_mla_without_q_latent_builds_a_direct_query() -> None:
    spec = MLA_LIKE.replace(q_lora_rank=0)
    model = build_model(spec, device="meta")
    assert count_model_params(model) == count_params(spec).total
    assert hasattr(model.blocks[0].attn, "q") and not hasattr(model.blocks[0].attn, "q_down")


def test_layer_kinds_follow_the_spec() -> None:
    gemma = build_model(GEMMA_LIKE, device="meta")
    assert [b.window for b in gemma.blocks] == [8, 0]  # layer 0 slides, layer 1 is global
    mla = build_model(MLA_LIKE, device="meta")
    assert [type(b.mlp).__name__ for b in mla.blocks] == ["MLP", "MoE"]  # 1 dense, then MoE
    model = build_model(MLA_LIKE)
    _, loss = model(_tokens(MLA_LIKE), _tokens(MLA_LIKE, seed=1))
    loss.backward()
    # only picks experts: a zero gradient (an edge in the graph, for DDP), never a nonzero one
    assert torch.count_nonzero(model.blocks[1].mlp.score_bias.grad) == 0
    assert model.blocks[1].mlp.router.weight.grad is not None


def test_sliding_window_limits_what_a_token_sees() -> None:
    """Two layers of window 4: token 0 reaches positions 0..6 (3 steps back per layer) and no
    further."""
    spec = LLAMA_LIKE.replace(name="tiny-window", sliding_window=4)
    model = build_model(spec).eval()
    idx = _tokens(spec)
    changed = idx.clone()
    changed[:, 0] = (idx[:, 0] + 1) % V
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    assert not torch.allclose(a[:, 6], b[:, 6])
    torch.testing.assert_close(a[:, 7:], b[:, 7:], rtol=1e-6, atol=1e-6)


def test_tied_head_shares_the_embedding_storage() -> None:
    tied = build_model(GPT2_LIKE)
    assert tied.head.weight is tied.tok.weight
    assert tied.head.weight.data_ptr() == tied.tok.weight.data_ptr()
    untied = build_model(GPT2_LIKE.replace(tied_embeddings=False))
    assert untied.head.weight.data_ptr() != untied.tok.weight.data_ptr()
    diff = count_model_params(untied) - count_model_params(tied)
    assert diff == GPT2_LIKE.vocab_size * GPT2_LIKE.d_model


def test_alibi_is_refused_not_silently_rotated() -> None:
    """The core estimates ALiBi models (BLOOM's published run); the reference model does not
    implement ALiBi, so it must say so instead of building a RoPE model."""
    with pytest.raises(ValueError, match="position = 'alibi'"):
        build_model(GPT2_LIKE.replace(position="alibi"))


def test_dropout_is_refused_not_silently_dropped() -> None:
    """The core counts dropout's masks and traffic for a spec with dropout (Megatron-era
    published runs); the reference model has no dropout, so it says so (one line, the field)."""
    with pytest.raises(SpecError, match="dropout = True: the reference model"):
        build_model(GPT2_LIKE.replace(dropout=True), device="meta")


def _biased(model: nn.Module) -> set[str]:
    """Names of the modules that own a bias parameter."""
    return {name.rsplit(".", 1)[0] for name, _ in model.named_parameters() if name.endswith("bias")}


def test_bias_flags() -> None:
    with_bias = build_model(GPT2_LIKE, device="meta")
    linears = [n for n, m in with_bias.named_modules() if isinstance(m, nn.Linear)]
    norms = [n for n, m in with_bias.named_modules() if isinstance(m, nn.LayerNorm)]
    # every linear layer but the head, and every LayerNorm, has a bias (GPT-2)
    assert _biased(with_bias) == (set(linears) - {"head"}) | set(norms)

    assert _biased(build_model(GPT2_LIKE.replace(bias=False), device="meta")) == set()
    assert _biased(build_model(LLAMA_LIKE, device="meta")) == set()

    qwen = build_model(LLAMA_LIKE.replace(qkv_bias=True), device="meta")
    assert _biased(qwen) == {f"blocks.{i}.attn.qkv" for i in range(LLAMA_LIKE.n_layers)}


# ---- forward ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("spec", TINY, ids=TINY_IDS)
def test_forward_shape_and_initial_loss(spec: ModelSpec, dtype: torch.dtype) -> None:
    """Loss at init is near ln V, the loss of uniform predictions, but above it: the head's std
    1/sqrt(d_model) on unit-RMS normalised features gives logits z_v of variance s^2 ~ 1, i.i.d.
    over the vocabulary, so the loss expected for a random target, mean(logsumexp z - mean z),
    is ln V + ln mean(e^z) ~ ln V + s^2/2 (~9 % above ln 256). Checked: that expansion to 1 %;
    the sampled loss within 5 % of its expectation (128 targets: ~1.5 % noise); ln V to 15 %."""
    model = build_model(spec, dtype=dtype)
    idx, targets = _tokens(spec, batch=4, seed=1), _tokens(spec, batch=4, seed=2)
    with torch.no_grad():
        logits, loss = model(idx, targets)
    assert logits.shape == (4, T, spec.vocab_size)
    assert logits.dtype == dtype
    assert loss.dtype == torch.float32  # the loss is taken in fp32 whatever the dtype
    assert torch.isfinite(loss)
    z = logits.float()
    ln_v, s2 = math.log(spec.vocab_size), z.var(-1).mean().item()
    assert 0.5 < s2 < 1.5
    expected = (z.logsumexp(-1) - z.mean(-1)).mean().item()
    assert expected == pytest.approx(ln_v + s2 / 2, rel=0.01)
    assert loss.item() == pytest.approx(expected, rel=0.05)
    assert loss.item() == pytest.approx(ln_v, rel=0.15)
    assert model(idx)[1] is None


@pytest.mark.parametrize("spec", TINY, ids=TINY_IDS)
def test_causal(spec: ModelSpec) -> None:
    model = build_model(spec).eval()
    idx, t = _tokens(spec), 10
    changed = idx.clone()
    changed[:, t + 1 :] = (idx[:, t + 1 :] + 1 + _tokens(spec, seq=T - t - 1, seed=5)) % V
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(a[:, t + 1], b[:, t + 1])


# ---- RMSNorm --------------------------------------------------------------------------------


def _rms_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rms_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, generator=gen, dtype=dtype).requires_grad_()
    w = (1 + 0.5 * torch.randn(8, generator=gen, dtype=dtype)).requires_grad_()
    return x, w


def test_rmsnorm_gradcheck_float64() -> None:
    x, w = _rms_inputs(torch.float64)
    assert torch.autograd.gradcheck(lambda x, w: _RMSNormFunction.apply(x, w, 1e-5), (x, w))


def test_rmsnorm_gradcheck_at_fp32_resolution() -> None:
    """The backward formula is right to fp32's resolution: coarse finite differences (eps 1e-3,
    so fp32 rounding of ~1e-7 costs ~1e-4) on float64 inputs."""
    x, w = _rms_inputs(torch.float64)
    assert torch.autograd.gradcheck(
        lambda x, w: _RMSNormFunction.apply(x, w, 1e-5), (x, w), eps=1e-3, atol=2e-3, rtol=2e-3
    )


def test_rmsnorm_backward_matches_autograd_of_the_formula() -> None:
    x, w = _rms_inputs(torch.float32)
    grad_y = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    ours = torch.autograd.grad(_RMSNormFunction.apply(x, w, 1e-5), (x, w), grad_y)
    ref = torch.autograd.grad(_rms_reference(x, w, 1e-5), (x, w), grad_y)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_rmsnorm_matches_formula() -> None:
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 8))
    x = 3 * torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(norm(x), _rms_reference(x, norm.weight, 1e-5))


def test_rmsnorm_saves_x_weight_and_rstd_only() -> None:
    x, w = _rms_inputs(torch.float32)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _RMSNormFunction.apply(x, w, 1e-5).sum().backward()
    assert len(saved) == 3
    assert saved[0] is x or saved[0].data_ptr() == x.data_ptr()
    assert saved[1].data_ptr() == w.data_ptr()
    assert saved[2].shape == (2, 3, 1)  # one rstd per token
    assert saved[2].dtype == torch.float32


def test_rmsnorm_bf16_keeps_rstd_in_fp32() -> None:
    saved: list[torch.Tensor] = []
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True)
    norm = RMSNorm(8, dtype=torch.bfloat16)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = norm(x)
    assert y.dtype == torch.bfloat16
    assert [t.dtype for t in saved] == [torch.bfloat16, torch.bfloat16, torch.float32]


# ---- RoPE -----------------------------------------------------------------------------------

E_HEAD = 16


def _rope(x: torch.Tensor) -> torch.Tensor:
    """apply_rope on x: (B, T, H, E) with the tables for T positions."""
    cos, sin = rope_tables(x.shape[1], x.shape[-1], x.device)
    return apply_rope(x, cos, sin)


def test_rope_tables_shape() -> None:
    cos, sin = rope_tables(T, E_HEAD, "cpu")
    assert cos.shape == sin.shape == (T, 1, E_HEAD // 2)


def test_rope_preserves_pair_norms_and_is_identity_at_position_0() -> None:
    x = torch.randn(2, T, 3, E_HEAD, generator=torch.Generator().manual_seed(0))
    y = _rope(x)
    half = E_HEAD // 2

    def pair_norms(t: torch.Tensor) -> torch.Tensor:  # (B, T, H, E/2)
        return torch.hypot(t[..., :half], t[..., half:])

    torch.testing.assert_close(pair_norms(y), pair_norms(x))
    torch.testing.assert_close(y[:, 0], x[:, 0], rtol=0, atol=0)
    assert not torch.allclose(y[:, 1:], x[:, 1:])


def test_rope_score_depends_only_on_relative_position() -> None:
    """<rope(q, m), rope(k, n)> is a function of m - n (Su et al. 2021, eq. 16)."""
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(E_HEAD, generator=gen), torch.randn(E_HEAD, generator=gen)
    rq = _rope(q.expand(1, T, 1, E_HEAD))[0, :, 0].double()  # (T, E): q at every position
    rk = _rope(k.expand(1, T, 1, E_HEAD))[0, :, 0].double()
    scores = rq @ rk.T  # (T, T): scores[m, n]
    for offset in range(-T + 1, T):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-4, rtol=0)
    # and it does depend on m - n
    assert float(scores.diagonal(0)[0]) != pytest.approx(float(scores.diagonal(3)[0]), abs=1e-3)


# ---- recomputation --------------------------------------------------------------------------


def _loss_and_grads(model: nn.Module, spec: ModelSpec) -> tuple[torch.Tensor, dict]:
    model.train()
    _, loss = model(_tokens(spec, seed=1), _tokens(spec, seed=2))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("early_stop", [False, True], ids=["full-forward", "early-stop"])
@pytest.mark.parametrize("spec", [GPT2_LIKE, MOE_LIKE], ids=["gpt2", "moe"])
def test_full_recompute_matches_no_recompute(spec: ModelSpec, early_stop: bool) -> None:
    loss, grads = _loss_and_grads(build_model(spec, seed=3), spec)
    full = build_model(spec, seed=3, recompute="full")
    full.checkpoint_early_stop = early_stop
    loss_full, grads_full = _loss_and_grads(full, spec)
    torch.testing.assert_close(loss_full, loss)
    assert grads_full.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(grads_full[name], g, msg=name)


def test_checkpoint_early_stop_defaults_off() -> None:
    model = build_model(GPT2_LIKE, device="meta", recompute="full")
    assert model.checkpoint_early_stop is False
    assert model.recompute == "full"


def test_selective_recompute_is_refused() -> None:
    with pytest.raises(ValueError, match=r"recompute = 'selective'.*none, full"):
        build_model(GPT2_LIKE, recompute="selective")


# ---- building without values; dtypes --------------------------------------------------------


@pytest.mark.parametrize("spec", TINY, ids=TINY_IDS)
def test_build_under_fake_tensor_mode_in_bf16(spec: ModelSpec) -> None:
    with FakeTensorMode():
        model = build_model(spec, init=False, dtype=torch.bfloat16)
    params = list(model.parameters())
    assert all(isinstance(p, FakeTensor) for p in params)
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert count_model_params(model) == count_params(spec).total


def test_dense_forward_under_fake_tensor_mode() -> None:
    """The fake-tensor memory profiler runs whole steps this way (MoE routing, which needs
    torch.nonzero's values, cannot)."""
    with FakeTensorMode():
        model = build_model(LLAMA_LIKE, init=False, dtype=torch.bfloat16)
        logits, loss = model(_tokens(LLAMA_LIKE), _tokens(LLAMA_LIKE))
        loss.backward()
    assert logits.shape == (2, T, V)
    assert logits.dtype == torch.bfloat16
    assert all(p.grad is not None and p.grad.dtype == torch.bfloat16 for p in model.parameters())


def test_init_in_bf16_rounds_the_fp32_draw() -> None:
    fp32 = build_model(LLAMA_LIKE, seed=4)
    bf16 = build_model(LLAMA_LIKE, seed=4, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    for (name, a), b in zip(fp32.named_parameters(), bf16.parameters(), strict=True):
        assert torch.equal(a.to(torch.bfloat16), b), name


# ---- initialisation -------------------------------------------------------------------------

WIDE_FF = GPT2_LIKE.replace(d_ff=1024)  # blocks.*.mlp.down has fan_in 1024


def test_linear_init_std_is_one_over_sqrt_fan_in_truncated_at_3_std() -> None:
    """trunc_normal_ at +-3 std keeps std * 0.987; large matrices must land within 5 %."""
    model = build_model(WIDE_FF, seed=0)
    down = model.blocks[0].mlp.down.weight
    assert down.shape[1] == 1024
    assert down.std().item() == pytest.approx(1 / math.sqrt(1024), rel=0.05)
    checked = 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear | nn.Embedding):
            continue
        fan_in = module.weight.shape[1]  # Linear (out, in); Embedding (n, d_model)
        std = 1 / math.sqrt(fan_in)
        assert module.weight.abs().max().item() <= 3 * std * (1 + 1e-6), name
        if module.weight.numel() >= 4096:
            assert module.weight.std().item() == pytest.approx(std, rel=0.05), name
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("spec", [GPT2_LIKE, LLAMA_LIKE], ids=["layernorm", "rmsnorm"])
def test_norms_start_at_one_and_biases_at_zero(spec: ModelSpec) -> None:
    model = build_model(spec, seed=1)
    n_norms = n_biases = 0
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
            n_biases += 1
        elif p.dim() == 1:
            assert torch.all(p == 1), name
            n_norms += 1
    assert n_norms == 2 * spec.n_layers + 1
    assert n_biases == (0 if not spec.bias else 6 * spec.n_layers + 1)


def test_seeded_builds_are_reproducible() -> None:
    torch.manual_seed(123)  # the global RNG does not matter, only `seed`
    a = build_model(MOE_LIKE, seed=7)
    torch.manual_seed(456)
    b = build_model(MOE_LIKE, seed=7)
    c = build_model(MOE_LIKE, seed=8)
    for (name, pa), pb, pc in zip(
        a.named_parameters(), b.parameters(), c.parameters(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if pa.dim() == 2:
            assert not torch.equal(pa, pc), name
