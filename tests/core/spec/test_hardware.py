"""Hardware catalog: project conventions, datasheet figures and lookup errors."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.hardware import DTYPES, HARDWARE, Hardware, get_hardware
from trainbudget.core.units import GB, TB

REQUIRED = (
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h800",
    "h200",
    "b200",
    "mi300x",
    "rtx-4090",
    "tpu-v5e",
    "tpu-v5p",
)


def test_required_rows_present_and_keys_match_names():
    assert set(REQUIRED) <= set(HARDWARE)
    for key, hw in HARDWARE.items():
        assert hw.name == key
        assert get_hardware(key) is hw


# --- project conventions (fixed by the spec documents) --------------------------------------


def test_h100_sxm_bf16_fp16_dense_is_half_the_sparse_datasheet_figure():
    h100 = get_hardware("h100-sxm")
    # seed 001 get_promised_flop_per_sec: H100 bf16 = 989.5e12 (datasheet 1979 TFLOPS is sparse)
    assert h100.peak_flops_per_second("bf16") == 989.5e12
    assert h100.peak_flops_per_second("fp16") == 989.5e12
    # https://www.nvidia.com/en-us/data-center/h100/ : BF16 Tensor Core 1,979 TFLOPS (sparsity)
    assert h100.peak_flops_per_second("bf16", sparse=True) == 1979e12


def test_h100_sxm_fp32_lecture_convention():
    h100 = get_hardware("h100-sxm")
    # seed 001 get_promised_flop_per_sec: H100 fp32 = 67.5e12 (datasheet prints 67 TFLOPS)
    assert h100.peak_flops_per_second("fp32") == 67.5e12
    assert "67.5" in h100.notes and "67 " in h100.notes


def test_h100_memory_is_decimal_80gb():
    # https://www.nvidia.com/en-us/data-center/h100/ : 80 GB, 3.35 TB/s
    h100 = get_hardware("h100-sxm")
    assert h100.memory_bytes == 80 * GB == 80e9
    assert h100.hbm_bytes_per_second == 3.35 * TB


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb"])
def test_a100_conventions(name):
    a100 = get_hardware(name)
    # seed 001 get_promised_flop_per_sec: A100 bf16 = fp16 = 312e12, fp32 = 19.5e12
    # (also nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)
    assert a100.peak_flops_per_second("bf16") == 312e12
    assert a100.peak_flops_per_second("fp16") == 312e12
    assert a100.peak_flops_per_second("fp32") == 19.5e12


def test_a100_memory_variants():
    # nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 40GB 1,555 GB/s; 80GB SXM 2,039 GB/s
    assert get_hardware("a100-40gb").memory_bytes == 40 * GB
    assert get_hardware("a100-40gb").hbm_bytes_per_second == 1555 * GB
    assert get_hardware("a100-80gb").memory_bytes == 80 * GB
    assert get_hardware("a100-80gb").hbm_bytes_per_second == 2039 * GB


def test_tpu_v5e_conventions_and_b_v5e_ratio():
    v5e = get_hardware("tpu-v5e")
    # https://cloud.google.com/tpu/docs/v5e : 197 TFLOPs bf16, HBM2 16 GB at 819 GBps
    assert v5e.peak_flops_per_second("bf16") == 197e12
    assert v5e.hbm_bytes_per_second == 819e9
    # seed 004: "compute-bound above ~240 tokens per batch": 197e12 / 819e9 = 240.5 FLOP/byte
    ratio = v5e.peak_flops_per_second("bf16") / v5e.hbm_bytes_per_second
    assert ratio == pytest.approx(240.5, abs=0.1)


def test_s_train_time_divisor():
    # S-train-time: 1024 H100s at bf16 989.5e12 (seed 001 get_promised_flop_per_sec), MFU 0.5
    h100 = get_hardware("h100-sxm")
    divisor = 1024 * h100.peak_flops_per_second("bf16") * 0.5
    assert divisor == pytest.approx(1024 * 989.5e12 * 0.5, rel=1e-15)
    assert divisor == pytest.approx(5.06624e17, rel=1e-12)


# --- other datasheet figures -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "memory", "bandwidth", "bf16"),
    [
        # https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/PB-11133-001_v01.pdf
        # 80 GB, 2,000 GB/s, BF16 1,513 TFLOPS with sparsity -> 756.5 dense
        ("h100-pcie", 80 * GB, 2 * TB, 756.5e12),
        # https://www.nvidia.com/en-us/data-center/h200/ : 141 GB, 4.8 TB/s, BF16 1,979 sparse
        ("h200", 141 * GB, 4.8 * TB, 989.5e12),
        # https://www.nvidia.com/en-us/data-center/hgx/ : HGX B200 per GPU 180 GB, 7.7 TB/s,
        # FP16/BF16 4.5 PFLOPS with sparsity -> 2.25 dense
        ("b200", 180 * GB, 7.7 * TB, 2.25e15),
        # amd-instinct-mi300x-data-sheet.pdf: 192 GB HBM3, 5.3 TB/s, BF16 1307.4 TFLOPs dense
        ("mi300x", 192 * GB, 5.3 * TB, 1307.4e12),
        # nvidia-ada-gpu-architecture.pdf: 24 GB, 1008 GB/s, BF16 (FP32 accumulate) 165.2 dense
        ("rtx-4090", 24 * GB, 1008 * GB, 165.2e12),
        # https://cloud.google.com/tpu/docs/v5p : 459 TFLOPs bf16, 2765 GBps
        ("tpu-v5p", None, 2765 * GB, 459e12),
    ],
)
def test_datasheet_figures(name, memory, bandwidth, bf16):
    hw = get_hardware(name)
    if memory is not None:
        assert hw.memory_bytes == memory
    assert hw.hbm_bytes_per_second == pytest.approx(bandwidth)
    assert hw.peak_flops_per_second("bf16") == bf16


# --- rows added for published runs and FP8 (issue "Numbers you can trust", item 4) ----------


def test_h100_nvl_datasheet():
    nvl = get_hardware("h100-nvl")
    # https://www.nvidia.com/en-us/data-center/h100/ , specifications, H100 NVL column:
    # FP32 60 TFLOPS; TF32 835, BFLOAT16 1,671, FP16 1,671, FP8 3,341 TFLOPS (with sparsity);
    # 94GB; 3.9TB/s; NVLink 600GB/s (a bridge joining two cards), PCIe Gen5 128GB/s
    assert nvl.memory_bytes == 94 * GB
    assert nvl.hbm_bytes_per_second == 3.9 * TB
    assert nvl.peak_flops_per_second("fp32") == 60e12
    sparse = {"tf32": 835e12, "bf16": 1671e12, "fp16": 1671e12, "fp8": 3341e12}
    assert dict(nvl.sparse_flops_per_second) == sparse
    for dtype, value in sparse.items():
        assert nvl.peak_flops_per_second(dtype) * 2 == value
    # bridge joins pairs only: 8 cards talk over PCIe Gen5, 128 GB/s bidirectional -> 64
    assert nvl.intra_node_bytes_per_second == 64 * GB


def test_h800_is_h100_sxm_compute_with_cut_nvlink():
    h800, h100, h200 = get_hardware("h800"), get_hardware("h100-sxm"), get_hardware("h200")
    # arXiv 2505.09343 (DeepSeek, "Insights into DeepSeek-V3"): H800 = H100 SXM with FP64 and
    # NVLink cut; NVLink 400 GB/s bidirectional (H100: 900) -> 200 GB/s one direction
    assert h800.intra_node_bytes_per_second == 200 * GB
    assert h800.intra_node_bytes_per_second < h100.intra_node_bytes_per_second
    # H100 SXM datasheet tensor peaks, dense = sparse / 2; fp32 the datasheet's 67 (as h200)
    assert dict(h800.dense_flops_per_second) == dict(h200.dense_flops_per_second)
    assert dict(h800.sparse_flops_per_second) == dict(h100.sparse_flops_per_second)
    assert (h800.memory_bytes, h800.hbm_bytes_per_second) == (80 * GB, 3.35 * TB)
    # github.com/deepseek-ai/DeepEP README: one CX7 InfiniBand 400 Gb/s NIC per H800
    assert h800.inter_node_bytes_per_second == 400 * GB / 8


def test_b200_fp4_dense_and_sparse():
    b200 = get_hardware("b200")
    # https://www.nvidia.com/en-us/data-center/hgx/ , HGX B200: FP4 Tensor Core 18 PFLOPS per
    # GPU; system row "144 | 72 PFLOPS" (sparse | dense) for 8 GPUs -> 9 PFLOPS dense per GPU
    assert b200.peak_flops_per_second("fp4") == 72e15 / 8 == 9e15
    assert b200.peak_flops_per_second("fp4", sparse=True) == 144e15 / 8 == 18e15
    # FP4 runs at twice the FP8 rate
    assert b200.peak_flops_per_second("fp4") == 2 * b200.peak_flops_per_second("fp8")


def test_b200_sms_and_mamf():
    """148 SMs: two dies of 80 with 74 enabled each (Chips and Cheese, 'Nvidia's B200: Keeping
    the CUDA Juggernaut Rolling'); MAMF 1745.0 of 2250 TFLOPS (ml-engineering's table, the row
    kernel_costs.MAMF holds too: the two tables agree)."""
    from trainbudget.core.spec.kernel_costs import MAMF

    b200 = get_hardware("b200")
    assert b200.sm_count == 2 * 74 == 148
    (row,) = [m for m in MAMF if m.gpu == "b200" and m.dtype == "bf16"]
    assert b200.matmul_fraction == pytest.approx(1745.0 / 2250)
    assert b200.matmul_fraction == pytest.approx(row.flops_per_second / 2250e12)


def test_h200_takes_the_h100_sxm_compute_figures():
    """Same GH100 compute: the H100 SXM's SM count, MAMF ('H200 is the same') and attention."""
    h200, h100 = get_hardware("h200"), get_hardware("h100-sxm")
    assert h200.sm_count == h100.sm_count
    assert h200.matmul_fraction == h100.matmul_fraction
    assert dict(h200.attention_fraction) == dict(h100.attention_fraction)


