"""The measured attention-kernel tables (core.spec.attention_curves): every curve cited to a
paper figure or a benchmark file at a commit, labels left out rather than guessed, keys in the
catalog, no rate above the peak, and a curve's validation naming the field.

Figures: Dao 2023, FlashAttention-2, arXiv 2307.08691 (v1); Shah et al. 2024, FlashAttention-3,
arXiv 2407.08608 (v1/v2); NVIDIA cudnn-frontend 0b1577c (B200, cuDNN 9.13.1)."""

from __future__ import annotations

import re

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.attention_curves import KERNEL_CURVES, KERNELS, SEQ_LENS, KernelCurve
from trainbudget.core.spec.hardware import ATTENTION_KERNELS, HARDWARE

H100, A100 = "h100-sxm", "a100-80gb"
PINNED_CSV = re.compile(r"https://github\.com/[\w-]+/[\w-]+/blob/[0-9a-f]{40}/\S+\.csv")


def test_labels_hidden_under_a_legend_are_left_out_not_guessed():
    # FA2 Fig. 4(b) hides the 512 label; FA3 Fig. 5(e) hides FlashAttention-3's 1k label
    a100 = _curve("flash2", A100, 128, False, "forward_backward")
    assert a100.seq_lens == SEQ_LENS[1:]
    fa3 = _curve("flash3", H100, 256, False, "forward")
    assert 1024 not in fa3.seq_lens and len(fa3.seq_lens) == len(SEQ_LENS) - 1


def test_every_curve_is_cited_to_a_paper_figure_or_a_benchmark_file_at_a_commit():
    for c in KERNEL_CURVES:
        paper = "https://arxiv.org/abs/" in c.source and "Fig. " in c.source
        pinned = PINNED_CSV.search(c.source)
        assert paper or pinned, c.source


def test_kernel_keys_extend_the_hardware_catalog_and_gpus_are_catalog_keys():
    assert set(ATTENTION_KERNELS) <= set(KERNELS)
    assert {c.kernel for c in KERNEL_CURVES} <= set(KERNELS)
    assert {c.gpu for c in KERNEL_CURVES} <= set(HARDWARE)


def test_no_measured_rate_exceeds_the_datasheet_peak():
    # counted FLOPs / time can only pass the dense bf16 peak through a misread label
    for c in KERNEL_CURVES:
        peak_tflops = HARDWARE[c.gpu].dense_flops_per_second["bf16"] / 1e12
        assert max(c.tflops_per_second) < peak_tflops, c.source


def test_curve_validation_names_the_field():
    good = dict(
        kernel="flash3", gpu=H100, dtype="bf16", head_dim=128, causal=False, pass_="forward",
        seq_lens=(512, 1024), tflops_per_second=(1.0, 2.0), source="https://arxiv.org/abs/x",
    )  # fmt: skip
    KernelCurve(**good)
    with pytest.raises(SpecError, match="seq_lens"):
        KernelCurve(**{**good, "seq_lens": (1024, 512)})
    with pytest.raises(SpecError, match="tflops_per_second"):
        KernelCurve(**{**good, "tflops_per_second": (1.0,)})
    with pytest.raises(SpecError, match="gpu"):
        KernelCurve(**{**good, "gpu": "h100"})


def _curve(kernel, gpu, head_dim, causal, pass_):
    (found,) = [
        c
        for c in KERNEL_CURVES
        if (c.kernel, c.gpu, c.head_dim, c.causal, c.pass_)
        == (kernel, gpu, head_dim, causal, pass_)
    ]
    return found
