"""The device benchmark on a CPU with tiny sizes, the exact GPU-name table, calibration files
and the `trainbudget bench` command."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from clirun import cli
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.timing.calibration import (
    efficiency_from_calibration,
    load_calibration,
)
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY
from trainbudget.core.spec.hardware import HARDWARE
from trainbudget.profile.bench import (
    BenchReport,
    MatmulResult,
    calibration_from,
    roofline,
    save_calibration,
)
from trainbudget.profile.device import GPU_CATALOG_KEYS, DeviceInfo, catalog_key_for

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    import torch

    HAS_CUDA = torch.cuda.is_available()
else:
    HAS_CUDA = False
SRC = str(Path(__file__).resolve().parents[2] / "src")


def needs_torch(fn):
    return pytest.mark.torch(pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")(fn))


def _result(n: int, dtype: str, achieved: float, peak: float | None = None) -> MatmulResult:
    flops = 2 * n**3
    return MatmulResult(
        n=n,
        dtype=dtype,
        seconds=flops / achieved,
        flops=flops,
        achieved_flops_per_second=achieved,
        peak_flops_per_second=peak,
        mfu=None if peak is None else achieved / peak,
    )


H100 = DeviceInfo(
    kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", total_memory_bytes=None
)
CPU = DeviceInfo(kind="cpu", name="Some CPU", catalog_key=None, total_memory_bytes=None)


def _h100_report() -> BenchReport:
    """An H100 reaching 70 % of its bf16 peak, 60 % of fp32 and 85 % of HBM bandwidth."""
    hw = HARDWARE["h100-sxm"]
    bf16, fp32 = hw.dense_flops_per_second["bf16"], hw.dense_flops_per_second["fp32"]
    return BenchReport(
        device=H100,
        matmul=(
            _result(2048, "bf16", 0.5 * bf16, bf16),
            _result(8192, "bf16", 0.7 * bf16, bf16),
            _result(8192, "fp32", 0.6 * fp32, fp32),
        ),
        bandwidth_bytes_per_second=0.85 * hw.hbm_bytes_per_second,
        peak_bandwidth_bytes_per_second=hw.hbm_bytes_per_second,
    )


# ---------------------------------------------------------------- device identification


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_known_gpu_names_map_exactly(name: str, key: str) -> None:
    assert catalog_key_for(name) == key


@pytest.mark.parametrize(
    "name",
    ["NVIDIA H100 NVL", "NVIDIA A100 80GB PCIe", "H100", "nvidia h100 80gb hbm3", "Tesla V100"],
)
def test_unknown_or_near_miss_names_have_no_catalog_row(name: str) -> None:
    # a near miss is another product (other clocks, other bandwidth): never guessed
    assert catalog_key_for(name) is None


def test_table_targets_exist_in_catalog() -> None:
    assert set(GPU_CATALOG_KEYS.values()) <= set(HARDWARE)


@needs_torch
def test_identify_cpu() -> None:
    from trainbudget.profile.device import identify_device

    info = identify_device("cpu")
    assert info.kind == "cpu" and info.name and info.catalog_key is None


@needs_torch
@pytest.mark.parametrize(("name", "key"), [("NVIDIA H200", "h200"), ("NVIDIA H100 NVL", None)])
def test_identify_cuda_uses_the_table(monkeypatch, name: str, key: str | None) -> None:
    from trainbudget.profile.device import identify_device

    props = SimpleNamespace(name=name, total_memory=141 * 10**9)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _index: props)
    info = identify_device(torch.device("cuda", 0))
    assert (info.kind, info.name, info.catalog_key) == ("cuda", name, key)
    assert info.total_memory_bytes == 141 * 10**9


@needs_torch
def test_resolve_device() -> None:
    from trainbudget.profile.device import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    with pytest.raises(SpecError) as err:
        resolve_device("tpu")
    assert err.value.field == "device"
    if not HAS_CUDA:
        with pytest.raises(SpecError, match="CUDA is not available"):
            resolve_device("cuda")


# ---------------------------------------------------------------- benchmarks on the CPU


@needs_torch
def test_time_matmul_cpu() -> None:
    from trainbudget.profile.bench import time_matmul

    assert time_matmul(32, "fp32", "cpu", warmup=1, repeats=3) > 0
    for n, dtype, field in [(0, "fp32", "sizes"), (32, "fp8", "dtype"), (32, "tf32", "dtype")]:
        with pytest.raises(SpecError) as err:
            time_matmul(n, dtype, "cpu")
        assert err.value.field == field


@needs_torch
def test_matmul_bench_cpu() -> None:
    from trainbudget.profile.bench import matmul_bench

    seen = []
    results = matmul_bench([64, 32], ["fp32"], "cpu", warmup=1, repeats=2, on_result=seen.append)
    assert [r.n for r in results] == [32, 64]  # ascending, each reported as measured
    assert seen == results
    for r in results:
        assert r.flops == 2 * r.n**3
        assert r.achieved_flops_per_second == pytest.approx(r.flops / r.seconds)
        assert r.peak_flops_per_second is None and r.mfu is None


@needs_torch
def test_slow_sizes_are_skipped_and_noted() -> None:
    from trainbudget.profile.bench import run_bench

    report = run_bench(
        [32, 64], ["fp32"], "cpu", bandwidth_bytes=1 << 20, repeats=1, max_sample_seconds=1e-12
    )
    assert report.matmul == ()
    assert dict(report.skipped) == {"fp32": (32, 64)}
    assert any("fp32 n=32, 64 skipped" in note for note in report.notes)
    assert any("no catalog peak for CPUs" in note for note in report.notes)


@needs_torch
def test_bandwidth_bench_cpu() -> None:
    from trainbudget.profile.bench import bandwidth_bench

    assert bandwidth_bench(1 << 20, "cpu", warmup=1, repeats=3) > 0
    with pytest.raises(SpecError):
        bandwidth_bench(0, "cpu")


def test_roofline_best_per_dtype_and_ridges() -> None:
    results = [_result(64, "fp32", 1e9), _result(128, "fp32", 4e9), _result(64, "bf16", 2e9)]
    roof = roofline(results, 2e9)
    assert dict(roof.best_flops_per_second) == {"fp32": 4e9, "bf16": 2e9}
    assert dict(roof.ridge_flops_per_byte) == {"fp32": 2.0, "bf16": 1.0}
    assert dict(roof.peak_ridge_flops_per_byte) == {}
    hw = HARDWARE["h100-sxm"]
    roof = roofline(results, 2e9, "h100-sxm")
    assert roof.peak_ridge_flops_per_byte["bf16"] == 989.5e12 / hw.hbm_bytes_per_second


# ---------------------------------------------------------------- calibration


def test_calibration_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    written = save_calibration(path, _h100_report())
    loaded = load_calibration(path)
    assert loaded == written == calibration_from(_h100_report())
    assert loaded.catalog_key == "h100-sxm"
    assert loaded.matmul_fraction["bf16"] == pytest.approx(0.7)  # the best size, not the last
    assert loaded.matmul_fraction["fp32"] == pytest.approx(0.6)
    assert loaded.hbm_fraction == pytest.approx(0.85)


def test_efficiency_from_calibration(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    save_calibration(path, _h100_report())
    eff = efficiency_from_calibration(load_calibration(path))
    assert eff.matmul == pytest.approx(0.7)
    assert eff.hbm == pytest.approx(0.85)
    assert eff.attention == DEFAULT_EFFICIENCY.attention


def test_cpu_calibration_gives_no_efficiency(tmp_path: Path) -> None:
    report = BenchReport(
        device=CPU,
        matmul=(_result(256, "bf16", 1e9),),
        bandwidth_bytes_per_second=1e10,
        peak_bandwidth_bytes_per_second=None,
    )
    path = tmp_path / "cal.json"
    save_calibration(path, report)
    cal = load_calibration(path)
    assert cal.matmul_fraction == {} and cal.hbm_fraction is None
    with pytest.raises(SpecError, match="no catalog peak for Some CPU"):
        efficiency_from_calibration(cal)


def test_efficiency_refuses_fraction_above_peak(tmp_path: Path) -> None:
    hw = HARDWARE["h100-sxm"]
    peak = hw.dense_flops_per_second["bf16"]
    report = BenchReport(
        device=H100,
        matmul=(_result(8192, "bf16", 1.2 * peak, peak),),
        bandwidth_bytes_per_second=0.8 * hw.hbm_bytes_per_second,
        peak_bandwidth_bytes_per_second=hw.hbm_bytes_per_second,
    )
    path = tmp_path / "cal.json"
    save_calibration(path, report)
    with pytest.raises(SpecError) as err:
        efficiency_from_calibration(load_calibration(path))
    assert err.value.field == "calibration.matmul_fraction_of_peak"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: "not json {", "calibration"),
        (lambda d: {**d, "format": "other"}, "calibration"),
        (lambda d: {**d, "version": 9}, "calibration.version"),
        (lambda d: {**d, "catalog_key": "h999"}, "calibration.catalog_key"),
        (lambda d: {**d, "hbm_fraction_of_peak": -1}, "calibration.hbm_fraction_of_peak"),
        (
            lambda d: {**d, "matmul_fraction_of_peak": {"bf16": "high"}},
            "calibration.matmul_fraction_of_peak[bf16]",
        ),
    ],
)
def test_load_calibration_rejects_bad_files(tmp_path: Path, edit, field: str) -> None:
    path = tmp_path / "cal.json"
    save_calibration(path, _h100_report())
    doc = edit(json.loads(path.read_text()))
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(SpecError) as err:
        load_calibration(path)
    assert err.value.field == field


# ---------------------------------------------------------------- the CLI


@needs_torch
def test_cli_bench_json() -> None:
    code, out, err = cli(
        "bench", "--json", "--sizes", "64,128", "--dtype", "fp32", "--repeats", "2"
    )
    assert code == 0, err
    d = json.loads(out)
    assert [row["n"] for row in d["results"]["fp32"]] == [64, 128]
    for row in d["results"]["fp32"]:
        assert row["achieved_flops_per_second"] > 0
        assert row["flops"] == 2 * row["n"] ** 3
        if d["device"]["catalog_key"] is None:
            assert row["mfu"] is None
    assert d["bandwidth_bytes_per_second"] > 0
    assert d["roofline"]["best_flops_per_second"]["fp32"] > 0
    assert set(d["device"]) == {"kind", "name", "catalog_key", "total_memory_bytes"}
    if d["device"]["kind"] == "cpu":
        assert any("no catalog peak for CPUs" in note for note in d["notes"])
    assert err.count("\n") == 2 and "fp32 n=64" in err  # one progress line per size


@needs_torch
def test_cli_bench_text_and_calibration(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    code, out, err = cli(
        "bench",
        "--device",
        "cpu",
        "--sizes",
        "32",
        "--dtype",
        "fp32,bf16",
        "--repeats",
        "1",
        "--bandwidth-bytes",
        "1MiB",
        "--save-calibration",
        str(path),
    )
    assert code == 0, err
    assert "no catalog peak for CPUs" in out and "bandwidth:" in out
    cal = load_calibration(path)
    assert set(cal.best_flops_per_second) == {"fp32", "bf16"}
    assert cal.catalog_key is None


BAD_INPUTS = [
    (("--dtype", "fp64"), "dtype"),
    (("--dtype", ","), "dtype"),
    (("--dtype", "tf32", "--device", "cpu"), "dtype"),
    (("--sizes", "0"), "sizes"),
    (("--sizes", "64,abc"), "sizes"),
    (("--sizes", "100000"), "sizes"),
    (("--repeats", "0"), "repeats"),
    (("--device", "tpu"), "device"),
    (("--max-sample-seconds", "-1"), "max-sample-seconds"),
    (("--bandwidth-bytes", "lots"), "bandwidth-bytes"),
]
if HAS_TORCH and not HAS_CUDA:
    BAD_INPUTS.append((("--device", "cuda"), "device"))


@needs_torch
@pytest.mark.parametrize(("argv", "field"), BAD_INPUTS)
def test_cli_bench_bad_input_exits_2(argv: tuple[str, ...], field: str) -> None:
    code, out, err = cli("bench", "--sizes", "32", "--repeats", "1", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"trainbudget bench: error: {field} = "), err


def test_cli_imports_no_torch_for_bench_help() -> None:
    """Building the parser (every command's add_arguments, bench's included) loads no torch."""
    probe = (
        "import sys\n"
        "from trainbudget.cli.main import build_parser\n"
        "build_parser()\n"
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "False"


def test_a_copy_buffer_larger_than_the_machine_is_refused_before_any_work() -> None:
    """`bench --bandwidth-bytes 1TB` was an allocator traceback; the two buffers of the copy
    benchmark are checked against this machine's physical memory before torch is loaded."""
    code, out, err = cli("bench", "--dtype", "fp32", "--repeats", "1", "--sizes", "64",
                         "--bandwidth-bytes", "1PB")  # fmt: skip
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "bandwidth-bytes = '1PB'" in err and "two buffers" in err


@needs_torch
def test_a_copy_buffer_the_allocator_refuses_is_one_line(monkeypatch) -> None:
    """Where the device cannot hold the buffers (a GPU's memory, checked only when they are
    allocated), the allocator's error becomes the field's one-line rule."""
    import torch

    from trainbudget.profile.bench import bandwidth_bench

    def refuse(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "ones", refuse)
    with pytest.raises(SpecError, match="two buffers of that size cannot be allocated on cpu"):
        bandwidth_bench(1 << 20, "cpu")
