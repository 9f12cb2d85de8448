"""Kernel-level costs from published kernel benchmarks: GEMM throughput by shape, the fixed cost
of a kernel and of an eager PyTorch op, and the extra work of an FP8 linear layer.

Every number below is a measurement of single kernels (or of one linear layer's GEMMs) printed
by its source; no end-to-end training run is used. Three mechanisms are derived from them:

1. Serial epilogue (`gemm_k_efficiency`). A GEMM tile streams its K slices through the tensor
   cores, then writes its m_tile x n_tile output. On Ampere and Hopper kernels that write does
   not overlap the tile's own main loop, so a tile costs 2 m_t n_t K / (a * peak / SMs) of math
   plus m_t n_t e_out / (hbm / SMs) of writing, i.e. efficiency K / (K + K_half) with

       K_half = e_out * a * peak / (2 * hbm)     (e_out: output bytes, a: large-GEMM fraction)

   -- the same as timing the GEMM as math + output write instead of max(math, bytes). No free
   parameter: a is the MAMF fraction, peak and hbm the datasheet's. Checked on DeepGEMM's FP8
   K sweep (M = 4096, H800): a least-squares fit of 1/eff = 1/a + (K_half/a)(1/K) gives
   K_half 452 against 419 derived, and the derived model reproduces the five points within
   +-5 % (tests/core/spec/test_kernel_costs.py prints the residuals). Blackwell kernels keep
   the accumulator in tensor memory and write one tile while computing the next: their best
   MAMF shapes have K = 1024-3072, and B300 reaches its best, 78.6 % of peak, at K = 1024,
   where a serial epilogue (K_half ~ 230 with the b200 row's peak and HBM) would hold it to
   82 % of its plateau. So `b200` has no K penalty. TPUs: no data, no penalty.
2. FP8 GEMM fraction (`fp8_gemm_fraction`): the MAMF FP8 fraction of the FP8 peak (70.9 % on
   H100 against 80.3 % for bf16), times the serial-epilogue K efficiency with the FP8 peak,
   whose K_half is about twice bf16's: FP8 loses more on small-K GEMMs.
3. Fixed costs: a GPU-side gap per kernel (`kernel_floor_seconds`) and the CPU time of one
   eager PyTorch op (`eager_dispatch_seconds_per_op`); an eager op takes
   max(GPU time + gap, dispatch time) once the CPU can no longer run ahead.
The FP8 recipes (which GEMMs run in FP8, what their casts move) are `fp8_recipes`'.

Checked for bf16 on Hopper against OpenXLA's measured GEMM table (matmul_interpolator_data.h,
key sm_90): at m = n = 4096, K = 256 keeps 0.50 of the K = 4096 rate, the derived K_half 237
gives 0.55 (tests/core/spec/test_kernel_costs.py). Not found (so not here): a bf16 K sweep
on A100 with numbers (NVIDIA's matmul guide and the co-design paper, arXiv 2401.14489, give
figures only); per-kernel launch gaps measured on Hopper or Blackwell; MI300X FP8 MAMF (the
table's row is blank).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.spec.hardware import HARDWARE, Hardware, get_hardware

_DEEPGEMM = (
    "DeepGEMM README, 'Normal GEMMs for dense models' (H800 SXM5, NVCC 12.8, FP8 1x128 block "
    "scaling, bf16 output), https://github.com/deepseek-ai/DeepGEMM/blob/"
    "55ab91f72f76e8a6db0e86282c3169a88d93df1b/README.md"
)
_DEEPGEMM_PR81 = (
    "DeepGEMM PR #81 table ('H800'-SXM, CUDA 12.8.1, 256x128 block tile), "
    "https://github.com/deepseek-ai/DeepGEMM/pull/81"
)
_MAMF = (
    "ml-engineering, 'Maximum Achievable Matmul FLOPS comparison table' (mean of 100 iterations "
    "of the best shape), https://github.com/stas00/ml-engineering/blob/"
    "7bc7c3054eb93c277a4755c597ae0864d77a63f1/compute/accelerator/README.md"
)
_TE_GEMM = (
    "Transformer Engine docs, 'GEMM Profiling Tutorial', https://github.com/NVIDIA/"
    "TransformerEngine/blob/1609c890ee7da24393ce62a2680e0ebb0b4eb5f6/docs/examples/"
    "gemm_profiling/gemm_profiling.rst"
)


@dataclass(frozen=True, kw_only=True)
class GemmMeasurement:
    """One GEMM C[m, n] = A[m, k] @ B[k, n] timed alone, as its source prints it."""

    device: str
    """The GPU as the source names it."""
    gpu: str | None
    """Catalog key (`hardware.HARDWARE`) whose peaks apply; None for a part not in the catalog."""
    kernel: str
    dtype: str
    """Input type: 'bf16' or 'fp8'."""
    m: int
    n: int
    k: int
    flops_per_second: float
    source: str
    out_bytes: int = 2
    """Bytes per output element (every GEMM here writes bf16)."""

    def __post_init__(self) -> None:
        if self.gpu is not None and self.gpu not in HARDWARE:
            raise unknown_key(f"{self.device}.gpu", self.gpu, HARDWARE)
        if min(self.m, self.n, self.k) <= 0 or self.flops_per_second <= 0:
            raise SpecError(f"{self.device} GEMM", (self.m, self.n, self.k), "must be > 0")
        if "https://" not in self.source:
            raise SpecError(f"{self.device}.source", self.source, "must cite a https:// source")


def _deepgemm(m: int, n: int, k: int, tflops: float, source: str = _DEEPGEMM) -> GemmMeasurement:
    return GemmMeasurement(
        device="H800 SXM5",
        gpu="h800",
        kernel="DeepGEMM fp8_gemm_nt",
        dtype="fp8",
        m=m,
        n=n,
        k=k,
        flops_per_second=tflops * 1e12,
        source=source,
    )


DEEPGEMM_K_SWEEP = (
    _deepgemm(4096, 32768, 512, 751),
    _deepgemm(4096, 24576, 1536, 1125),
    _deepgemm(4096, 7168, 2048, 1168),
    _deepgemm(4096, 4096, 7168, 1265),
    _deepgemm(4096, 7168, 16384, 1426),
)
"""M = 4096 rows with N >= 4096 (>= 7.8 waves of 128 x 128 tiles on 132 SMs): K is what varies."""
DEEPGEMM_NARROW_N = _deepgemm(4096, 2112, 7168, 1009)
"""The same table's narrow-N row: 17 columns of 128 x 32 rows = 544 tiles = 4.1 waves (tail)."""
DEEPGEMM_PR81 = (
    _deepgemm(4096, 24576, 1536, 1204, _DEEPGEMM_PR81),
    _deepgemm(4096, 32768, 512, 777, _DEEPGEMM_PR81),
    _deepgemm(4096, 7168, 16384, 1500, _DEEPGEMM_PR81),
    _deepgemm(4096, 4096, 7168, 1377, _DEEPGEMM_PR81),
    _deepgemm(4096, 7168, 2048, 1159, _DEEPGEMM_PR81),
)
"""A later, faster kernel (256 x 128 tiles): held out, not used to derive anything."""


