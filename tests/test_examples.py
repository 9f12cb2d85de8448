"""examples/seed_lecture.py works the seeds' lecture through with trainbudget; every figure it
prints must equal the figure in ../shared/seed-examples.md.

The expected values below are written out here from seed-examples.md (row id, then the figure's
name in the script), not read from the script's own "expected" column, so a wrong figure in
the script and a wrong expectation beside it cannot agree by construction.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED_EXAMPLES = ROOT.parent / "shared" / "seed-examples.md"
HAS_TORCH = importlib.util.find_spec("torch") is not None

# id -> figure name -> (expected, absolute tolerance). Exact integers have tolerance 0; a
# rounded figure of the seeds gets half a unit of its last digit.
EXPECTED: dict[str, dict[str, tuple[object, float]]] = {
    "S-train-time": {
        "training FLOPs 6ND": (6.3e24, 1e18),
        "seconds": (1.2435e7, 500),
        "days": (143.93, 0.005),
        "days, from `trainbudget estimate --json`": (143.93, 0.005),
    },
    "S-max-model": {"parameters": (4.0e10, 0)},
    "S-tensor-mem": {"bytes (core)": (128, 0)},
    "S-gpt3-ffn": {"bytes": (2_415_919_104, 0), "GiB": (2.25, 0)},
    "S-dtypes": {
        "fp32 sign/exponent/mantissa bits, bytes": ([1, 8, 23, 4], 0),
        "fp16 sign/exponent/mantissa bits, bytes": ([1, 5, 10, 2], 0),
        "bf16 sign/exponent/mantissa bits, bytes": ([1, 8, 7, 2], 0),
        "fp8 E4M3 max": (448, 0),
        "fp8 E5M2 max": (57344, 0),
        "1e-8 in fp16 (underflows)": (0.0, 0),
        "1e-8 in bf16 is not 0": (True, 0),
    },
    # B, D, K = 1024, 256, 64 (the lecture's CPU sizes): 2BDK
    "S-matmul-flops": {"FLOPs = 2BDK": (33_554_432, 0)},
    "S-linear-fwd-bwd": {
        "forward = 2BDD + 2BDK": (134_217_728 + 33_554_432, 0),
        "backward = 4BDD + 4BDK": (268_435_456 + 67_108_864, 0),
        "total = 6 x B x params": (6 * 1024 * 81_920, 0),
    },
    "S-cruncher-mem": {
        "parameters": (36, 0),
        "activations": (16, 0),
        "gradients": (36, 0),
        "optimizer states": (36, 0),
        "bytes = 4 x (36+16+36+36)": (496, 0),
        "step FLOPs = 6 x B x params": (432, 0),
    },
    "T-params": {
        "total": (124_337_664, 0),
        "embedding/position": (786_432, 0),
        "embedding/token": (38_597_376, 0),
        "per block": (7_079_424, 0),
    },
    "T-ckpt": {"bytes": (1_492_051_968, 0), "measured file / estimate, %": (103.38, 0.005)},
    "T-gpu-frac": {"%": (3.73, 0.005)},
    "T-fwd-flops": {
        "forward": (291_648_307_200, 0),
        "forward + backward (3 x forward)": (874_944_921_600, 0),
    },
    "T-palm": {"FLOPs": (875_062_886_400, 0), "ratio to the detailed count": (1.000135, 5e-7)},
    "T-mfu": {"MFU %": (37.14, 0.005)},
    "T-days": {"days": (3.46, 0.005)},
    "B-rule-6gb": {
        "rule, bytes per 1B params": (6e9, 0),
        "pure bf16 + SGD momentum (2+2+2 B)": (6e9, 0),
        "mixed-precision AdamW (2+2+4+8 B)": (16e9, 0),
    },
    "B-walls": {
        "training FLOPs 6ND, D = 300e9": (3.14e23, 0.005e23),
        "fp32 weights, bytes": (700e9, 0),
        "fits one 80 GB H100": (False, 0),
        "128 replicas x fp32 gradients, TB": (89.6, 1e-9),
    },
    "B-bounds": {"lower max(compute, comm), upper compute + comm": ([3.0, 5.0], 0)},
    "B-ai-dot": {
        "N = 1000: (2N-1)/(4N+2)": (1999 / 4002, 1e-12),
        "N = 1e9 (-> 0.5 FLOP/byte)": (0.5, 1e-6),
    },
    "B-ai-matmul": {"FLOP/byte": (64, 64 * 0.02)},  # ~B for B = 64 << D = F = 8192
    "B-v5e": {
        "ridge, FLOP/byte": (240.5, 0.05),
        "B = 200 is compute-bound": (False, 0),
        "B = 300 is compute-bound": (True, 0),
    },
    "B-zero": {
        "stage 0, GB": (120.0, 0.05),
        "stage 1, GB": (31.4, 0.05),
        "stage 2, GB": (16.6, 0.05),
        "stage 3, GB": (1.9, 0.05),
        "stage 3 traffic / plain data parallelism": (1.5, 1e-9),
    },
    "B-fail-128": {"%": (72.37, 0.005)},
    "B-fail-1000": {
        "per GPU-day, % (8 % / 30)": (0.27, 0.005),
        "1000-GPU job in a day at 0.27 %, %": (93.3, 0.05),
    },
    "B-llama70b": {
        "weights (bf16), GB": (140, 0),
        "gradients, GB": (140, 0),
        "Adam state + fp32 master (12 B/param), GB": (840, 0),
    },
    "B-infer": {"70B model: 2 x params": (140e9, 0)},
    "B-kv": {
        "GiB": (0.5, 0),
        # not a seed figure: 2 (K, V) x 80 layers x 8 kv heads x 128 x 2 B x 32,768 tokens
        "KV cache beside it (80 layers, 8 KV heads), GiB": (10.0, 0),
    },
    "B-ring-tree": {
        "ring, p = 64: bytes per rank / buffer = 2(p-1)/p": (2 * 63 / 64, 1e-12),
        "tree steps p = 1024 / p = 2 (O(log p))": (10, 0),
    },
}
TORCH_EXPECTED = {
    "S-tensor-mem": {"bytes (torch numel x element_size)": (128, 0)},
    "S-dtypes": {"bits, max, eps equal torch.finfo": (True, 0)},
    "S-init": {"ratio of the two (independent of d_in)": (1.0, 0.05)},
}
MEASURED = {"S-mfu", "S-init"}  # measured on this machine: no seed figure to compare with
GPU_ONLY = {"S-gpu-delta"}
# seed-examples.md rows that the script shows (everything but the GPU-only one)
ALL_IDS = set(EXPECTED) | {"S-mfu", "S-init"}


@pytest.fixture(scope="module")
def lecture() -> tuple[int, dict[str, dict], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "examples/seed_lecture.py", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(out.stdout)
    examples = {ex["id"]: ex for section in doc["sections"] for ex in section["examples"]}
    return out.returncode, examples, out.stderr


def _figures(ex: dict) -> dict[str, object]:
    return {f["name"]: f["value"] for f in ex["figures"]}


def test_it_exits_cleanly(lecture):
    code, _, stderr = lecture
    assert code == 0, stderr


def test_every_seed_example_is_worked_through(lecture):
    _, examples, _ = lecture
    assert set(examples) == ALL_IDS | GPU_ONLY
    for ex_id in GPU_ONLY:
        assert "GPU" in examples[ex_id]["skipped"] and examples[ex_id]["figures"] == []


def test_the_id_list_matches_seed_examples_md():
    if not SEED_EXAMPLES.exists():
        pytest.skip("../shared/seed-examples.md is not beside this checkout")
    ids = set(re.findall(r"^\| ([STB]-[a-z0-9-]+) \|", SEED_EXAMPLES.read_text(), re.MULTILINE))
    assert ids == ALL_IDS | GPU_ONLY


@pytest.mark.parametrize("ex_id", sorted(EXPECTED))
def test_figures_equal_the_seeds(lecture, ex_id):
    _, examples, _ = lecture
    got = _figures(examples[ex_id])
    want = dict(EXPECTED[ex_id])
    if HAS_TORCH:
        want.update(TORCH_EXPECTED.get(ex_id, {}))
    for name, (expected, tol) in want.items():
        assert name in got, f"{ex_id}: no figure {name!r}; printed: {sorted(got)}"
        value = got[name]
        if isinstance(expected, bool) or not isinstance(expected, (int, float)):
            assert value == expected, f"{ex_id} {name}: {value!r} != {expected!r}"
        else:
            assert abs(value - expected) <= tol, f"{ex_id} {name}: {value} != {expected} ± {tol}"


def test_t_fwd_flops_parts_match_the_notebook(lecture):
    # seed 003 flops(): per block kqv 3,623,878,656; scores and reduce 1,610,612,736 each;
    # proj 1,207,959,552; ffw1 and ffw2 4,831,838,208 each; dense (logits) 79,047,426,048
    _, examples, _ = lecture
    got = _figures(examples["T-fwd-flops"])
    per_block = {
        "qkv": 3_623_878_656,
        "scores": 1_610_612_736,
        "attn_values": 1_610_612_736,
        "attn_proj": 1_207_959_552,
        "mlp_up": 4_831_838_208,
        "mlp_down": 4_831_838_208,
    }
    for part, flops in per_block.items():
        assert got[f"{part} (12 layers)"] == 12 * flops
    assert got["logits"] == 79_047_426_048


def test_torch_rows_run_or_say_why_not(lecture):
    _, examples, _ = lecture
    if HAS_TORCH:
        mfu = _figures(examples["S-mfu"])
        assert len(mfu) == 2 and all(v > 0 for v in mfu.values())  # fp32 and bf16, measured
        init = _figures(examples["S-init"])
        assert all(0.9 < v < 1.1 for v in init.values())  # std of one scaled output, ~0.987
    else:
        assert examples["S-mfu"]["skipped"] == examples["S-init"]["skipped"] == "skipped (no torch)"


def test_rows_without_a_seed_figure_are_only_the_measured_ones(lecture):
    _, examples, _ = lecture
    unchecked = {
        ex_id
        for ex_id, ex in examples.items()
        for f in ex["figures"]
        if f["expected"] is None
        and ex_id not in ("T-fwd-flops", "B-kv")  # checked above
        and not (f["value"] is None and f["name"].endswith(": skipped (no torch)"))
    }
    assert unchecked <= MEASURED
    # without torch the torch figures are there as named skips, not as figures
    skipped = {f["name"] for ex in examples.values() for f in ex["figures"] if f["value"] is None}
    assert not skipped if HAS_TORCH else all(n.endswith(": skipped (no torch)") for n in skipped)