# Where a datasheet prints the tensor figures with sparsity, the dense peak is half of them.
_SPARSE_PRINTED = ("h100-sxm", "h100-pcie", "h100-nvl", "h800", "h200", "b200")


@pytest.mark.parametrize("name", _SPARSE_PRINTED)
def test_sparse_is_twice_dense(name):
    hw = get_hardware(name)
    for dtype, sparse in hw.sparse_flops_per_second.items():
        assert sparse == pytest.approx(2 * hw.peak_flops_per_second(dtype), rel=1e-12)


@pytest.mark.parametrize(
    ("name", "fp8"),
    [
        # dense FP8 (E4M3 and E5M2 run at one rate): sparse datasheet figure / 2
        ("h100-sxm", 1979e12),  # nvidia.com/en-us/data-center/h100/ : 3,958 with sparsity
        ("h100-nvl", 1670.5e12),  # same page, H100 NVL column: 3,341 with sparsity
        ("h800", 1979e12),  # H100 SXM compute (arXiv 2505.09343)
        ("h200", 1979e12),  # nvidia.com/en-us/data-center/h200/ : 3,958 with sparsity
        ("b200", 4.5e15),  # nvidia.com/en-us/data-center/hgx/ : HGX B200 FP8 9 PFLOPS sparse
        ("mi300x", 2614.9e12),  # amd-instinct-mi300x-data-sheet.pdf: FP8 2,614.9 TFLOPS dense
    ],
)
def test_fp8_dense_peaks(name, fp8):
    hw = get_hardware(name)
    assert hw.peak_flops_per_second("fp8") == fp8
    # on every one of them the FP8 tensor rate is twice the bf16 rate
    assert fp8 == pytest.approx(2 * hw.peak_flops_per_second("bf16"), rel=1e-3)


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb", "tpu-v5e"])
def test_no_fp8_error_names_the_gpu_and_fp8(name):
    with pytest.raises(SpecError) as info:
        get_hardware(name).peak_flops_per_second("fp8")
    message = str(info.value)
    assert "\n" not in message
    assert name in message and "'fp8'" in message and "precision" in message


