"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198), Sec. 4."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.activations import activation_memory, layer_activations
from trainbudget.core.spec.model_spec import ModelSpec

E = 2  # 16-bit activations, as in the paper


def paper_spec(h: int, a: int, n_layers: int = 4) -> ModelSpec:
    """The paper's setting: MHA, GELU, d_ff = 4h."""
    return ModelSpec(
        vocab_size=1000, d_model=h, n_layers=n_layers, n_heads=a, d_ff=4 * h, max_seq_len=8192
    )


SHAPES = [  # (s, b, h, a)
    (2048, 1, 12288, 96),  # GPT-3 175B (the paper's Table 3)
    (1024, 4, 768, 12),  # GPT-2 small
    (512, 2, 256, 4),
    (3, 5, 16, 2),  # tiny odd sizes
]


@pytest.mark.parametrize(("s", "b", "h", "a"), SHAPES)
def test_eq1_with_dropout(s: int, b: int, h: int, a: int) -> None:
    """Eq. 1: one layer stores s*b*h*(34 + 5*a*s/h) bytes = 34sbh + 5as^2b."""
    layer = layer_activations(
        paper_spec(h, a), seq_len=s, micro_batch=b, activation_bytes=E, dropout=True
    )
    assert layer.total_bytes == 34 * s * b * h + 5 * a * s * s * b
    assert layer.total_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h))


@pytest.mark.parametrize(("s", "b", "h", "a"), SHAPES)
def test_selective_drops_attention_matrix(s: int, b: int, h: int, a: int) -> None:
    """Selective recompute removes exactly the a*s*s*b*e softmax output (no dropout), and with
    dropout the whole 5as^2b (softmax 2 + mask 1 + dropped copy 2), leaving eq. 6's 34sbh."""
    spec = paper_spec(h, a)
    kw = dict(seq_len=s, micro_batch=b, activation_bytes=E)
    plain = activation_memory(spec, **kw).layers_bytes
    sel = activation_memory(spec, recompute="selective", **kw).layers_bytes
    assert plain - sel == spec.n_layers * a * s * s * b * E
    sel_drop = activation_memory(spec, recompute="selective", dropout=True, **kw).layers_bytes
    assert sel_drop == spec.n_layers * 34 * s * b * h


@pytest.mark.parametrize(("s", "b", "h", "a"), SHAPES)
def test_full_recompute_peak(s: int, b: int, h: int, a: int) -> None:
    """Full: L-1 layers keep their s*b*h input; the layer in backward holds its full set."""
    spec = paper_spec(h, a)
    m = activation_memory(spec, seq_len=s, micro_batch=b, activation_bytes=E, recompute="full")
    assert m.layers_bytes == (spec.n_layers - 1) * s * b * h * E + m.per_layer.total_bytes


def test_full_exceeds_selective_for_one_layer() -> None:
    """With one layer, full recompute still rebuilds the attention matrix that selective never
    stores, so full > selective there (so 'selective >= full' needs depth; see properties)."""
    spec = paper_spec(64, 4, n_layers=1)
    kw = dict(seq_len=256, micro_batch=1, activation_bytes=E)
    full = activation_memory(spec, recompute="full", **kw).layers_bytes
    sel = activation_memory(spec, recompute="selective", **kw).layers_bytes
    assert full - sel == 4 * 256 * 256 * E  # a*s*s*b*e


def test_flash_replaces_matrix_with_fp32_stats() -> None:
    """FlashAttention keeps no s x s matrix but an fp32 logsumexp per head and token."""
    spec = paper_spec(256, 4)
    kw = dict(seq_len=512, micro_batch=2, activation_bytes=E)
    flash = layer_activations(spec, flash_attention=True, **kw)
    assert flash.attention_matrix_bytes == 0
    assert flash.flash_stats_bytes == 4 * 512 * 2 * 4  # a * s * b * 4 bytes
    # at s=1 the fp32 stats (4ab) outweigh a 16-bit 1x1 matrix (2ab): flash costs 2ab more
    one = dict(seq_len=1, micro_batch=1, activation_bytes=E)
    with_flash = layer_activations(spec, flash_attention=True, **one).total_bytes
    without = layer_activations(spec, **one).total_bytes
    assert with_flash - without == 4 * 4 - 4 * E  # a*s*b*4 stats minus a*s*s*b*e matrix


def test_swiglu_gqa_moe_terms() -> None:
    """SwiGLU keeps 4 d_ff-wide tensors, GQA shrinks K/V, MoE keeps one copy per visited expert
    plus fp32 router scores."""
    s, b, h = 16, 2, 64
    base = ModelSpec(
        vocab_size=100,
        d_model=h,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=256,
        max_seq_len=64,
        mlp="swiglu",
    )
    layer = layer_activations(base, seq_len=s, micro_batch=b, activation_bytes=E)
    assert layer.qkv_bytes == s * b * (64 + 2 * 32) * E  # d_kv = 2 heads x 16
    assert layer.mlp_bytes == s * b * (h + 4 * 256) * E
    moe = base.replace(n_experts=4, experts_per_token=2, n_shared_experts=1, d_ff_expert=128)
    layer = layer_activations(moe, seq_len=s, micro_batch=b, activation_bytes=E)
    assert layer.mlp_bytes == 3 * s * b * (h + 4 * 128) * E + s * b * 4 * 4


def test_head_and_logits() -> None:
    """Head keeps 2*s*b*h; logits keep s*b*V in e bytes plus two fp32 copies."""
    spec = paper_spec(64, 4)
    m = activation_memory(spec, seq_len=8, micro_batch=3, activation_bytes=E)
    assert m.head_bytes == 2 * 8 * 3 * 64 * E
    assert m.logits_bytes == 8 * 3 * 1000 * (E + 8)
    assert m.total_bytes == m.layers_bytes + m.head_bytes + m.logits_bytes


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(seq_len=0, micro_batch=1), "seq_len"),
        (dict(seq_len=8, micro_batch=0), "micro_batch"),
        (dict(seq_len=8, micro_batch=1, recompute="half"), "recompute"),
    ],
)
def test_errors(kw: dict, field: str) -> None:
    """Bad sizes and policies name their field."""
    with pytest.raises(SpecError) as err:
        activation_memory(paper_spec(64, 4), activation_bytes=E, **kw)
    assert err.value.field == field
