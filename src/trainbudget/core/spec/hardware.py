"""Accelerator catalog: datasheet peaks, memory and link bandwidths, one row per chip.

Every figure is per accelerator (per GPU, per TPU chip). FLOP/s peaks are dense unless the
table is `sparse_flops_per_second` (2:4 structured sparsity, kept for reference only: no
estimate uses it unless asked with `sparse=True`). Link bandwidths are ONE direction, so a
vendor's "900 GB/s bidirectional" NVLink appears here as 450 GB/s. Where a vendor prints only
sparse figures, dense = sparse / 2 and the row's `notes` say so.

`fp8` is the FP8 tensor-core rate. Every chip here that has one runs E4M3 and E5M2 inputs at that
same rate (the datasheets print one "FP8" line), so the table keys the rate, not the format; the
formats' bits and ranges are `dtypes.FORMATS["fp8-e4m3"]` and `["fp8-e5m2"]`. `fp4` is the FP4
(E2M1 element) tensor-core rate, Blackwell only. A chip without a key has no such tensor cores
(A100: no FP8), and asking for its peak is an error naming the chip.

Not in the table: power-capped parts without a datasheet. torchtitan's H100 runs use Meta's
Grand Teton H100 with 96 GB HBM2e at 500 W (docs/performance.md); NVIDIA publishes no clocks or
peaks for that part, so those runs name it `other:` (see `published/`) rather than borrow the
700 W SXM row's peaks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from trainbudget.core.errors import SpecError, lookup
from trainbudget.core.units import GB, TB, GiB

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
ATTENTION_KERNELS = ("flash1", "flash2", "flash3", "cudnn")
"""Fused attention kernels by generation: the first FlashAttention (Dao et al. 2022; flash-attn
before 2.0, July 2023), FlashAttention-2 (Dao 2023; PyTorch SDPA's flash backend), and the
Hopper kernels that use its TMA and warpgroup MMA: FlashAttention-3 (Shah et al. 2024) and
cuDNN's fused attention, which Transformer Engine runs on Hopper and later GPUs. The two Hopper
kernels are apart because they measure apart (Shah et al. 2024, Fig. 5-6: cuDNN is faster at
short sequences, FlashAttention-3 at long ones)."""

_NDR_400G = 400 * GB / 8  # one 400 Gb/s NIC, bits -> bytes: 50 GB/s per direction
_HDR_200G = 200 * GB / 8  # one 200 Gb/s NIC: 25 GB/s per direction


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One accelerator. Mappings are read-only; units are bytes, bytes/s and FLOP/s."""

    name: str
    description: str
    memory_bytes: float
    hbm_bytes_per_second: float
    dense_flops_per_second: Mapping[str, float] = field(hash=False)
    sparse_flops_per_second: Mapping[str, float] = field(hash=False)
    intra_node_bytes_per_second: float
    inter_node_bytes_per_second: float
    gpus_per_node: int
    intra_node_link: str
    inter_node_link: str
    source_urls: tuple[str, ...]
    notes: str = ""
    measured: bool = False
    """A row built from a benchmark of this machine (no datasheet, so no source URL)."""
    sm_count: int = 0
    """Streaming multiprocessors (AMD: compute units), the slots a GEMM's output tiles fill
    wave by wave (`gemm_time.gemm_shape_efficiency`); 0 = not stated, no wave model."""
    matmul_fraction: float | None = None
    """Maximum achievable matmul FLOP/s (MAMF: the best of a sweep of large bf16 GEMM shapes,
    clock throttling under sustained load included) over the dense bf16 peak, measured; None
    where no measurement is cited (`efficiency.DEFAULT_MATMUL_FRACTION` is used)."""
    device_memory_bytes: float | None = None
    """The memory the device gives a process: `torch.cuda.get_device_properties(i).total_memory`,
    cudaMemGetInfo's total (HIP's on AMD), which PyTorch's out-of-memory message prints as "GPU 0
    has a total capacity of X GiB". It is not the datasheet's figure: an "80GB" H100 holds 80 GiB
    of HBM, of which ECC and the driver keep a part back, leaving ~79.1 GiB (84.9e9 bytes, above
    the decimal 80e9 of `memory_bytes`). None where no source reports it (`usable_memory_bytes`
    then falls back to `memory_bytes`). Drivers move it by ~0.1 GiB; the row cites one report."""
    device_memory_source: str = ""
    """Where `device_memory_bytes` was read: a public report of that figure on this GPU."""
    attention_fraction: Mapping[str, float] = field(default_factory=dict, hash=False)
    """Fraction of the dense peak a fused attention kernel sustains, forward and backward
    together, by kernel ('flash2', 'flash3'); a kernel without an entry runs at the 'flash2'
    figure, or `efficiency.DEFAULT_ATTENTION_FRACTION` without one."""

    def __post_init__(self) -> None:
        for attr in ("dense_flops_per_second", "sparse_flops_per_second"):
            table = dict(getattr(self, attr))
            for dtype, value in table.items():
                if dtype not in DTYPES:
                    raise SpecError(
                        f"{self.name}.{attr}", dtype, "dtype must be one of " + ", ".join(DTYPES)
                    )
                _require_positive(f"{self.name}.{attr}[{dtype}]", value)
            object.__setattr__(self, attr, MappingProxyType(table))
        for kernel, value in dict(self.attention_fraction).items():
            if kernel not in ATTENTION_KERNELS:
                rule = "kernel must be one of " + ", ".join(ATTENTION_KERNELS)
                raise SpecError(f"{self.name}.attention_fraction", kernel, rule)
            _require_fraction(f"{self.name}.attention_fraction[{kernel}]", value)
        object.__setattr__(
            self, "attention_fraction", MappingProxyType(dict(self.attention_fraction))
        )
        if self.matmul_fraction is not None:
            _require_fraction(f"{self.name}.matmul_fraction", self.matmul_fraction)
        if (
            isinstance(self.sm_count, bool)
            or not isinstance(self.sm_count, int)
            or self.sm_count < 0
        ):
            raise SpecError(f"{self.name}.sm_count", self.sm_count, "must be an integer >= 0")
        for attr in (
            "memory_bytes",
            "hbm_bytes_per_second",
            "intra_node_bytes_per_second",
            "inter_node_bytes_per_second",
        ):
            _require_positive(f"{self.name}.{attr}", getattr(self, attr))
        _check_device_memory(self)
        if self.gpus_per_node < 1:
            raise SpecError(f"{self.name}.gpus_per_node", self.gpus_per_node, "must be >= 1")
        if not self.measured and (
            not self.source_urls or not all(u.startswith("https://") for u in self.source_urls)
        ):
            raise SpecError(f"{self.name}.source_urls", self.source_urls, "need >= 1 https:// URL")
        for dtype, sparse in self.sparse_flops_per_second.items():
            dense = self.dense_flops_per_second.get(dtype)
            if dense is not None and sparse < dense:
                raise SpecError(
                    f"{self.name}.sparse_flops_per_second[{dtype}]",
                    sparse,
                    f"must be >= the dense peak {dense!r}",
                )

    @property
    def usable_memory_bytes(self) -> float:
        """The capacity the fits rule compares against: the device total where a source gives
        it, else the datasheet's `memory_bytes` (lower: the cautious side)."""
        return self.memory_bytes if self.device_memory_bytes is None else self.device_memory_bytes

    def peak_flops_per_second(self, dtype: str, *, sparse: bool = False) -> float:
        """Datasheet peak FLOP/s for `dtype` (dense unless `sparse=True`)."""
        table = self.sparse_flops_per_second if sparse else self.dense_flops_per_second
        if dtype not in table:
            kind = "sparse" if sparse else "dense"
            have = ", ".join(d for d in DTYPES if d in table) or "none"
            raise SpecError(
                "dtype",
                dtype,
                f"{self.name} has no {kind} {dtype} peak, so a precision computing in {dtype} "
                f"cannot be estimated on it; it has: {have}",
            )
        return table[dtype]


def _check_device_memory(row: Hardware) -> None:
    if row.device_memory_bytes is None:
        return
    _require_positive(f"{row.name}.device_memory_bytes", row.device_memory_bytes)
    if not row.device_memory_source.startswith("https://"):
        rule = "a device total needs the https:// URL of where it was reported"
        raise SpecError(f"{row.name}.device_memory_source", row.device_memory_source, rule)


def _require_fraction(field_name: str, value: float) -> None:
    _require_positive(field_name, value)
    if value > 1:
        raise SpecError(field_name, value, "is a fraction of the peak: must be at most 1")


def _require_positive(field_name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(field_name, value, "must be a positive finite number")


_A100_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_A100_DENSE = {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}
_A100_SPARSE = {"tf32": 312e12, "bf16": 624e12, "fp16": 624e12}
_A100_NOTES = (
    "No FP8 on Ampere. Datasheet prints dense and sparse tensor figures. NVLink 3 is 600 GB/s "
    "bidirectional -> 300 GB/s one direction. Inter-node assumes DGX A100: one 200 Gb/s HDR "
    "NIC per GPU. 108 SMs (datasheet: 6912 CUDA cores, 64 per SM). matmul_fraction: MAMF of "
    "the 'A100 SXM' row (ml-engineering), for both memory sizes. attention_fraction: "
    "FlashAttention-2 reaches 50-73 % of the A100 peak (Dao 2023, arXiv 2307.08691, abstract, "
    "Fig. 4-6); the backward, most of the time, is the slower half: 0.5."
)
_H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/"
_MAMF = (
    "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
    "#maximum-achievable-matmul-flops-comparison-table"
)
_A100_MAMF = 267.9e12 / 312e12  # "NVIDIA A100 SXM | 267.9 | 312 | 85.9%" (CUDA 12.1)
_H100_MAMF = 792.1e12 / 989e12  # "NVIDIA H100 SXM | 792.1 | 989 | 80.1%" (CUDA 12.1)
# "NVIDIA B200 SXM | 1745.0 | 2250 | 77.6% | 1792x16128x3072 | 2.7.1+cu128" (the table's later
# revision; its H100 SXM row there reads "794.5 | 989 | 80.3% ... H200 is the same")
_B200_MAMF = 1745.0e12 / 2250e12
_B200_SMS = "https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut"
# the first FlashAttention: "reaching only 25-40% of the theoretical maximum FLOPs/s", and
# FlashAttention-2 "around 2x speedup compared to FlashAttention" (Dao 2023, abstract): the low
# end of its range, as for FlashAttention-2's 0.5
_A100_ATTENTION = {"flash1": 0.25, "flash2": 0.5}
# FlashAttention-2 on H100 "up to 335 TFLOPs/s" forward + backward (Dao 2023, arXiv
# 2307.08691, Sec. 4.1, Fig. 7) without Hopper's TMA and warpgroup MMA; FlashAttention-3's
# backward is 1.5-1.75x FlashAttention-2's (Shah et al. 2024, arXiv 2407.08608, Sec. 4.1),
# the backward being most of the time: 1.5 x 335 / 989 ~ 0.5 for the Hopper kernels
_HOPPER_ATTENTION = {"flash2": 335e12 / 989e12, "flash3": 0.5, "cudnn": 0.5}
_ATTENTION_SOURCES = ("https://arxiv.org/abs/2307.08691", "https://arxiv.org/abs/2407.08608")
_HOPPER_BLOG = "https://developer.nvidia.com/blog/nvidia-hopper-architecture-in-depth/"
# H100 SXM and H200 share the GH100 tensor cores: datasheet sparse figures, dense = sparse / 2.
_HOPPER_SXM_SPARSE = {"tf32": 989e12, "bf16": 1979e12, "fp16": 1979e12, "fp8": 3958e12}

# fmt: off
_ROWS = (
    Hardware(
        name="a100-40gb", description="NVIDIA A100 SXM4 40GB",
        memory_bytes=40 * GB, hbm_bytes_per_second=1555 * GB,
        dense_flops_per_second=_A100_DENSE, sparse_flops_per_second=_A100_SPARSE,
        intra_node_bytes_per_second=300 * GB, inter_node_bytes_per_second=_HDR_200G,
        gpus_per_node=8, intra_node_link="NVLink 3", inter_node_link="InfiniBand HDR 200 Gb/s",
        source_urls=(_A100_DATASHEET, _MAMF, *_ATTENTION_SOURCES), notes=_A100_NOTES,
        sm_count=108, matmul_fraction=_A100_MAMF, attention_fraction=_A100_ATTENTION,
    ),
    Hardware(
        name="a100-80gb", description="NVIDIA A100 SXM4 80GB",
        memory_bytes=80 * GB, hbm_bytes_per_second=2039 * GB,
        dense_flops_per_second=_A100_DENSE, sparse_flops_per_second=_A100_SPARSE,
        intra_node_bytes_per_second=300 * GB, inter_node_bytes_per_second=_HDR_200G,
        gpus_per_node=8, intra_node_link="NVLink 3", inter_node_link="InfiniBand HDR 200 Gb/s",
        source_urls=(_A100_DATASHEET, _MAMF, *_ATTENTION_SOURCES), notes=_A100_NOTES,
        sm_count=108, matmul_fraction=_A100_MAMF, attention_fraction=_A100_ATTENTION,
    ),
    Hardware(
        name="h100-sxm", description="NVIDIA H100 SXM5 80GB",
        memory_bytes=80 * GB, hbm_bytes_per_second=3.35 * TB,
        dense_flops_per_second={"fp32": 67.5e12, "tf32": 494.5e12, "bf16": 989.5e12,
                                "fp16": 989.5e12, "fp8": 1979e12},
        sparse_flops_per_second=_HOPPER_SXM_SPARSE,
        intra_node_bytes_per_second=450 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="NVLink 4", inter_node_link="InfiniBand NDR 400 Gb/s",
        source_urls=(_H100_PAGE,
                     "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
                     _HOPPER_BLOG, _MAMF, *_ATTENTION_SOURCES),
        notes="Datasheet tensor figures are with sparsity (bf16 1979 TFLOPS); dense = sparse / 2. "
        "fp32 is 67.5e12 because the lecture this project follows uses 67.5e12; the datasheet "
        "prints 67 TFLOPS. NVLink 4 is 900 GB/s bidirectional -> 450 GB/s one direction. "
        "Inter-node assumes HGX/DGX H100: one 400 Gb/s NDR NIC per GPU. "
        "132 SMs (NVIDIA, 'Hopper architecture in-depth': SXM5 132, PCIe 114). "
        "matmul_fraction: MAMF 792.1 of 989 TFLOPS (ml-engineering); attention_fraction: "
        "FlashAttention-2 and -3 papers (the comment at _HOPPER_ATTENTION).",
        sm_count=132, matmul_fraction=_H100_MAMF, attention_fraction=_HOPPER_ATTENTION,
    ),
    Hardware(
        name="h100-pcie", description="NVIDIA H100 PCIe 80GB",
        memory_bytes=80 * GB, hbm_bytes_per_second=2 * TB,
        dense_flops_per_second={"fp32": 51e12, "tf32": 378e12, "bf16": 756.5e12,
                                "fp16": 756.5e12, "fp8": 1513e12},
        sparse_flops_per_second={"tf32": 756e12, "bf16": 1513e12, "fp16": 1513e12, "fp8": 3026e12},
        intra_node_bytes_per_second=64 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="PCIe 5.0 x16", inter_node_link="InfiniBand NDR 400 Gb/s",
        source_urls=("https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/"
                     "PB-11133-001_v01.pdf",
                     "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
                     _HOPPER_BLOG),
        notes="Tensor figures printed with sparsity; dense = sparse / 2. Memory bandwidth "
        "2,000 GB/s (product brief). Intra-node assumes an 8-GPU PCIe server talking over PCIe "
        "Gen5 (128 GB/s bidirectional -> 64 GB/s); the optional 600 GB/s NVLink bridge joins "
        "only pairs of cards. Inter-node assumes one 400 Gb/s NIC per GPU. "
        "114 SMs ('Hopper architecture in-depth'). No MAMF cited for it; attention "
        "fractions of the SXM part (the same kernels, assumed).",
        sm_count=114, attention_fraction=_HOPPER_ATTENTION,
    ),
    Hardware(
        name="h100-nvl", description="NVIDIA H100 NVL 94GB (PCIe card)",
        memory_bytes=94 * GB, hbm_bytes_per_second=3.9 * TB,
        dense_flops_per_second={"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12,
                                "fp16": 835.5e12, "fp8": 1670.5e12},
        sparse_flops_per_second={"tf32": 835e12, "bf16": 1671e12, "fp16": 1671e12, "fp8": 3341e12},
        intra_node_bytes_per_second=64 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="PCIe 5.0 x16", inter_node_link="InfiniBand NDR 400 Gb/s",
        source_urls=(_H100_PAGE,),
        notes="H100 product page, specifications table, H100 NVL column: TF32 835, BF16/FP16 "
        "1,671, FP8 3,341 TFLOPS, all marked 'with sparsity'; dense = sparse / 2. FP32 60 "
        "TFLOPS, 94 GB at 3.9 TB/s, 350-400 W configurable. Its NVLink bridge (600 GB/s "
        "bidirectional) joins pairs of cards only, so intra-node assumes an 8-card server "
        "over PCIe Gen5 (128 GB/s bidirectional -> 64 GB/s), as the h100-pcie row does. "
        "Inter-node assumes one 400 Gb/s NIC per GPU. "
        "132 SMs, as the SXM part (assumed: the page does not print SMs); attention fractions "
        "of the SXM part (assumed).",
        sm_count=132, attention_fraction=_HOPPER_ATTENTION,
    ),
    Hardware(
        name="h800", description="NVIDIA H800 SXM5 80GB",
        memory_bytes=80 * GB, hbm_bytes_per_second=3.35 * TB,
        dense_flops_per_second={"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12,
                                "fp16": 989.5e12, "fp8": 1979e12},
        sparse_flops_per_second=_HOPPER_SXM_SPARSE,
        intra_node_bytes_per_second=200 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="NVLink 4 (cut to 400 GB/s)",
        inter_node_link="InfiniBand NDR 400 Gb/s (ConnectX-7)",
        source_urls=("https://arxiv.org/abs/2505.09343", "https://github.com/deepseek-ai/DeepEP",
                     "https://arxiv.org/abs/2412.19437", _H100_PAGE),
        notes="DeepSeek-V3's GPU (arXiv 2412.19437 Sec. 3.1: 2,048 H800, 8 per node on "
        "NVLink/NVSwitch, InfiniBand across nodes). DeepSeek's hardware paper (arXiv "
        "2505.09343) describes it as an H100 SXM with FP64 and NVLink cut for export rules, "
        "NVLink 400 GB/s instead of 900 (bidirectional) -> 200 GB/s one direction. NVIDIA's "
        "own H800 sheet is not cited: tensor, memory and fp32 figures are the H100 SXM "
        "datasheet's (sparse, dense = sparse / 2; fp32 the printed 67 TFLOPS). DeepEP's "
        "README measures about 160 GB/s NVLink and one CX7 400 Gb/s NIC per GPU (~50 GB/s). "
        "132 SMs, MAMF and attention fractions of the H100 SXM (the same chip and power, "
        "assumed).",
        sm_count=132, matmul_fraction=_H100_MAMF, attention_fraction=_HOPPER_ATTENTION,
    ),
    Hardware(
        name="h200", description="NVIDIA H200 SXM 141GB",
        memory_bytes=141 * GB, hbm_bytes_per_second=4.8 * TB,
        dense_flops_per_second={"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12,
                                "fp16": 989.5e12, "fp8": 1979e12},
        sparse_flops_per_second=_HOPPER_SXM_SPARSE,
        intra_node_bytes_per_second=450 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="NVLink 4", inter_node_link="InfiniBand NDR 400 Gb/s",
        source_urls=("https://www.nvidia.com/en-us/data-center/h200/", _MAMF),
        notes="Same GH100 compute as H100 SXM; tensor figures printed with sparsity, dense = "
        "sparse / 2. fp32 is the datasheet's 67 TFLOPS (the h100-sxm row keeps the lecture's "
        "67.5). NVLink 900 GB/s bidirectional -> 450 GB/s. Inter-node: one 400 Gb/s NDR NIC "
        "per GPU. "
        "132 SMs and the attention fractions of H100 SXM (same GH100 compute: the datasheet's "
        "tensor peaks are the H100 SXM's, 1979 TFLOPS bf16 with sparsity). matmul_fraction: "
        "the H100 SXM's MAMF, which the table's later revision gives for both ('NVIDIA H100 "
        "SXM | 794.5 | 989 | 80.3% ... H200 is the same').",
        sm_count=132, matmul_fraction=_H100_MAMF, attention_fraction=_HOPPER_ATTENTION,
    ),
    Hardware(
        name="b200", description="NVIDIA B200 (HGX B200) 180GB",
        memory_bytes=180 * GB, hbm_bytes_per_second=7.7 * TB,
        dense_flops_per_second={"fp32": 75e12, "tf32": 1.1e15, "bf16": 2.25e15,
                                "fp16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15},
        sparse_flops_per_second={"tf32": 2.2e15, "bf16": 4.5e15, "fp16": 4.5e15, "fp8": 9e15,
                                 "fp4": 18e15},
        intra_node_bytes_per_second=900 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="NVLink 5", inter_node_link="InfiniBand NDR 400 Gb/s",
        source_urls=("https://www.nvidia.com/en-us/data-center/hgx/",
                     "https://www.nvidia.com/en-us/data-center/dgx-b200/", _B200_SMS, _MAMF),
        notes="HGX B200 per-GPU column; tensor figures printed with sparsity, dense = sparse / 2 "
        "(FP4 18 PFLOPS per GPU; the system row prints both, 144 | 72 PFLOPS per 8 GPUs). "
        "HBM 7.7 TB/s per the HGX table (DGX B200 prints 64 TB/s per 8 GPUs = 8 TB/s); fp32 75 "
        "TFLOPS per the HGX table (earlier Blackwell datasheets print 80). NVLink 5 is 1.8 TB/s "
        "bidirectional -> 900 GB/s. Inter-node: one 400 Gb/s ConnectX-7 NIC per GPU (DGX B200). "
        "148 SMs: two dies of 80, 74 enabled on each (Chips and Cheese, measured on a B200). "
        "matmul_fraction: MAMF 1745.0 of 2250 TFLOPS (ml-engineering, torch 2.7.1+cu128).",
        sm_count=148, matmul_fraction=_B200_MAMF,
    ),
    Hardware(
        name="mi300x", description="AMD Instinct MI300X 192GB",
        memory_bytes=192 * GB, hbm_bytes_per_second=5.3 * TB,
        dense_flops_per_second={"fp32": 163.4e12, "tf32": 653.7e12, "bf16": 1307.4e12,
                                "fp16": 1307.4e12, "fp8": 2614.9e12},
        sparse_flops_per_second={"tf32": 1307.4e12, "bf16": 2614.9e12, "fp16": 2614.9e12,
                                 "fp8": 5229.8e12},
        intra_node_bytes_per_second=448 * GB, inter_node_bytes_per_second=_NDR_400G,
        gpus_per_node=8, intra_node_link="Infinity Fabric",
        inter_node_link="400 Gb/s RoCE/InfiniBand",
        source_urls=("https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
                     "amd-instinct-mi300x-data-sheet.pdf",
                     "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
                     "https://rocm.docs.amd.com/projects/HIP/en/docs-6.2.0/reference/fp8_numbers.html"),
        notes="Datasheet prints dense and sparse figures; fp32 is the matrix peak. 8-GPU platform, "
        "each GPU has 7 Infinity Fabric links of 128 GB/s bidirectional (896 GB/s) -> 448 GB/s one "
        "direction summed over all 7 peers (64 GB/s to any single peer). Inter-node assumes one "
        "400 Gb/s NIC per GPU. Its FP8 are the FNUZ variants (HIP fp8_numbers page: gfx942 "
        "runs FNUZ, not OCP FP8): E4M3FNUZ tops out at 240, not OCP E4M3's 448. "
        "304 compute units (datasheet). matmul_fraction: MAMF 781.9 TFLOPS with ROCm 6.2 "
        "(ml-engineering), over the 1307.4 dense peak.",
        sm_count=304, matmul_fraction=781.9e12 / 1307.4e12,
    ),
    Hardware(
        name="rtx-4090", description="NVIDIA GeForce RTX 4090 24GB",
        memory_bytes=24 * GB, hbm_bytes_per_second=1008 * GB,
        dense_flops_per_second={"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12,
                                "fp16": 165.2e12, "fp8": 330.3e12},
        sparse_flops_per_second={"tf32": 165.2e12, "bf16": 330.4e12, "fp16": 330.4e12,
                                 "fp8": 660.6e12},
        intra_node_bytes_per_second=32 * GB, inter_node_bytes_per_second=100 * GB / 8 / 8,
        gpus_per_node=8, intra_node_link="PCIe 4.0 x16",
        inter_node_link="Ethernet 100 Gb/s per node",
        source_urls=("https://images.nvidia.com/aem-dam/Solutions/geforce/ada/"
                     "nvidia-ada-gpu-architecture.pdf",
                     "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"),
        notes="Ada whitepaper (Appendix A). bf16/fp16/fp8 use the FP32-accumulate tensor figures "
        "(what training uses); FP16-accumulate is 2x higher for fp16/fp8. fp32 is the non-tensor "
        "peak. Memory is GDDR6X, not HBM. No NVLink: intra-node assumes an 8-card PCIe Gen4 "
        "server (64 GB/s bidirectional -> 32 GB/s); inter-node assumes one 100 Gb/s NIC per node "
        "shared by 8 GPUs. "
        "128 SMs (Ada whitepaper, Appendix A).",
        sm_count=128,
    ),
    Hardware(
        name="tpu-v5e", description="Google Cloud TPU v5e",
        memory_bytes=16 * GB, hbm_bytes_per_second=819 * GB,
        dense_flops_per_second={"bf16": 197e12}, sparse_flops_per_second={},
        intra_node_bytes_per_second=200 * GB, inter_node_bytes_per_second=2 * 100 * GB / 8 / 8,
        gpus_per_node=8, intra_node_link="ICI", inter_node_link="Data-center network (DCN)",
        source_urls=("https://cloud.google.com/tpu/docs/v5e",),
        notes="Per chip. Google gives bf16 (and int8) only, so fp32/tf32/fp8 are omitted. HBM2 "
        "819 GB/s as first published (a later page says 800 GiB/s). Node = one ct5lp-hightpu-8t "
        "host with 8 chips. ICI 400 GB/s bidirectional per chip -> 200 GB/s one direction. DCN: "
        "2 x 100 Gb/s NICs per host shared by 8 chips -> 25 Gb/s per chip.",
    ),
    Hardware(
        name="tpu-v5p", description="Google Cloud TPU v5p",
        memory_bytes=95 * GiB, hbm_bytes_per_second=2765 * GB,
        dense_flops_per_second={"bf16": 459e12, "fp8": 459e12}, sparse_flops_per_second={},
        intra_node_bytes_per_second=600 * GB, inter_node_bytes_per_second=50 * GB / 8,
        gpus_per_node=4, intra_node_link="ICI", inter_node_link="Data-center network (DCN)",
        source_urls=("https://cloud.google.com/tpu/docs/v5p",),
        notes="Per chip. Google lists bf16 459 TFLOPS and FP8 459 TFLOPS (same rate); no "
        "fp32/tf32. HBM 95 GiB usable (96 GiB physical), 2765 GB/s. Node = one 4-chip host. "
        "ICI 1200 GB/s bidirectional per chip -> 600 GB/s one direction. DCN 50 Gb/s per chip.",
    ),
)

# fmt: on

_PRIME_RL_BENCHMARKS = (
    "https://github.com/PrimeIntellect-ai/prime-rl/blob/main/benchmarks/results/BENCHMARKS.md"
)
_DEVICE_MEMORY_GIB = {
    # catalog row -> (total capacity in GiB as PyTorch's out-of-memory message prints it, where)
    "a100-40gb": (39.50, "https://github.com/TianheWu/CoSeR/issues/10"),  # variant not stated
    "a100-80gb": (79.25, "https://github.com/levihsu/OOTDiffusion/issues/235"),
    # "NVIDIA H100 80GB HBM3", driver 535.247.01 (nvidia-smi: 81559 MiB physical); prime-rl's
    # H100 HBM3 runs print 79.18-79.21 GiB with later drivers
    "h100-sxm": (79.11, "https://github.com/vllm-project/vllm/issues/27508"),
    "h100-nvl": (93.00, "https://github.com/ali-vilab/VACE/issues/56"),  # "H100 NVL 94GB"
    # 8xH200 and 8xB200 runs, "Failed Benchmarks" of the 2026-01-13 revision
    "h200": (139.80, _PRIME_RL_BENCHMARKS),
    "b200": (178.36, _PRIME_RL_BENCHMARKS),
    # rocminfo's GLOBAL pool on an MI300X: 201,310,208 KB, the memory HIP allocates from
    "mi300x": (201_310_208 / 2**20, "https://github.com/ROCm/rocm-examples/issues/187"),
    "rtx-4090": (23.64, "https://github.com/ali-vilab/VGen/issues/104"),
}
"""Device totals with a public source. No report was found for h100-pcie, h800 (each the 80 GB
datasheet figure then) or the TPUs (XLA's allocator, not CUDA's)."""


def _with_device_memory(row: Hardware) -> Hardware:
    if row.name not in _DEVICE_MEMORY_GIB:
        return row
    gib, url = _DEVICE_MEMORY_GIB[row.name]
    return replace(row, device_memory_bytes=gib * GiB, device_memory_source=url)


_ROWS = tuple(_with_device_memory(row) for row in _ROWS)

HARDWARE: Mapping[str, Hardware] = MappingProxyType({row.name: row for row in _ROWS})
if len(HARDWARE) != len(_ROWS):  # pragma: no cover - guards against a duplicated row name
    raise RuntimeError("duplicate name in the hardware table")


def get_hardware(name: str) -> Hardware:
    """The catalog row for `name` (key such as "h100-sxm"; "H100-SXM" finds it too)."""
    return lookup("gpu", name, HARDWARE)
