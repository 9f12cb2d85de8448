"""scripts/gpu_validate.py: its development mode (--device cpu) runs the GPU code path on the
CPU with tiny models, as a subprocess; without CUDA it exits 2 with one line; case selection,
the summary and the markdown table are checked in-process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_validate.py"
TINY = ("n_layers=1", "d_model=64", "n_heads=2", "d_ff=128", "vocab_size=512")
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gv = _load_script()


def _run(*args: str, env: dict | None = None, timeout: int = 300):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_without_cuda_exits_2_with_one_line():
    # CUDA hidden, so the test means the same on a GPU machine
    r = _run("--quick", "--limit", "1", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gpu_validate: ")
    assert "Traceback" not in r.stderr and r.stdout == ""
    if HAS_TORCH:
        assert "no CUDA device" in lines[0] and "--device cpu" in lines[0]


@pytest.fixture(scope="module")
def dev_run(tmp_path_factory):
    """One development-mode run: 2 quick cases, tiny models, predictions for an H100."""
    out = tmp_path_factory.mktemp("gpu_validate")
    sets = [a for kv in TINY for a in ("--set", kv)]
    r = _run(
        *("--device", "cpu", "--quick", "--limit", "2", "--steps", "2", "--warmup", "1"),
        *sets,
        *("--hardware", "h100-sxm", "--out", str(out)),
    )
    return r, out


@pytest.mark.torch
@needs_torch
def test_development_mode_writes_json_and_markdown(dev_run):
    r, out = dev_run
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "gpu_validate.json").read_text())
    assert (doc["format"], doc["version"], doc["mode"]) == ("trainbudget-gpu-validate", 1, "cpu")
    assert doc["device"]["kind"] == "cpu" and doc["device"]["catalog_key"] is None
    assert doc["prediction_hardware"] == "h100-sxm"
    import torch

    assert doc["torch"] == torch.__version__
    assert doc["filters"] == {"quick": True, "dtype": None, "limit": 2, "set": list(TINY)}
    cases = doc["cases"]
    assert len(cases) == 2
    assert {c["precision"] for c in cases} == {"fp32", "bf16-mixed"}
    assert {c["optimizer"] for c in cases} == {"adamw", "sgd"}
    assert {c["model"].split("[")[0] for c in cases} == {"gpt2-2l", "llama-small"}
    for c in cases:
        assert "error" not in c, c
        assert c["predicted_peak_bytes"] > 0
        assert abs(c["memtracker_error"]) < 0.1, c  # the same MemTracker step, on real tensors
        assert c["measured_step_seconds"] > 0 and c["predicted_step_seconds"] > 0
        assert c["step_time_error"] == pytest.approx(
            c["measured_step_seconds"] / c["predicted_step_seconds"] - 1
        )
        assert 0 < c["mfu"] < 1 and c["model_flops_per_step"] > 0
        assert "max_memory_allocated_bytes" not in c  # CUDA statistics only on CUDA
    s = doc["summary"]
    assert s["cases"] == 2 and s["failed"] == []
    assert s["memtracker_error"]["n"] == 2 and s["step_time_error"]["n"] == 2
    assert "allocated_error" not in s and s["mfu"]["n"] == 2

    md = (out / "gpu_validate.md").read_text()
    assert md.startswith("# trainbudget GPU validation")
    assert f"torch {torch.__version__}" in md and doc["device"]["name"] in md
    assert "catalog key: none" in md and "h100-sxm" in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 3  # header + 2 cases
    for c in cases:
        assert any(line.startswith(f"| {c['case']} |") for line in table)
    assert "peak vs MemTracker: mean |error|" in md and "step time: mean |error|" in md
    assert "peak vs MemTracker" in r.stdout and "wrote" in r.stdout


def test_quick_cases_cover_every_axis():
    quick = gv.select_cases(quick=True)
    full = gv.select_cases()
    assert len(full) == 32 and len(quick) == 8 and len({c.id for c in quick}) == 8
    assert {c.id for c in quick} <= {c.id for c in full}
    for name in ("gpt2-2l", "llama-small"):
        mine = [c for c in quick if c.spec.name == name]
        assert {(c.micro_batch, c.seq_len) for c in mine} == {
            (1, 128),
            (2, 512),
            (4, 1024),
            (8, 2048),
        }
        assert {(c.precision, c.optimizer, c.recompute) for c in mine} == {
            ("fp32", "adamw", "none"),
            ("fp32", "sgd", "full"),
            ("bf16-mixed", "adamw", "none"),
            ("bf16-mixed", "sgd", "full"),
        }
    first_two = quick[:2]  # what --limit 2 keeps: both models, precisions and optimizers
    assert {c.spec.name for c in first_two} == {"gpt2-2l", "llama-small"}
    assert {c.precision for c in first_two} == {"fp32", "bf16-mixed"}
    assert [c.micro_batch * c.seq_len for c in quick] == sorted(
        c.micro_batch * c.seq_len for c in quick
    )


def test_filters_and_overrides():
    bf16 = gv.select_cases(dtype="bf16-mixed")
    assert len(bf16) == 16 and {c.precision for c in bf16} == {"bf16-mixed"}
    assert len(gv.select_cases(quick=True, dtype="fp32", limit=3)) == 3
    assert len(gv.select_cases(limit=100)) == 32
    tiny = gv.select_cases(quick=True, limit=1, overrides=["n_layers=1"])
    assert tiny[0].spec.n_layers == 1 and "n_layers=1" in tiny[0].id


def test_summary_and_markdown_with_a_failed_case():
    rows = [
        {
            "case": "a",
            "predicted_peak_bytes": 100e6,
            "max_memory_allocated_bytes": 103e6,
            "allocated_error": 0.03,
            "memtracker_peak_bytes": 99e6,
            "memtracker_error": -0.01,
            "predicted_step_seconds": 0.010,
            "measured_step_seconds": 0.012,
            "step_time_error": 0.2,
            "mfu": 0.4,
        },
        {"case": "b", "memtracker_error": 0.05, "measured_step_seconds": 0.02, "mfu": None},
        {"case": "c", "error": "OutOfMemoryError: CUDA out of memory | really"},
    ]
    s = gv.summarise(rows)
    assert s["cases"] == 3 and s["failed"] == ["c"]
    assert s["allocated_error"] == {"n": 1, "mean_abs": 0.03, "max_abs": 0.03, "worst_case": "a"}
    assert s["memtracker_error"]["n"] == 2 and s["memtracker_error"]["worst_case"] == "b"
    assert s["memtracker_error"]["mean_abs"] == pytest.approx(0.03)
    assert s["mfu"] == {"n": 1, "mean": 0.4, "min": 0.4, "max": 0.4}
    md = gv.render_markdown(["device: X"], rows, s)
    assert "- device: X" in md
    assert "| a | 100.0 | 103.0 | +3.0 % | 99.0 | -1.0 % | 10 | 12 | +20.0 % | 40 % |" in md
    assert "| b | - | - | - | - | +5.0 % | - | 20 | - | - |" in md
    assert "| c | failed: OutOfMemoryError: CUDA out of memory / really |" in md
    assert "failed: 1 case(s): c" in md


@pytest.mark.torch
@needs_torch
def test_unknown_hardware_key_exits_2(capsys):
    assert gv.main(["--device", "cpu", "--hardware", "no-such-gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-gpu" in err[0] and "h100-sxm" in err[0]


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.skipif(
    not HAS_TORCH or not __import__("torch").cuda.is_available(), reason="needs a CUDA device"
)
def test_cuda_run(tmp_path):
    r = _run("--quick", "--limit", "1", "--steps", "3", "--warmup", "1", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "gpu_validate.json").read_text())
    (case,) = doc["cases"]
    assert doc["mode"] == "cuda" and doc["device"]["kind"] == "cuda"
    assert case["max_memory_allocated_bytes"] > 0
    assert case["max_memory_reserved_bytes"] >= case["max_memory_allocated_bytes"]
    assert abs(case["allocated_error"]) < 0.25, case
    assert abs(case["memtracker_error"]) < 0.1, case
    if doc["device"]["catalog_key"] is not None:
        assert 0 < case["mfu"] < 1 and case["predicted_step_seconds"] > 0


@pytest.mark.torch
@needs_torch
def test_development_mode_states_its_duration_and_progress_per_case(dev_run):
    # the failure: --device cpu ran 30-40 minutes with no duration stated
    r, _ = dev_run
    lines = r.stdout.splitlines()
    (estimate,) = [line for line in lines if line.startswith("estimated duration: about ")]
    assert "model FLOPs at an assumed 2e+11 FLOP/s; revised after each case" in estimate
    progress = [line for line in lines if line.startswith("[")]
    assert [line.split("]")[0] for line in progress] == ["[1/2", "[2/2"]
    assert all(" elapsed, about " in line and line.endswith(" left") for line in progress)
    assert progress[-1].endswith("about 0s left")


def test_duration_and_eta_texts():
    assert [gv.duration_text(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]
    # a third of the work done in 10 s: twice that left
    assert gv.eta_text(1e12, 2e12, 10.0) == "10s elapsed, about 20s left"
    case = gv.select_cases(quick=True, dtype=None, limit=1, overrides=[])[0]
    one, two = (gv.case_flops(case, steps=s, warmup=2) for s in (1, 5))
    assert two / one == pytest.approx(8 / 4)  # (steps + warm-up + the MemTracker step)
