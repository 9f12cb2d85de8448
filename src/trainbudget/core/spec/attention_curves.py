"""Measured throughput of fused attention kernels, per pass, as published: the data
(`attention_kernels` looks it up).

A fused kernel does not run at one fraction of the peak. Its TFLOP/s grows with the sequence
length (more tiles per head hide the prologue and the softmax), differs by head dimension,
is lower in the backward pass than in the forward, and under a causal mask it does not reach
twice the non-causal speed: the diagonal tiles are computed whole and the short rows leave
SMs idle, most at short sequences. These tables carry the published bar charts so that the
step model can time each pass from them instead of from an ideal factor.

FLOP convention (both papers, Dao 2023 Sec. 4.1 and Shah et al. 2024 Sec. 4.1, word for word
the same rule): the forward pass of one sequence counts 4 * seq_len^2 * head_dim * n_heads
FLOPs (two matmuls, multiply-add = 2 FLOPs); with a causal mask that number is divided by 2
("approximately only half of the entries are calculated"); the backward pass counts 2.5 x the
forward (5 matmuls against 2, the recomputation of the scores included). A forward+backward
figure therefore counts 3.5 x the forward FLOPs. Times follow as counted FLOPs / TFLOP/s, so
a causal pass takes (forward FLOPs / 2) / causal TFLOP/s; `paper_attention_flops` computes the
count. The tiles a causal kernel really computes are a little more than half (the diagonal
ones whole), which is part of why causal TFLOP/s is lower.

Benchmark setting of every curve: batch x seq_len = 16k tokens, hidden 2048 (32, 16 or 8 heads
of dim 64, 128, 256), no dropout, FP16/BF16 inputs (the two run at one tensor-core rate;
the tables key them 'bf16'). Sequence lengths 512, 1k, ..., 16k are 512 ... 16384.

Not here, and why:
- FlashAttention-2's forward-only and backward-only charts on A100 (Dao 2023, Fig. 5 and 6):
  no copy of those images could be read; only the forward+backward chart (Fig. 4) is here.
- FP8 forward on H100 (Shah et al. 2024, Fig. 7 and App. C.2): the panels could not be read
  here with their causal / non-causal captions, so they are left out.
- Causal backward on H100: FlashAttention-3's paper charts the backward without a mask only.
- H200, MI300X: no chart with per-point values was found. A GPU or kernel without a curve
  makes the lookup return None; the caller keeps its own estimate
  (`Hardware.attention_fraction`). Whether H200 or H800 may borrow the H100 SXM curves (same
  GH100 compute) is the caller's choice; the table does not guess it.
- B200 without a mask, and FlashAttention on B200: B200's one table (cuDNN, NVIDIA's
  cudnn-frontend training benchmark, below) is causal only; FlashAttention-4's paper prints
  its B200 bars in figures no copy of which could be read here.

B200's cuDNN curves come from another benchmark, in the same FLOP convention (its `flops()`:
4 b s^2 h d, halved under a causal mask, backward 2.5 x): one sequence of 128 query and 8
key-value heads of dim 128 (Llama 3.1 405B's layer), each pass timed alone with CUDA events,
the median of 10 with sleeps between them against throttling, clocks not locked, to 128k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.hardware import ATTENTION_KERNELS, HARDWARE

KERNELS = ATTENTION_KERNELS
"""Kernel keys, as in `hardware.ATTENTION_KERNELS`; 'cudnn' is cuDNN's fused attention
(cuDNN 9.1.1 in Shah et al. 2024), which measures apart from FlashAttention-3 (faster at short
sequences, slower at long ones)."""
PASSES = ("forward", "backward", "forward_backward")
PASS_FLOPS_PER_FORWARD: Mapping[str, float] = MappingProxyType(
    {"forward": 1.0, "backward": 2.5, "forward_backward": 3.5}
)
"""FLOPs a pass is counted with, in forward FLOPs: the papers' backward = 2.5 x forward."""
CAUSAL_FLOPS_PER_FULL = 0.5
"""The papers count a causal pass as half the FLOPs of the same pass without a mask."""
CURVE_DTYPES = ("bf16",)
"""Input types with curves; 'fp16' is looked up as 'bf16' (the charts are 'FP16/BF16')."""

_FA2_PAPER = "Dao 2023, FlashAttention-2, https://arxiv.org/abs/2307.08691"
_FA3_PAPER = (
    "Shah et al. 2024, FlashAttention-3, https://arxiv.org/abs/2407.08608 (v1/v2, July 2024; "
    "the NeurIPS 2024 camera-ready reports faster, later kernels)"
)
_FA3_BACKWARD_READING = (
    "values taken from two independent machine transcriptions of the figure's printed labels "
    "(subtext.edge.nugit.net, models gemini-3-flash and nemotron; they agree on every value), "
    "not read by eye here; cross-checked against Dao 2023 Fig. 7 (see tests)"
)