def _mamf(device: str, gpu: str | None, dtype: str, shape: str, tflops: float) -> GemmMeasurement:
    m, n, k = (int(x) for x in shape.split("x"))  # the table prints 'MxNxK'
    return GemmMeasurement(
        device=device,
        gpu=gpu,
        kernel="torch.mm (cuBLAS/hipBLASLt)",
        dtype=dtype,
        m=m,
        n=n,
        k=k,
        flops_per_second=tflops * 1e12,
        source=_MAMF,
    )


MAMF = (
    _mamf("NVIDIA A100 SXM", "a100-80gb", "bf16", "1024x10240x5120", 271.2),
    _mamf("NVIDIA GH200 SXM", None, "bf16", "1024x15360x4096", 828.6),
    _mamf("NVIDIA H100 SXM", "h100-sxm", "bf16", "2048x2048x13312", 794.5),
    _mamf("NVIDIA B300 SXM", None, "bf16", "12288x18432x1024", 1769.0),
    _mamf("NVIDIA B200 SXM", "b200", "bf16", "1792x16128x3072", 1745.0),
    _mamf("NVIDIA GB200 SXM", None, "bf16", "4096x9728x2048", 1822.0),
    _mamf("AMD MI300X", "mi300x", "bf16", "10240x15360x8192", 668.4),
    _mamf("NVIDIA GH200 SXM", None, "fp8", "1024x14336x14336", 1535.0),
    _mamf("NVIDIA B200 SXM", "b200", "fp8", "15360x4096x3072", 3432.5),
    _mamf("NVIDIA B300 SXM", None, "fp8", "3072x6144x7168", 3353.3),
    _mamf("NVIDIA H200 SXM", "h200", "fp8", "1280x4096x12032", 1453.4),
    _mamf("NVIDIA GB200 SXM", None, "fp8", "19456x5120x1536", 3615.6),
    _mamf("NVIDIA H100 SXM", "h100-sxm", "fp8", "1024x9216x14336", 1402.6),
)
"""Best shapes of a brute-force sweep. The bf16 rows of the catalog (`Hardware.matmul_fraction`)
cite an older edition of the same table; these rows serve the FP8 fractions and the epilogue
evidence (the K of each best shape)."""

