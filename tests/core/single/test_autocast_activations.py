"""Activations under autocast (weights wider than the matmuls: amp-bf16, amp-fp16), by hand.
The measured side is tests/profile/test_profile_matrix.py (MemTracker under torch.autocast)."""

from __future__ import annotations

import pytest

from trainbudget.core.ops import numpy_ops
from trainbudget.core.single.activations import activation_memory, layer_activations
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.presets import PRESETS

S, B = 1024, 4  # tokens per micro-batch: S * B


def _layer(spec, weight_bytes=None, **kw):
    return layer_activations(
        spec, seq_len=S, micro_batch=B, activation_bytes=2, weight_bytes=weight_bytes, **kw
    )


@pytest.mark.parametrize("weight_bytes", [None, 2])
def test_equal_widths_change_nothing(weight_bytes) -> None:
    """bf16-mixed, bf16, fp8 (weights as wide as the activations): no copies, no fp32 stream."""
    spec = PRESETS["llama-2-7b"]
    assert _layer(spec, weight_bytes) == _layer(spec)
    assert _layer(spec).weight_copies_bytes == 0


def test_gpt2_layer_by_hand() -> None:
    """GPT-2 (GELU, one matmul per norm output): two fp32 norm inputs instead of 16-bit ones,
    and the bf16 copies of qkv, proj, up and down (12 d^2)."""
    spec = resolve_model("gpt2", [])
    d, tokens = spec.d_model, S * B
    amp, mixed = _layer(spec, 4), _layer(spec)
    assert amp.weight_copies_bytes == 12 * d * d * 2
    assert amp.norm_inputs_bytes == 2 * tokens * d * 4
    assert amp.total_bytes - mixed.total_bytes == 12 * d * d * 2 + 2 * tokens * d * (4 - 2)


def test_swiglu_and_mla_cast_a_norm_output_once_per_matmul() -> None:
    """Autocast caches only the casts of weights: SwiGLU's gate and up each keep a bf16 copy of
    the MLP norm's fp32 output, MLA's q and kv down-projections each one of the attention
    norm's."""
    tokens = S * B
    llama = PRESETS["llama-2-7b"]
    d = llama.d_model
    assert _layer(llama, 4).mlp_bytes - _layer(llama).mlp_bytes == tokens * d * 2
    assert (
        _layer(llama, 4).attention_linear_inputs_bytes
        == _layer(llama).attention_linear_inputs_bytes
    )
    mla = PRESETS["deepseek-v3"]
    extra = _layer(mla, 4).attention_linear_inputs_bytes - _layer(mla).attention_linear_inputs_bytes
    assert extra == tokens * mla.d_model * 2


def test_copies_split_by_tp_on_the_grid() -> None:
    """The weight copies follow the layer's matrices across TP ranks; the grid form (numpy,
    the planner) equals the one-plan form."""
    np = pytest.importorskip("numpy")
    spec = PRESETS["llama-2-7b"]
    tps = (1, 2, 8)
    grid = _layer(spec, 4, tp=np.array(tps), xp=numpy_ops())
    for i, tp in enumerate(tps):
        one = _layer(spec, 4, tp=tp)
        assert grid.total_bytes[i] == pytest.approx(one.total_bytes)
        assert one.weight_copies_bytes == pytest.approx(_layer(spec, 4).weight_copies_bytes / tp)


def test_head_and_checkpoints_keep_the_residual_width() -> None:
    """The final norm's input and each full-recompute checkpoint are the fp32 residual stream;
    the head adds its input's bf16 cast and the (tied) V x d weight's bf16 copy."""
    spec = resolve_model("gpt2", [])
    d, tokens = spec.d_model, S * B
    m = activation_memory(
        spec, seq_len=S, micro_batch=B, activation_bytes=2, weight_bytes=4, recompute="full"
    )
    assert m.checkpoint_bytes == tokens * d * 4
    assert m.head_bytes == tokens * d * (4 + 2) + spec.vocab_size * d * 2


def test_amp_peak_exceeds_bf16_mixed_activations() -> None:
    """training_peak reads the precision's weight width: amp-bf16's backward-start activations
    are bf16-mixed's plus the copies and the wider stream (same 2-byte activations)."""
    spec = resolve_model("gpt2", ["n_layers=2"])
    kw = dict(optimizer="adamw", seq_len=S, micro_batch=B)
    amp = training_peak(spec, precision="amp-bf16", **kw).phases[0]
    mixed = training_peak(spec, precision="bf16-mixed", **kw).phases[0]
    d, tokens = spec.d_model, S * B
    copies = 2 * (2 * 12 * d * d + spec.vocab_size * d)
    residual = 5 * tokens * d * 2
    assert amp.activations_bytes - mixed.activations_bytes == copies + residual