@dataclass(frozen=True, kw_only=True)
class KernelCurve:
    """One bar series of a published chart: TFLOP/s (1e12 FLOP/s, paper convention, see the
    module docstring) of one kernel, GPU, input type, head dim, mask and pass, by seq_len."""

    kernel: str
    gpu: str
    """Key of `hardware.HARDWARE`."""
    dtype: str
    head_dim: int
    causal: bool
    pass_: str
    """'forward', 'backward' or 'forward_backward' (one chart of both passes together)."""
    seq_lens: tuple[int, ...]
    """Query = key length of one sequence, increasing; a bar whose label could not be read is
    absent, not guessed."""
    tflops_per_second: tuple[float, ...]
    source: str
    """Paper, figure and panel the values were read from."""

    def __post_init__(self) -> None:
        name = f"attention curve {self.kernel}/{self.gpu}/{self.pass_}/d{self.head_dim}"
        if self.kernel not in KERNELS:
            raise unknown_key(f"{name}.kernel", self.kernel, KERNELS)
        if self.gpu not in HARDWARE:
            raise unknown_key(f"{name}.gpu", self.gpu, HARDWARE)
        if self.dtype not in CURVE_DTYPES:
            raise unknown_key(f"{name}.dtype", self.dtype, CURVE_DTYPES)
        if self.pass_ not in PASSES:
            raise unknown_key(f"{name}.pass_", self.pass_, PASSES)
        if self.head_dim <= 0:
            raise SpecError(f"{name}.head_dim", self.head_dim, "must be > 0")
        if not self.seq_lens or len(self.seq_lens) != len(self.tflops_per_second):
            rule = f"needs one value per seq_len ({len(self.seq_lens)} seq_lens)"
            raise SpecError(f"{name}.tflops_per_second", self.tflops_per_second, rule)
        steps = zip(self.seq_lens, self.seq_lens[1:], strict=False)
        if self.seq_lens[0] <= 0 or any(b <= a for a, b in steps):
            raise SpecError(f"{name}.seq_lens", self.seq_lens, "must be positive, increasing")
        if not all(math.isfinite(v) and v > 0 for v in self.tflops_per_second):
            raise SpecError(f"{name}.tflops_per_second", self.tflops_per_second, "must be > 0")
        if "https://" not in self.source:
            raise SpecError(f"{name}.source", self.source, "must cite a https:// source")


SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
"""The charts' x axis, '512, 1k, ..., 16k'."""


def _curves(
    kernel: str, gpu: str, pass_: str, source: str, rows: Mapping[tuple[int, bool], tuple]
) -> tuple[KernelCurve, ...]:
    """Curves of one chart family; `rows[(head_dim, causal)]` holds one value per SEQ_LENS,
    None where the printed label is hidden (that bar is left out)."""
    out = []
    for (head_dim, causal), values in rows.items():
        kept = [(s, v) for s, v in zip(SEQ_LENS, values, strict=True) if v is not None]
        panel = source.format(mask="with" if causal else "without", d=head_dim)
        out.append(
            KernelCurve(
                kernel=kernel,
                gpu=gpu,
                dtype="bf16",
                head_dim=head_dim,
                causal=causal,
                pass_=pass_,
                seq_lens=tuple(s for s, _ in kept),
                tflops_per_second=tuple(float(v) for _, v in kept),
                source=panel,
            )
        )
    return tuple(out)