_FP8_MAMF_GPU = MappingProxyType(
    {"h100-sxm": "h100-sxm", "h800": "h100-sxm", "h200": "h200", "b200": "b200"}
)
"""Catalog GPU -> the MAMF FP8 row it takes; h800 is the H100 SXM chip at the same power."""
FP8_OVER_BF16_FALLBACK = 0.914
"""FP8 MAMF fraction over bf16 MAMF fraction, for a GPU with no FP8 MAMF: the median of the
Hopper rows, H100 70.9/80.3 = 0.883, H200 73.4/80.3 = 0.914 ('H200 is the same' bf16 part),
GH200 77.6/83.8 = 0.926. Transformer Engine's pre-quantized per-layer GEMMs on H200 NVL give
(31.968 / 16.785) / 2 = 0.952 at 15872-token shapes."""

EPILOGUE_OVERLAPPED = frozenset({"b200"})
"""GPUs whose GEMM kernels write a tile while computing the next (no K penalty): Blackwell,
from the MAMF best shapes (B300 bf16 K = 1024, B200 3072, GB200 2048; FP8 GB200 1536)."""
NO_EPILOGUE_DATA = frozenset({"tpu-v5e", "tpu-v5p"})
"""No kernel data: no K penalty is applied."""


@dataclass(frozen=True, kw_only=True)
class LayerGemmBenchmark:
    """Transformer Engine's benchmark of the 12 GEMMs of one layer (fprop, dgrad and wgrad of
    QKV, attention out, MLP up, MLP down), each timed alone with CUDA events, summed. 'autocast'
    times include quantizing each GEMM's two inputs in a forward-only te.Linear call."""

    device: str
    hidden: int
    intermediate: int
    tokens: int
    bf16_seconds: float
    fp8_current_prequantized_seconds: float
    fp8_current_autocast_seconds: float
    fp8_delayed_autocast_seconds: float
    hbm_bytes_per_second: float
    source: str