def test_one_direction_link_convention():
    # https://www.nvidia.com/en-us/data-center/h100/ : NVLink 900 GB/s (bidirectional) -> 450
    assert get_hardware("h100-sxm").intra_node_bytes_per_second == 450 * GB
    # one 400 Gb/s NDR NIC per GPU -> 50 GB/s
    assert get_hardware("h100-sxm").inter_node_bytes_per_second == 50 * GB
    # https://cloud.google.com/tpu/docs/v5e : ICI 400 GBps bidirectional per chip -> 200
    assert get_hardware("tpu-v5e").intra_node_bytes_per_second == 200 * GB
    # https://cloud.google.com/tpu/docs/v5p : ICI 1200 GBps bidirectional per chip -> 600
    assert get_hardware("tpu-v5p").intra_node_bytes_per_second == 600 * GB


# --- invariants over every row ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_row_invariants(name):
    hw = HARDWARE[name]
    assert hw.source_urls and all(url.startswith("https://") for url in hw.source_urls)
    assert hw.memory_bytes > 0
    assert hw.hbm_bytes_per_second > 0
    assert hw.intra_node_bytes_per_second > 0
    assert hw.inter_node_bytes_per_second > 0
    assert hw.gpus_per_node >= 1
    assert hw.description and hw.intra_node_link and hw.inter_node_link
    assert hw.peak_flops_per_second("bf16") > 0
    assert set(hw.dense_flops_per_second) <= set(DTYPES)
    assert set(hw.sparse_flops_per_second) <= set(DTYPES)
    for dtype, sparse in hw.sparse_flops_per_second.items():
        if dtype in hw.dense_flops_per_second:
            assert sparse >= hw.dense_flops_per_second[dtype]


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_rows_are_immutable(name):
    hw = HARDWARE[name]
    assert isinstance(hw.dense_flops_per_second, MappingProxyType)
    assert isinstance(hw.sparse_flops_per_second, MappingProxyType)
    with pytest.raises(TypeError):
        hw.dense_flops_per_second["bf16"] = 1.0  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.memory_bytes = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        HARDWARE["x"] = hw  # type: ignore[index]
    hash(hw)  # usable as a dict key / cache argument


