"""Lookups in the measured attention-kernel tables (core.spec.attention_kernels): the values
read at the measured points, the interpolation, clamping and fallback, and the ratios the step
model reads from them (the tables themselves: test_attention_curves.py).

Figures: Dao 2023, FlashAttention-2, arXiv 2307.08691 (v1); Shah et al. 2024, FlashAttention-3,
arXiv 2407.08608 (v1/v2). Values are TFLOP/s in the papers' convention (causal = half the
FLOPs, backward = 2.5 x forward)."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.attention_curves import PASSES, SEQ_LENS
from trainbudget.core.spec.attention_kernels import (
    attention_tflops_per_second,
    attention_time_ratios,
    backward_per_forward_seconds,
    causal_per_noncausal_seconds,
    charted_seq_lens,
    paper_attention_flops,
)

H100, A100 = "h100-sxm", "a100-80gb"


def tflops(kernel, gpu, head_dim, causal, pass_, seq_len):
    return attention_tflops_per_second(
        kernel, gpu, head_dim=head_dim, causal=causal, pass_=pass_, seq_len=seq_len
    )


# --- values pinned to the figures ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "gpu", "head_dim", "causal", "pass_", "seq_len", "printed"),
    [
        ("flash2", A100, 64, False, "forward_backward", 512, 132),  # FA2 Fig. 4(a)
        ("flash2", A100, 128, False, "forward_backward", 16384, 203),  # FA2 Fig. 4(b)
        ("flash2", A100, 64, True, "forward_backward", 2048, 140),  # FA2 Fig. 4(c)
        ("flash2", A100, 128, True, "forward_backward", 16384, 189),  # FA2 Fig. 4(d)
        ("flash2", H100, 128, False, "forward_backward", 8192, 335),  # FA2 Fig. 7(b)
        ("flash2", H100, 128, True, "forward_backward", 512, 163),  # FA2 Fig. 7(d)
        ("flash3", H100, 64, False, "forward", 16384, 497),  # FA3 Fig. 5(a)
        ("flash3", H100, 64, True, "forward", 512, 197),  # FA3 Fig. 5(b)
        ("cudnn", H100, 128, False, "forward", 2048, 617),  # FA3 Fig. 5(c)
        ("flash3", H100, 128, True, "forward", 16384, 616),  # FA3 Fig. 5(d)
        ("flash2", H100, 128, True, "forward", 512, 191),  # FA3 Fig. 5(d)
        ("flash3", H100, 256, False, "forward", 16384, 756),  # FA3 Fig. 5(e)
        ("cudnn", H100, 256, True, "forward", 16384, 509),  # FA3 Fig. 5(f)
        ("flash3", H100, 64, False, "backward", 512, 272),  # FA3 Fig. 6(a)
        ("flash3", H100, 128, False, "backward", 16384, 561),  # FA3 Fig. 6(b)
        ("flash2", H100, 128, False, "backward", 2048, 291),  # FA3 Fig. 6(b)
        ("cudnn", H100, 128, False, "backward", 8192, 518),  # FA3 Fig. 6(b)
    ],
)
def test_table_values_match_the_printed_labels(
    kernel, gpu, head_dim, causal, pass_, seq_len, printed
):
    assert tflops(kernel, gpu, head_dim, causal, pass_, seq_len) == printed


@pytest.mark.parametrize(
    ("pass_", "seq_len", "printed"),
    [
        ("forward", 512, 244.143),
        ("forward", 8192, 1384.231),
        ("backward", 8192, 994.850),
        ("forward", 131072, 1421.873),
        ("backward", 131072, 1127.667),
    ],
)
def test_b200_cudnn_values_match_the_benchmark_file(pass_, seq_len, printed):
    """NVIDIA cudnn-frontend 0b1577c, benchmark/sdpa_benchmark_training/artifacts/
    sdpa_fp8_benchmark_results_NVIDIA_B200.csv, the bf16 rows (fwd_tflops_per_sec,
    bwd_tflops_per_sec): cuDNN 9.13.1, causal, 128 / 8 heads of dim 128."""
    assert tflops("cudnn", "b200", 128, True, pass_, seq_len) == printed


def test_charted_lengths_end_where_each_benchmark_stopped():
    kw = dict(head_dim=128, causal=True, pass_="forward")
    assert charted_seq_lens("cudnn", "b200", **kw)[-1] == 131072
    assert charted_seq_lens("flash3", H100, **kw) == SEQ_LENS
    assert charted_seq_lens("flash3", H100, **{**kw, "head_dim": 200}) == SEQ_LENS  # d256's
    assert charted_seq_lens("cudnn", "b200", **{**kw, "causal": False}) == ()  # causal only


# --- interpolation and clamping ------------------------------------------------------------


def test_between_measured_lengths_is_linear_in_log2_seq_len():
    lo, hi = tflops("flash3", H100, 128, True, "forward", 2048), 579  # Fig. 5(d) 2k, 4k
    mid = tflops("flash3", H100, 128, True, "forward", round(2048 * math.sqrt(2)))
    assert mid == pytest.approx((lo + hi) / 2, rel=1e-3)
    three_k = tflops("flash3", H100, 128, True, "forward", 3072)
    assert lo < three_k < hi


def test_the_lookup_is_monotonic_where_the_measurements_are():
    # FA3 forward with a causal mask rises at every measured step (Fig. 5(b), (d), (f))
    for head_dim in (64, 128, 256):
        values = [
            tflops("flash3", H100, head_dim, True, "forward", s) for s in range(512, 16385, 97)
        ]
        assert values == sorted(values)


def test_outside_the_measured_lengths_holds_the_end_value():
    assert tflops("flash3", H100, 128, False, "forward", 128) == 467  # the 512 bar
    assert tflops("flash3", H100, 128, False, "forward", 131072) == 648  # the 16k bar
    # a curve with its first bar hidden holds its first readable one (1k: 173)
    assert tflops("flash2", A100, 128, False, "forward_backward", 512) == 173


def test_head_dims_interpolate_in_log2_and_clamp_to_the_measured_range():
    d64 = tflops("flash3", H100, 64, True, "forward", 4096)  # 420
    d128 = tflops("flash3", H100, 128, True, "forward", 4096)  # 579
    d90 = tflops("flash3", H100, 90, True, "forward", 4096)
    t = math.log2(90 / 64)
    assert d90 == pytest.approx(d64 + t * (d128 - d64))
    assert tflops("flash3", H100, 32, True, "forward", 4096) == d64
    # the backward was measured at 64 and 128 only: 256 reads the 128 curve
    assert tflops("flash3", H100, 256, False, "backward", 4096) == 542


def test_fp16_reads_the_16_bit_curves():
    args = dict(head_dim=128, causal=False, pass_="forward", seq_len=4096)
    fp16 = attention_tflops_per_second("flash3", H100, dtype="fp16", **args)
    assert fp16 == attention_tflops_per_second("flash3", H100, dtype="bf16", **args) == 638


# --- fallback and errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "gpu", "causal", "pass_", "dtype"),
    [
        ("flash3", "b200", False, "forward", "bf16"),  # no B200 chart
        ("flash2", "h200", False, "forward", "bf16"),  # not aliased to H100 by the table
        ("flash1", H100, False, "forward", "bf16"),  # no FlashAttention-1 curve
        ("flash2", A100, False, "forward", "bf16"),  # A100: only the fwd+bwd chart
        ("flash3", H100, True, "backward", "bf16"),  # FA3 charts no causal backward
        ("flash3", H100, False, "forward", "fp8"),  # FP8 panels not read
    ],
)
def test_a_combination_without_a_curve_returns_none(kernel, gpu, causal, pass_, dtype):
    got = attention_tflops_per_second(
        kernel, gpu, head_dim=128, causal=causal, pass_=pass_, seq_len=4096, dtype=dtype
    )
    assert got is None


def test_unknown_keys_are_errors_that_list_the_known_ones():
    with pytest.raises(SpecError, match="h100-sxm"):
        tflops("flash3", "h100", 128, False, "forward", 4096)
    with pytest.raises(SpecError, match="cudnn"):
        tflops("flash4", H100, 128, False, "forward", 4096)
    with pytest.raises(SpecError, match="forward_backward"):
        tflops("flash3", H100, 128, False, "fwd", 4096)
    with pytest.raises(SpecError, match="seq_len"):
        tflops("flash3", H100, 128, False, "forward", 0)
    with pytest.raises(SpecError, match="dtype"):
        attention_tflops_per_second(
            "flash3", H100, head_dim=128, causal=False, pass_="forward", seq_len=1, dtype="b16"
        )


# --- the ratios the step model needs -------------------------------------------------------


def test_causal_is_well_above_half_the_time_at_short_sequences():
    # from the data: causal seconds / non-causal seconds = 0.5 x non-causal / causal TFLOP/s
    for kernel in ("flash2", "cudnn", "flash3"):
        for head_dim in (64, 128, 256):
            short = causal_per_noncausal_seconds(
                kernel, H100, head_dim=head_dim, pass_="forward", seq_len=512
            )
            long = causal_per_noncausal_seconds(
                kernel, H100, head_dim=head_dim, pass_="forward", seq_len=16384
            )
            assert short > 0.6 and short > long > 0.5, (kernel, head_dim, short, long)
    a100 = causal_per_noncausal_seconds(
        "flash2", A100, head_dim=64, pass_="forward_backward", seq_len=512
    )
    assert a100 == pytest.approx(0.5 * 132 / 88)  # Fig. 4(a) over Fig. 4(c)


def test_backward_takes_well_over_twice_the_forward():
    # 2.5 x the FLOPs, at a rate below the forward's for the FlashAttention kernels; cuDNN's
    # d64 backward runs a little faster per FLOP than its forward (Fig. 6(a): 417 vs 408 at
    # 4k), yet still takes over 2.3 x the forward's time. FA3 Fig. 6(b) over Fig. 5(c) at 16k:
    ratio = backward_per_forward_seconds("flash3", H100, head_dim=128, causal=False, seq_len=16384)
    assert ratio == pytest.approx(2.5 * 648 / 561)
    for kernel in ("flash2", "cudnn", "flash3"):
        for head_dim in (64, 128):
            for seq_len in SEQ_LENS:
                r = backward_per_forward_seconds(
                    kernel, H100, head_dim=head_dim, causal=False, seq_len=seq_len
                )
                assert r > (2.3 if kernel == "cudnn" else 2.5), (kernel, head_dim, seq_len, r)


def test_time_ratios_bundle_the_available_ones_and_none_for_the_rest():
    r = attention_time_ratios("flash3", H100, head_dim=128, seq_len=8192)
    assert r.forward_causal_per_noncausal_seconds == pytest.approx(0.5 * 646 / 602)
    assert r.noncausal_backward_per_forward_seconds == pytest.approx(2.5 * 646 / 559)
    assert r.backward_causal_per_noncausal_seconds is None
    assert r.causal_backward_per_forward_seconds is None
    a100 = attention_time_ratios("flash2", A100, head_dim=128, seq_len=8192)
    assert a100.forward_backward_causal_per_noncausal_seconds == pytest.approx(0.5 * 201 / 182)
    assert a100.forward_causal_per_noncausal_seconds is None


def test_two_papers_agree_on_flashattention2_on_h100():
    # FA2's own fwd+bwd chart (Dao 2023 Fig. 7, flash-attn 2.0) against the FA3 paper's
    # separate passes of FlashAttention-2 (Fig. 5 and 6, flash-attn 2.5.8), combined by time:
    # 3.5 F / (F / fwd + 2.5 F / bwd). Independent runs a year apart: within 7 %.
    for head_dim in (64, 128):
        for seq_len in SEQ_LENS:
            fwd = tflops("flash2", H100, head_dim, False, "forward", seq_len)
            bwd = tflops("flash2", H100, head_dim, False, "backward", seq_len)
            combined = 3.5 / (1 / fwd + 2.5 / bwd)
            chart = tflops("flash2", H100, head_dim, False, "forward_backward", seq_len)
            assert combined == pytest.approx(chart, rel=0.07), (head_dim, seq_len)


def test_paper_flop_count():
    forward = 4 * 4096**2 * 128 * 16  # Dao 2023 Sec. 4.1, one sequence of 16 heads
    assert paper_attention_flops(4096, 128, 16, causal=False, pass_="forward") == forward
    assert paper_attention_flops(4096, 128, 16, causal=True, pass_="forward") == forward / 2
    assert paper_attention_flops(4096, 128, 16, causal=False, pass_="backward") == 2.5 * forward
    both = paper_attention_flops(4096, 128, 16, causal=True, pass_="forward_backward")
    assert both == 3.5 * forward / 2
    assert set(PASSES) == {"forward", "backward", "forward_backward"}