TE_H200_NVL_LAYER = LayerGemmBenchmark(
    device="NVIDIA H200 NVL",
    hidden=4096,
    intermediate=16384,
    tokens=31 * 512,
    bf16_seconds=31.968e-3,
    fp8_current_prequantized_seconds=16.785e-3,
    fp8_current_autocast_seconds=20.285e-3,
    fp8_delayed_autocast_seconds=18.978e-3,
    hbm_bytes_per_second=HARDWARE["h200"].hbm_bytes_per_second,
    source=_TE_GEMM + ", 'Worked Example: 5B Model on H200' (per-layer totals; bf16 from the "
    "pre-quantized run; HBM: the h200 row's 4.8 TB/s, which NVIDIA prints for SXM and NVL)",
)


@dataclass(frozen=True, kw_only=True)
class LaunchTimes:
    """Per-kernel wall times of a chain of identical short kernels in one CUDA stream."""

    kernel_seconds: float
    """The kernel's own execution time."""
    synchronized_seconds: float
    """Launch, run and cudaStreamSynchronize after every kernel."""
    stream_seconds: float
    """Kernels launched back to back, one synchronize per 20."""
    graph_seconds: float
    """The 20 kernels captured once in a CUDA graph and replayed."""
    source: str


CUDA_GRAPHS_BLOG = LaunchTimes(
    kernel_seconds=2.9e-6,
    synchronized_seconds=9.6e-6,
    stream_seconds=3.8e-6,
    graph_seconds=3.4e-6,
    source="NVIDIA, 'Getting Started with CUDA Graphs' (A. Gray, 2019), https://developer."
    "nvidia.com/blog/cuda-graphs/ -- values as transcribed alongside the blog's code in a "
    "public note (the blog page itself could not be read here)",
)
EAGER_OPS_PER_SECOND = 280e3
"""'If you perform the same experiment with PyTorch, we can only get 280 thousand operations
per second' -- tiny-tensor additions in eager PyTorch on an A100-era machine (H. He, 'Making
Deep Learning Go Brrrr From First Principles', 2022, 'Overhead', https://horace.io/brrr_intro.html)."""


def kernel_floor_seconds(gpu: str, cuda_graphs: bool = False) -> float:
    """GPU time one kernel adds beyond its own work when queued behind another in a stream:
    3.8 - 2.9 = 0.9 us per kernel, 3.4 - 2.9 = 0.5 us when replayed from a CUDA graph
    (`CUDA_GRAPHS_BLOG`). One figure for every GPU: no per-GPU measurement was found."""
    get_hardware(gpu)
    t = CUDA_GRAPHS_BLOG
    return (t.graph_seconds if cuda_graphs else t.stream_seconds) - t.kernel_seconds


def eager_dispatch_seconds_per_op() -> float:
    """CPU time to issue one eager PyTorch op: 1 / 280k = 3.6 us (`EAGER_OPS_PER_SECOND`).
    A floor: model code in nn.Modules adds Python of its own on top."""
    return 1 / EAGER_OPS_PER_SECOND


def eager_op_seconds(gpu_seconds: Any, gpu: str, xp: Ops = SCALAR) -> Any:
    """Wall time of one eager op in a long chain: its GPU time plus the kernel gap, or the CPU
    dispatch time when that is longer (the CPU then cannot run ahead; He 2022, 'Overhead')."""
    dispatch = eager_dispatch_seconds_per_op()
    return xp.maximum(gpu_seconds + kernel_floor_seconds(gpu), dispatch)


def fp8_matmul_fraction(gpu: str, bf16_fraction: float | None = None) -> float:
    """Large-GEMM fraction of the FP8 peak: the MAMF FP8 row for `gpu` (H100 SXM and H800
    0.709, H200 0.734, B200 0.763), else the bf16 fraction (`bf16_fraction`, or the row's
    `matmul_fraction`) x FP8_OVER_BF16_FALLBACK."""
    hw = get_hardware(gpu)
    hw.peak_flops_per_second("fp8")  # raises, naming the chip, where there is no FP8
    row = _FP8_MAMF_GPU.get(hw.name)
    if row is not None:
        point = next(p for p in MAMF if p.gpu == row and p.dtype == "fp8")
        return point.flops_per_second / HARDWARE[row].peak_flops_per_second("fp8")
    base = bf16_fraction if bf16_fraction is not None else hw.matmul_fraction
    if base is None:
        rule = f"{hw.name} has no FP8 or bf16 MAMF figure: pass its bf16 fraction"
        raise SpecError("bf16_fraction", None, rule)
    return base * FP8_OVER_BF16_FALLBACK


