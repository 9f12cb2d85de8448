"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198), Sec. 4."""

from __future__ import annotations

from dataclasses import replace

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
    spec = replace(paper_spec(h, a), dropout=True)
    layer = layer_activations(spec, seq_len=s, micro_batch=b, activation_bytes=E)
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
    with_dropout = replace(spec, dropout=True)
    sel_drop = activation_memory(with_dropout, recompute="selective", **kw).layers_bytes
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
    """SwiGLU keeps 4 d_ff-wide tensors, GQA shrinks K/V; an MoE layer (model.moe) keeps its
    normalised input once, per kept routed slot three d-wide rows, the expert's hidden tensors
    and the routing's indices and gates, per shared expert its hidden tensors, and two fp32
    router tensors (measured with MemTracker: activations.MOE_ROW_COPIES)."""
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
    tokens, routing, router = s * b, 3 * 8 + 2 * 4, 2 * 4 * 4
    slot = (3 * h + 4 * 128) * E + routing
    want = tokens * (h * E + 2 * slot + 4 * 128 * E + router)
    assert layer.mlp_bytes == want
    # the reference layer does not pad to the capacity: C >= 1 keeps every slot (balanced
    # routing), C = 0.5 half of them
    for c, slots in ((1.5, 2), (0.5, 1)):
        capped = layer_activations(
            moe.replace(capacity_factor=c), seq_len=s, micro_batch=b, activation_bytes=E
        )
        assert capped.mlp_bytes == tokens * (h * E + slots * slot + 4 * 128 * E + router)


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


# ---- shapes of current open models --------------------------------------------------------

from trainbudget.core.ops import numpy_ops  # noqa: E402
from trainbudget.core.spec.presets import PRESETS  # noqa: E402

MODERN = ["qwen3-8b", "gemma-2-9b", "gemma-3-1b", "mistral-nemo", "mistral-7b", "deepseek-v3"]


@pytest.mark.parametrize("name", MODERN)
@pytest.mark.parametrize("flash", [False, True], ids=["eager", "flash"])
def test_positive_and_growing_with_seq_len(name: str, flash: bool) -> None:
    spec = PRESETS[name]
    totals = [
        layer_activations(
            spec, seq_len=s, micro_batch=1, activation_bytes=E, flash_attention=flash
        ).total_bytes
        for s in (1024, 2048, 4096)
    ]
    assert 0 < totals[0] < totals[1] < totals[2]
    if flash:  # no s x s matrix: linear in the sequence
        assert totals[2] == pytest.approx(4 * totals[0])


@pytest.mark.parametrize("name", MODERN)
def test_grid_form_equals_one_plan(name: str) -> None:
    """The same per-layer count over numpy arrays of layouts (the planner's grid)."""
    np = pytest.importorskip("numpy")
    spec = PRESETS[name]
    tp, sp, cp = np.array([1, 2, 8]), np.array([False, True, True]), np.array([1, 1, 2])
    grid = layer_activations(
        spec,
        seq_len=4096,
        micro_batch=1,
        activation_bytes=E,
        tp=tp,
        sp=sp,
        cp=cp,
        xp=numpy_ops(),
    ).total_bytes
    for i in range(3):
        one = layer_activations(
            spec,
            seq_len=4096,
            micro_batch=1,
            activation_bytes=E,
            tp=int(tp[i]),
            sp=bool(sp[i]),
            cp=int(cp[i]),
        ).total_bytes
        assert grid[i] == pytest.approx(one)


def test_post_norms_keep_two_more_inputs() -> None:
    """Gemma's post-attention and post-MLP norms keep their inputs: 2*s*b*h*e per layer."""
    spec, s, b = PRESETS["gemma-2-9b"], 4096, 2
    kw = dict(seq_len=s, micro_batch=b, activation_bytes=E)
    with_post = layer_activations(spec, **kw).total_bytes
    without = layer_activations(spec.replace(post_norms=False), **kw).total_bytes
    assert with_post - without == 2 * s * b * 3584 * E


def test_dense_then_moe_layer_is_the_stack_mean() -> None:
    """DeepSeek-V3: n_layers x the per-layer figure = 3 dense layers + 58 MoE layers."""
    spec = PRESETS["deepseek-v3"]
    kw = dict(seq_len=4096, micro_batch=1, activation_bytes=E)
    mean = layer_activations(spec, **kw).mlp_bytes
    moe = layer_activations(spec.replace(n_dense_layers=0), **kw).mlp_bytes
    dense = layer_activations(
        spec.replace(
            n_experts=0,
            experts_per_token=0,
            n_shared_experts=0,
            d_ff_expert=0,
            n_dense_layers=0,
            router_bias=False,
        ),
        **kw,
    ).mlp_bytes
    assert 61 * mean == pytest.approx(3 * dense + 58 * moe)


def test_mla_qkv_by_hand() -> None:
    """DeepSeek-V3, one token: latents before their norms (1536 + 512 + 64), the kv
    up-projection's output (128 x (128 + 128)), Q and K assembled (128 x 192 each); the
    normalised latents (1536 + 512) are inputs of the up-projections."""
    spec = PRESETS["deepseek-v3"]
    layer = layer_activations(spec, seq_len=1, micro_batch=1, activation_bytes=1)
    assert layer.qkv_bytes == (1536 + 512 + 64) + 128 * 256 + 2 * 128 * 192
    assert layer.attention_linear_inputs_bytes == 7168 + 128 * 128 + (1536 + 512)