def test_sparse_is_never_the_default():
    hw = get_hardware("h100-sxm")
    assert hw.peak_flops_per_second("bf16") < hw.peak_flops_per_second("bf16", sparse=True)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["h100", "H100_SXM", "tpu-v9", ""])
def test_unknown_name_lists_known_keys(bad):
    with pytest.raises(SpecError) as info:
        get_hardware(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert "h100-sxm" in message
    assert info.value.field == "gpu"


def test_a_name_in_other_case_finds_its_row():
    assert get_hardware("H100-SXM") is get_hardware("h100-sxm")


@pytest.mark.parametrize(
    ("name", "dtype", "sparse"),
    [
        ("tpu-v5e", "fp32", False),
        ("a100-80gb", "fp8", False),
        ("tpu-v5e", "bf16", True),
        ("a100-40gb", "fp32", True),
        ("h100-sxm", "int4", False),
    ],
)
def test_missing_dtype_is_a_spec_error(name, dtype, sparse):
    hw = get_hardware(name)
    with pytest.raises(SpecError) as info:
        hw.peak_flops_per_second(dtype, sparse=sparse)
    assert info.value.field == "dtype"
    assert "dtype" in str(info.value)
    assert dtype in str(info.value)


def test_missing_dtype_error_lists_available_dtypes():
    with pytest.raises(SpecError) as info:
        get_hardware("tpu-v5e").peak_flops_per_second("fp32")
    assert "bf16" in str(info.value)


def _row(**overrides) -> Hardware:
    hw = get_hardware("a100-80gb")
    base = {f.name: getattr(hw, f.name) for f in dataclasses.fields(hw)}
    base.update(overrides)
    return Hardware(**base)


@pytest.mark.parametrize(
    "overrides",
    [
        {"memory_bytes": 0},
        {"hbm_bytes_per_second": -1.0},
        {"gpus_per_node": 0},
        {"source_urls": ()},
        {"source_urls": ("http://example.com",)},
        {"dense_flops_per_second": {"int8": 1e12, "bf16": 1e12}},
        {"sparse_flops_per_second": {"bf16": 1e12}},  # sparse below the 312e12 dense peak
    ],
)
def test_bad_rows_are_rejected(overrides):
    with pytest.raises(SpecError):
        _row(**overrides)


def test_the_kernel_rows_reject_bad_figures():
    base = get_hardware("a100-80gb")
    with pytest.raises(SpecError, match="attention_fraction"):
        dataclasses.replace(base, attention_fraction={"flash9": 0.5})
    with pytest.raises(SpecError, match="at most 1"):
        dataclasses.replace(base, matmul_fraction=1.2)
    with pytest.raises(SpecError, match="sm_count"):
        dataclasses.replace(base, sm_count=-1)
    assert base.sm_count == 108 and get_hardware("h100-sxm").sm_count == 132


def test_the_device_totals_are_cited_and_between_the_datasheet_and_the_hbm() -> None:
    """What CUDA gives a process (torch.cuda.get_device_properties(i).total_memory, printed as
    "GPU 0 has a total capacity of X GiB") is above the datasheet's decimal GB and below the
    HBM stacks' binary size: an "80GB" H100 holds 80 GiB, ECC and the driver keep ~0.9 GiB
    back. The GiB figures are those the cited reports print."""
    from trainbudget.core.units import GiB

    printed_gib = {
        "h100-sxm": 79.11,  # vllm-project/vllm#27508, "NVIDIA H100 80GB HBM3"
        "a100-80gb": 79.25,  # levihsu/OOTDiffusion#235
        "h200": 139.80,  # PrimeIntellect-ai/prime-rl benchmarks/results/BENCHMARKS.md
        "b200": 178.36,  # the same file's 8xB200 runs
        "rtx-4090": 23.64,  # ali-vilab/VGen#104
    }
    for name, gib in printed_gib.items():
        hw = HARDWARE[name]
        assert hw.device_memory_bytes == pytest.approx(gib * GiB)
        assert hw.device_memory_source.startswith("https://github.com/")
        nominal_gib = hw.memory_bytes / 1e9  # the datasheet's "80GB" is 80 GiB of HBM
        assert hw.memory_bytes < hw.usable_memory_bytes < nominal_gib * GiB
    # no report found: the datasheet's figure, the cautious side
    assert HARDWARE["h800"].usable_memory_bytes == HARDWARE["h800"].memory_bytes


def test_a_device_total_without_a_source_is_refused() -> None:
    with pytest.raises(SpecError, match=r"h100-sxm.device_memory_source.*https://"):
        dataclasses.replace(HARDWARE["h100-sxm"], device_memory_source="")