def gemm_k_half(
    gpu: str, dtype: str = "bf16", matmul_fraction: float | None = None, out_bytes: int = 2
) -> float:
    """K at which a tile spends as long writing its output as multiplying (module docstring,
    mechanism 1): out_bytes x fraction x peak[dtype] / (2 x HBM bytes/s); 0 on GPUs that
    overlap the epilogue or have no data. `matmul_fraction` defaults to the row's bf16 MAMF
    (bf16/fp16) or `fp8_matmul_fraction` (fp8). Examples: h100-sxm bf16 237, fp8 419;
    a100-80gb bf16 131. Output in fp32 (a wgrad into an fp32 buffer): out_bytes = 4."""
    hw = get_hardware(gpu)
    if hw.name in EPILOGUE_OVERLAPPED or hw.name in NO_EPILOGUE_DATA:
        return 0.0
    fraction = matmul_fraction if matmul_fraction is not None else _default_fraction(hw, dtype)
    return out_bytes * fraction * hw.peak_flops_per_second(dtype) / (2 * hw.hbm_bytes_per_second)


def _default_fraction(hw: Hardware, dtype: str) -> float:
    if dtype == "fp8":
        return fp8_matmul_fraction(hw.name)
    if dtype in ("bf16", "fp16") and hw.matmul_fraction is not None:
        return hw.matmul_fraction
    rule = f"no cited {dtype} MAMF for {hw.name}: pass it (e.g. the resolved Efficiency.matmul)"
    raise SpecError("matmul_fraction", None, rule)


def gemm_k_efficiency(
    k: Any, gpu: str, dtype: str = "bf16", matmul_fraction: float | None = None, out_bytes: int = 2
) -> Any:
    """Share of the large-GEMM rate a GEMM with contraction length `k` keeps: k / (k + K_half)
    (`gemm_k_half`). Applies to a linear's forward (k = in_features) and data-gradient (k =
    out_features) GEMMs; the weight-gradient GEMM contracts over tokens and loses ~nothing.
    The MAMF fraction it multiplies was measured at K >= 12k on Hopper, K >= 5k on A100, so
    it already holds 1-3 % of this loss. Numbers or arrays."""
    return k / (k + gemm_k_half(gpu, dtype, matmul_fraction, out_bytes))


def fp8_gemm_fraction(gpu: str, k: Any, bf16_fraction: float | None = None) -> Any:
    """Fraction of the FP8 peak an FP8 GEMM (bf16 output) with contraction length `k` runs at,
    before tile and wave quantization (which depend on m and n and stay with the caller)."""
    fraction = fp8_matmul_fraction(gpu, bf16_fraction)
    return fraction * gemm_k_efficiency(k, gpu, "fp8", fraction)


def fit_k_half(
    points: tuple[GemmMeasurement, ...], peak_flops_per_second: float
) -> tuple[float, float]:
    """Least squares of 1/eff_i = c0 + c1 / K_i over `points` (eff = measured / peak), the
    serial-epilogue model's straight line: returns (plateau fraction 1/c0, K_half c1/c0)."""
    xs = [1 / p.k for p in points]
    ys = [peak_flops_per_second / p.flops_per_second for p in points]
    n = len(points)
    x_mean, y_mean = sum(xs) / n, sum(ys) / n
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - x_mean) ** 2 for x in xs
    )
    intercept = y_mean - slope * x_mean
    return 1 / intercept, slope / intercept