# fmt: off
# Dao 2023 Fig. 4 (A100 80GB SXM4, forward + backward, the 'FlashAttention-2' bars). Labels
# under the legend: d64 non-causal 1k reads '?53', its bar height gives 152-153 -> 153;
# d128 non-causal 1k '173' (bar height agrees); d128 non-causal 512 hidden -> left out.
_A100_FA2_FWD_BWD = _curves("flash2", "a100-80gb", "forward_backward",
    _FA2_PAPER + ", Fig. 4, {mask} causal mask, head dimension {d} (also the repository's "
    "README chart assets/flash2_a100_fwd_bwd_benchmark.png)", {
    (64, False):  (132, 153, 162, 171, 175, 176),
    (128, False): (None, 173, 187, 196, 201, 203),
    (64, True):   (88, 119, 140, 156, 165, 171),
    (128, True):  (99, 133, 155, 173, 182, 189),
})
# Dao 2023 Fig. 7 in v1 (Fig. 8 in the ICLR 2024 version; README chart
# assets/flash2_h100_fwd_bwd_benchmark.png): FlashAttention-2 (v2.0, no TMA / WGMMA) on
# H100 80GB SXM5. d128 non-causal 1k '294' sits under the legend; its bar height agrees.
_H100_FA2_FWD_BWD = _curves("flash2", "h100-sxm", "forward_backward",
    _FA2_PAPER + " (arXiv v1), Fig. 7, {mask} causal mask, head dimension {d}", {
    (64, False):  (215, 254, 274, 288, 294, 296),
    (128, False): (248, 294, 320, 326, 335, 338),
    (64, True):   (141, 192, 232, 257, 273, 284),
    (128, True):  (163, 221, 265, 294, 308, 328),
})
# Shah et al. 2024 Fig. 5 (H100 80GB SXM5 at a fixed 1830 MHz, CUDA 12.3, cuDNN 9.1.1,
# flash-attn 2.5.8; App. C.1), forward. Also the repository's README chart
# assets/flash3_fp16_fwd.png. Hidden label: FlashAttention-3 d256 non-causal 1k -> left out.
_FA3_FWD = _FA3_PAPER + ", Fig. 5, Forward, {mask} causal mask, head dim {d}"
_H100_FA2_FWD = _curves("flash2", "h100-sxm", "forward", _FA3_FWD, {
    (64, False):  (282, 306, 318, 321, 322, 324),
    (64, True):   (180, 229, 262, 284, 295, 299),
    (128, False): (309, 350, 362, 368, 370, 370),
    (128, True):  (191, 260, 298, 319, 333, 335),
    (256, False): (275, 313, 321, 323, 324, 326),
    (256, True):  (208, 251, 278, 293, 297, 298),
})
_H100_CUDNN_FWD = _curves("cudnn", "h100-sxm", "forward", _FA3_FWD, {
    (64, False):  (335, 373, 395, 408, 412, 413),
    (64, True):   (225, 288, 334, 363, 379, 388),
    (128, False): (497, 574, 617, 609, 600, 595),
    (128, True):  (315, 410, 484, 518, 529, 539),
    (256, False): (470, 546, 580, 581, 580, 581),
    (256, True):  (308, 391, 450, 483, 497, 509),
})
_H100_FA3_FWD = _curves("flash3", "h100-sxm", "forward", _FA3_FWD, {
    (64, False):  (333, 392, 460, 476, 496, 497),
    (64, True):   (197, 265, 371, 420, 460, 473),
    (128, False): (467, 565, 625, 638, 646, 648),
    (128, True):  (292, 423, 521, 579, 602, 616),
    (256, False): (482, None, 707, 736, 746, 756),
    (256, True):  (286, 427, 537, 612, 628, 642),
})
# Shah et al. 2024 Fig. 6, backward, without causal mask only (the figure has no causal panel).
_FA3_BWD = (
    _FA3_PAPER + ", Fig. 6, Backward, {mask} causal mask, head dim {d}; " + _FA3_BACKWARD_READING
)
_H100_FA2_BWD = _curves("flash2", "h100-sxm", "backward", _FA3_BWD, {
    (64, False):  (198, 238, 264, 279, 287, 291),
    (128, False): (214, 260, 291, 310, 318, 322),
})
_H100_CUDNN_BWD = _curves("cudnn", "h100-sxm", "backward", _FA3_BWD, {
    (64, False):  (266, 348, 395, 417, 432, 433),
    (128, False): (305, 408, 465, 499, 518, 516),
})
_H100_FA3_BWD = _curves("flash3", "h100-sxm", "backward", _FA3_BWD, {
    (64, False):  (272, 363, 422, 453, 472, 474),
    (128, False): (316, 424, 501, 542, 559, 561),
})
# NVIDIA cudnn-frontend, benchmark/sdpa_benchmark_training (commit 0b1577c, v1.15, Oct 2025):
# artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv, its bf16 rows (cuDNN 9.13.1 through
# the frontend's graph API, NGC PyTorch 25.09, CUDA 13.0; README 'Software versions').
_CUDNN_FRONTEND_B200 = (
    "NVIDIA cudnn-frontend, benchmark/sdpa_benchmark_training/artifacts/"
    "sdpa_fp8_benchmark_results_NVIDIA_B200.csv, precision 'bf16' rows (cuDNN 9.13.1, batch 1, "
    "128 query / 8 key-value heads, head dim 128, causal), https://github.com/NVIDIA/"
    "cudnn-frontend/blob/0b1577c8c83401237d601d0d0db5210506705396/benchmark/"
    "sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv"
)
_B200_SEQ_LENS = (*SEQ_LENS, 32768, 65536, 131072)


def _b200_cudnn(pass_: str, values: tuple[float, ...]) -> KernelCurve:
    return KernelCurve(
        kernel="cudnn", gpu="b200", dtype="bf16", head_dim=128, causal=True, pass_=pass_,
        seq_lens=_B200_SEQ_LENS, tflops_per_second=values,
        source=_CUDNN_FRONTEND_B200 + f" (column {pass_[:3]}_tflops_per_sec)",
    )  # fmt: skip


_B200_CUDNN = (
    _b200_cudnn("forward",
                (244.143, 561.287, 907.547, 1141.140, 1384.231, 1475.253, 1514.764,
                 1493.798, 1421.873)),
    _b200_cudnn("backward",
                (200.594, 376.937, 545.088, 832.907, 994.850, 1151.690, 1180.250,
                 1235.860, 1127.667)),
)
# fmt: on

KERNEL_CURVES: tuple[KernelCurve, ...] = (
    *_A100_FA2_FWD_BWD, *_H100_FA2_FWD_BWD,
    *_H100_FA2_FWD, *_H100_CUDNN_FWD, *_H100_FA3_FWD,
    *_H100_FA2_BWD, *_H100_CUDNN_BWD, *_H100_FA3_BWD,
    *_B200_CUDNN,
)  # fmt: skip
