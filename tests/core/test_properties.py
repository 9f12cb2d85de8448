"""Properties over random valid ModelSpecs (dense/MoE, GELU/SwiGLU, MHA/GQA, tied/untied, bias).

The bounds asserted here are derived in the comments from the formulas of params.py, flops.py
and activations.py, so a failure means the code and the derivation disagree.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainbudget.core.single.activations import activation_memory
from trainbudget.core.single.flops import forward_flops, training_flops
from trainbudget.core.single.params import count_params, matrix_shapes
from trainbudget.core.spec.model_spec import ModelSpec

# deterministic for CI: the same 200 examples every run
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)


@st.composite
def specs(draw: st.DrawFn) -> ModelSpec:
    """A valid spec. d_ff (and d_ff_expert) >= d_model, as in every real model; the 6N bound
    below relies on it."""
    d_head = draw(st.sampled_from([8, 16, 32, 64]))
    n_kv = draw(st.integers(1, 4))
    n_heads = n_kv * draw(st.integers(1, 4))  # group size 1 is MHA
    d_model = n_heads * d_head
    kw: dict = dict(
        vocab_size=draw(st.integers(64, 4096)),
        d_model=d_model,
        n_layers=draw(st.integers(1, 6)),
        n_heads=n_heads,
        n_kv_heads=draw(st.sampled_from([n_kv, 0])),  # 0 -> MHA
        d_ff=d_model * draw(st.integers(1, 4)),
        # >= every seq_len drawn below: a learned table cannot embed longer sequences
        max_seq_len=draw(st.integers(1024, 2048)),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        position=draw(st.sampled_from(["learned", "rope"])),
        tied_embeddings=draw(st.booleans()),
        bias=draw(st.booleans()),
        qkv_bias=draw(st.booleans()),
    )
    if draw(st.booleans()):
        n_experts = draw(st.integers(1, 8))
        kw.update(
            n_experts=n_experts,
            experts_per_token=draw(st.integers(1, n_experts)),
            n_shared_experts=draw(st.integers(0, 2)),
            d_ff_expert=draw(st.sampled_from([0, d_model, 2 * d_model])),
        )
    return ModelSpec(**kw)


seq_lens = st.integers(1, 256)
act_bytes = st.sampled_from([2, 4])


def memory(spec: ModelSpec, s: int, b: int, e: int, dropout: bool = False, **kw: object) -> float:
    """Activation bytes of `spec` (with dropout when asked: the spec's own flag)."""
    spec = replace(spec, dropout=dropout)
    return activation_memory(spec, seq_len=s, micro_batch=b, activation_bytes=e, **kw).total_bytes


@SETTINGS
@given(specs())
def test_param_parts_sum_and_match_matrices(spec: ModelSpec) -> None:
    """The named parts sum to the total, the total is matrices + norms + biases (counted
    independently here), and a token uses no more than all parameters."""
    p = count_params(spec)
    assert sum(p.as_dict().values()) == p.total
    d, n_in = spec.d_model, 2 if spec.mlp == "swiglu" else 1
    d_h = spec.d_ff_expert if spec.is_moe else spec.d_ff
    n_mlps = spec.n_experts + spec.n_shared_experts if spec.is_moe else 1
    qkv_out = d + 2 * spec.d_kv
    norm = 2 * d if spec.norm == "layernorm" and spec.bias else d
    if spec.bias:
        biases = qkv_out + d + n_mlps * (n_in * d_h + d)
    else:
        biases = qkv_out if spec.qkv_bias else 0
    vectors = (2 * spec.n_layers + 1) * norm + spec.n_layers * biases
    assert sum(r * c * k for _, r, c, k in matrix_shapes(spec)) + vectors == p.total
    assert p.active <= p.total
    assert (p.active == p.total) == (not spec.is_moe or spec.experts_per_token == spec.n_experts)


@SETTINGS
@given(specs(), seq_lens)
def test_forward_parts_sum_and_causal_cheaper(spec: ModelSpec, t: int) -> None:
    """Forward parts sum to the total; a causal mask never adds work (T(T+1)/2 <= T^2)."""
    f = forward_flops(spec, t)
    assert sum(f.as_dict().values()) == f.total
    assert f.layers + f.logits == f.total
    c = forward_flops(spec, t, causal=True)
    assert c.total <= f.total
    assert (c.total == f.total) == (t == 1)


@SETTINGS
@given(specs(), seq_lens, st.integers(1, 8), act_bytes, st.booleans(), st.booleans())
def test_activation_memory_monotone(spec, s, b, e, flash, dropout) -> None:
    """Every stored tensor grows with tokens, so memory never drops when batch or length grows."""
    for recompute in ("none", "selective", "full"):
        kw = dict(recompute=recompute, flash_attention=flash, dropout=dropout)
        m = memory(spec, s, b, e, **kw)
        assert memory(spec, s, b + 1, e, **kw) >= m
        assert memory(spec, s + 1, b, e, **kw) >= m


@SETTINGS
@given(specs(), st.integers(2, 256), st.integers(1, 4), act_bytes, st.booleans())
def test_recompute_and_flash_never_cost_memory(spec, s, b, e, dropout) -> None:
    """none >= selective (it drops the s*s matrix) and none >= full (L layers' sets vs L-1 inputs
    plus one set). Where the matrix is stored (none, full) FlashAttention trades its a*s*s*b*e
    bytes for a*s*b*4 fp32 stats, no larger when s*e >= 4 -- hence s >= 2 and e in {2, 4} here
    (s = 1, e = 2 costs 2ab more). Selective stores no matrix, so flash adds exactly the stats."""
    for drop in (False, dropout):
        none = memory(spec, s, b, e, dropout=drop)
        assert none >= memory(spec, s, b, e, recompute="selective", dropout=drop)
        assert none >= memory(spec, s, b, e, recompute="full", dropout=drop)
        for recompute in ("none", "full"):
            kw = dict(recompute=recompute, dropout=drop)
            assert memory(spec, s, b, e, flash_attention=True, **kw) <= memory(spec, s, b, e, **kw)
        kw = dict(recompute="selective", dropout=drop)
        extra = memory(spec, s, b, e, flash_attention=True, **kw) - memory(spec, s, b, e, **kw)
        assert extra == spec.n_layers * spec.n_heads * s * b * 4


@SETTINGS
@given(specs(), st.data(), st.integers(1, 4), act_bytes, st.booleans(), st.booleans())
def test_selective_at_least_full_when_deep_enough(spec, data, b, e, flash, dropout) -> None:
    """selective - full = (L-1)(X_sel - s*b*h*e) - M, with X_sel one layer's selective set and M
    the attention matrix (+ dropout bytes) the working layer rebuilds. X_sel >= 6*s*b*h*e (two
    norm inputs, two linear inputs, q+k+v >= h, MLP input h), and M <= a*s*s*b*(2e+1) <=
    2.5*a*s*s*b*e for e >= 2; so selective >= full whenever 5(L-1)h >= 2.5*a*s, i.e.
    s <= 2(L-1)*d_head. (With one layer full exceeds selective; see test_activations.)"""
    assume(spec.n_layers >= 2)
    s = data.draw(st.integers(1, 2 * (spec.n_layers - 1) * spec.d_head))
    kw = dict(flash_attention=flash, dropout=dropout)
    sel = memory(spec, s, b, e, recompute="selective", **kw)
    assert sel >= memory(spec, s, b, e, recompute="full", **kw)


@SETTINGS
@given(specs(), st.data())
def test_6n_close_to_exact_for_short_sequences(spec: ModelSpec, data) -> None:
    """Per token, exact = 3 x forward / T = 6*W + 12*L*d*T + 6*d*V (W: active layer matrices,
    d_q = d), while 6N = 6*(W + vectors + V*d + P*d [learned] + V*d [untied]). So
        exact/6N - 1 = (12*L*d*T - 6*vectors - 6*P*d [learned] - 6*V*d [untied]) / 6N.
    Upper: N >= L*(d*d_qkv + d*d) >= 2*L*d^2, so the ratio - 1 <= 2*L*d*T/N <= T/d <= 1/8
    for T <= d/8. Lower: biases are <= 1/d of their matrix (d_ff >= d), norms 4d per layer are
    <= 2/d of the 2d^2 attention weights, the final norm <= 2/V of V*d; so vectors/N <= 3/d + 2/V;
    the position table P*d <= (P/V)*N and an untied input embedding V*d <= N/2 (N holds it and
    the head). Tied with RoPE, 6N is thus within max(1/8, 3/d + 2/V) of the exact count."""
    t = data.draw(st.integers(1, spec.d_model // 8))  # d_model >= 8, so T <= d/8 is possible
    tf = training_flops(spec, t)
    ratio = tf.model_flops_per_token / tf.approx_6n_per_token - 1
    d, v = spec.d_model, spec.vocab_size
    assert ratio <= t / d + 1e-12
    lower = 3 / d + 2 / v
    if spec.position == "learned":
        lower += spec.max_seq_len / v
    if not spec.tied_embeddings:
        lower += 0.5
    assert ratio >= -lower - 1e-12
    if spec.tied_embeddings and spec.position == "rope":
        assert abs(ratio) <= max(1 / 8, 3 / d + 2 / v)
    # PaLM's 6N + 12LdT uses matmul params only: it exceeds exact by 6 x vectors, <= 3/d + 2/V
    palm = tf.palm_per_token / tf.model_flops_per_token - 1
    assert -1e-12 <= palm <= 3 / d + 2 / v
