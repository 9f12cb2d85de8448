"""Every worked number of the seeds that concerns counting, FLOPs, memory, time, dtypes or
arithmetic intensity (../shared/seed-examples.md), by its id, from Python and from the CLI.

Sources: seed 000/001/002 = the PyTorch resource-accounting lecture; seed 003 = the GPT-2
sizing notebook; seed 004 = the large-model training article. Measured ones (S-mfu, S-init,
S-gpu-delta) belong to the profiler issue.
"""

from __future__ import annotations

import pytest

from clirun import cli_json
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.parallel_memory import zero_model_state
from trainbudget.core.parallel.reliability import daily_rate_linear, job_failure_probability
from trainbudget.core.parallel.timing.comm import (
    collective_cost,
    data_parallel_gradient_bytes_per_iteration,
)
from trainbudget.core.parallel.timing.step_time import step_bounds
from trainbudget.core.single.flops import forward_flops, hidden_state_bytes, matmul_flops
from trainbudget.core.single.intensity import dot_intensity, matmul_intensity, ridge_intensity
from trainbudget.core.single.linear_chain import cruncher_memory, linear_chain_flops
from trainbudget.core.single.memory import checkpoint_bytes, fit_max_params, training_memory
from trainbudget.core.single.params import count_params
from trainbudget.core.single.training_time import mfu_from_measurement, training_time
from trainbudget.core.spec.dtypes import get_format, tensor_bytes
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.model_spec import BareModel
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import GB, TB, GiB

GPT2_NOBIAS = ("--model", "gpt2", "--set", "bias=false", "--seq-len", "1024")


# ---- seed 000 / 001 / 002 -------------------------------------------------------------------
def test_S_train_time():
    # 6ND = 6 x 70e9 x 15e12 = 6.3e24; / (1024 x 989.5e12 x 0.5) = 1.2435e7 s = 143.93 days
    t = training_time(
        train_flops=6 * 70e9 * 15e12,
        n_gpus=1024,
        peak_flops_per_second=get_hardware("h100-sxm").peak_flops_per_second("bf16"),
        mfu=0.5,
    )
    assert t.train_flops == pytest.approx(6.3e24)
    assert t.seconds == pytest.approx(1.2435e7, rel=1e-4)
    assert t.days == pytest.approx(143.93, abs=0.005)
    j = cli_json(
        "estimate",
        "--model",
        "dense:70e9",
        "--tokens",
        "15e12",
        "--gpus",
        "1024",
        "--gpu",
        "h100-sxm",
        "--mfu",
        "0.5",
    )
    assert j["train_flops"] == pytest.approx(6.3e24)
    assert round(j["time_days"], 2) == 143.93


def test_S_max_model():
    # 8 x 80 GB / 16 bytes per parameter (fp32 params, grads, Adam m, v) = 4e10
    assert fit_max_params(
        n_gpus=8, memory_bytes_per_gpu=80 * GB, precision="fp32", optimizer="adamw"
    ) == pytest.approx(40e9)
    argv = (
        "fit",
        "--gpus",
        "8",
        "--gpu",
        "h100-sxm",
        "--optimizer",
        "adamw",
        "--precision",
        "fp32",
    )
    # the seed's rule on all of each GPU's memory: fit applies it to the memory CUDA gives the
    # process (hardware.py: 79.11 GiB on an H100 80GB, vllm#27508), not the datasheet's 80 GB;
    # by default to the fits rule's limit (core.parallel.fits), which it prints
    j = cli_json(*argv, "--memory-headroom", "1")
    assert j["memory_bytes_per_gpu"] == 80 * GB and j["device_memory_bytes"] == 79.11 * 2**30
    assert j["max_params_state_only"] == pytest.approx(8 * j["device_memory_bytes"] / 16)
    default = cli_json(*argv)
    assert default["max_params_state_only"] == pytest.approx(
        8 * default["limit_bytes_per_gpu"] / 16
    )
    assert j["bytes_per_param"] == 16


def test_S_tensor_mem():
    assert tensor_bytes((4, 8), "fp32") == 128


def test_S_gpt3_ffn():
    # torch.empty(12288 * 4, 12288) is 2304 MiB (seed 001) = 2.25 GiB, the seed's "2.3 GB"
    assert tensor_bytes((12288 * 4, 12288), "fp32") == 2_415_919_104 == 2.25 * GiB


def test_S_dtypes():
    bits = {
        n: (f.sign_bits, f.exponent_bits, f.mantissa_bits, f.storage_bytes)
        for n, f in ((n, get_format(n)) for n in ("fp32", "fp16", "bf16"))
    }
    assert bits == {"fp32": (1, 8, 23, 4), "fp16": (1, 5, 10, 2), "bf16": (1, 8, 7, 2)}
    assert get_format("fp8-e4m3").max_value == 448
    assert get_format("fp8-e5m2").max_value == 57344
    assert get_format("fp16").round_trips(1e-8) == 0.0  # underflow (seed 002)
    assert get_format("bf16").round_trips(1e-8) != 0.0
    rows = {r["name"]: r for r in cli_json("dtypes")}
    assert rows["fp8-e5m2"]["max"] == 57344 and rows["bf16"]["mantissa_bits"] == 7


def test_S_matmul_flops():
    b, d, k = 3, 5, 7
    assert matmul_flops(b, d, k) == 2 * b * d * k


def test_S_linear_fwd_bwd():
    b, d, k = 4, 16, 8
    f = linear_chain_flops(b, [d, d, k])
    assert f.forward == 2 * b * d * d + 2 * b * d * k
    assert f.backward == 4 * b * d * d + 4 * b * d * k
    assert f.total == 6 * b * (d * d + d * k)


def test_S_cruncher_mem():
    m = cruncher_memory(d=4, n_layers=2, batch=2, optimizer="adagrad", precision="fp32")
    assert (m.n_params, m.n_activations, m.n_gradients, m.n_optimizer_states) == (36, 16, 36, 36)
    assert m.total_bytes == 496
    assert linear_chain_flops(2, [4, 4, 4, 1]).total == 6 * 2 * 36 == 432


# ---- seed 003: GPT-2 small, bias=False ----------------------------------------------------
def test_T_params():
    p = count_params(resolve_model("gpt2", ["bias=false"]))
    assert p.total == 124_337_664
    assert p.embedding_position == 786_432
    assert p.embedding_token == 38_597_376
    assert p.per_layer // 12 == 7_079_424
    j = cli_json("estimate", *GPT2_NOBIAS)
    assert j["params"] == 124_337_664
    assert sum(j["params_breakdown"].values()) == 124_337_664


def test_T_ckpt():
    model = resolve_model("gpt2", ["bias=false"])
    ckpt = checkpoint_bytes(model, precision="fp32", optimizer="adamw")
    assert ckpt == 1_492_051_968
    assert 1_542_470_366 / ckpt == pytest.approx(1.0338, abs=5e-5)  # the measured file: 103.38 %
    assert cli_json("estimate", *GPT2_NOBIAS, "--precision", "fp32")["checkpoint_bytes"] == ckpt


def test_T_gpu_frac():
    ckpt = 1_492_051_968
    assert ckpt / get_hardware("a100-40gb").memory_bytes * 100 == pytest.approx(3.73, abs=0.005)


SEED_FWD = {  # seed 003 flops(): per part for one 1024-token sequence (12 layers where per block)
    "qkv": 12 * 3_623_878_656,
    "scores": 12 * 1_610_612_736,
    "attn_values": 12 * 1_610_612_736,
    "attn_proj": 12 * 1_207_959_552,
    "mlp_up": 12 * 4_831_838_208,
    "mlp_down": 12 * 4_831_838_208,
    "logits": 79_047_426_048,
}


def test_T_fwd_flops():
    fwd = forward_flops(resolve_model("gpt2", ["bias=false"]), 1024)
    assert {k: v for k, v in fwd.as_dict().items() if v} == SEED_FWD
    assert fwd.total == 291_648_307_200
    assert 3 * fwd.total == 874_944_921_600
    j = cli_json("estimate", *GPT2_NOBIAS)
    assert j["forward_flops_breakdown"]["total"] == 291_648_307_200
    assert {k: v for k, v in j["forward_flops_breakdown"].items() if v and k != "total"} == SEED_FWD
    assert j["flops_per_token"] * 1024 == pytest.approx(874_944_921_600)


def test_T_palm():
    j = cli_json("estimate", *GPT2_NOBIAS)
    palm = j["flops_per_token_detail"]["palm"] * 1024
    assert palm == 875_062_886_400
    assert palm / 874_944_921_600 == pytest.approx(1.000135, abs=5e-7)


def test_T_mfu():
    # 0.755 s per iteration of 20 x 5 sequences on one A100 (312e12 bf16)
    mfu = mfu_from_measurement(
        flops_per_step=874_944_921_600 * 100,
        step_seconds=0.755,
        n_gpus=1,
        peak_flops_per_second=312e12,
    )
    assert mfu * 100 == pytest.approx(37.14, abs=0.005)
    j = cli_json(
        "mfu", *GPT2_NOBIAS, "--step-seconds", "0.755", "--sequences", "100", "--gpu", "a100-80gb"
    )
    assert j["mfu"] == pytest.approx(mfu)


def test_T_days():
    # 6ND with N = 124,337,664, D = 300e9, 8 x A100 (312e12) at 30 % MFU = 3.46 days
    j = cli_json(
        "estimate",
        *GPT2_NOBIAS,
        "--tokens",
        "300e9",
        "--gpus",
        "8",
        "--gpu",
        "a100-80gb",
        "--mfu",
        "0.3",
        "--flops-formula",
        "6n",
    )
    assert j["train_flops"] == 6 * 124_337_664 * 300e9
    assert round(j["time_days"], 2) == 3.46


# ---- seed 004: the large-model training article -------------------------------------------
def test_B_rule_6gb():
    # the rule (6 bytes/param) equals pure-bf16 weights + grads + one state (SGD momentum) and
    # is far from mixed-precision AdamW (16 bytes/param), activations excluded
    bare = BareModel(n_params=1_000_000_000)
    assert training_memory(bare, precision="bf16", optimizer="momentum").total_bytes == 6 * GB
    assert training_memory(bare, precision="bf16-mixed", optimizer="adamw").total_bytes == 16 * GB
    from clirun import cli

    code, out, _ = cli("estimate", "--model", "dense:1e9", "--explain")
    assert code == 0 and "6 GB per 1B" in out and "leaves out" in out


def test_B_walls():
    # GPT-3 175B: 3.14e23 training FLOPs (Brown et al. 2020, Table D.1), 6ND with D = 300e9
    j = cli_json("estimate", "--model", "gpt3-175b", "--tokens", "300e9", "--flops-formula", "6n")
    assert j["train_flops"] == pytest.approx(3.14e23, rel=2e-3)
    fp32 = cli_json("estimate", "--model", "dense:175e9", "--precision", "fp32")
    assert fp32["memory_bytes"]["params"] == 700 * GB > get_hardware("h100-sxm").memory_bytes
    # 128 replicas each exchanging one fp32 gradient copy: 89.6 TB per iteration
    assert 128 * fp32["memory_bytes"]["grads"] == pytest.approx(89.6 * TB)


def test_B_ai_dot():
    for n in (1, 10, 1000):
        assert dot_intensity(n, 2) == pytest.approx((2 * n - 1) / (4 * n + 2))
    assert dot_intensity(10**9, 2) == pytest.approx(0.5, abs=1e-6)
    j = cli_json("intensity", "--op", "dot", "--n", "1000000", "--gpu", "tpu-v5e")
    assert j["intensity_flops_per_byte"] == pytest.approx(0.5, abs=1e-5)


def test_B_ai_matmul():
    b, d, f = 64, 8192, 8192
    assert matmul_intensity(b, d, f, 2) == 2 * b * d * f / (2 * d * f + 2 * b * d + 2 * b * f)
    assert matmul_intensity(b, d, f, 2) == pytest.approx(b, rel=0.02)  # ~B when B << D, F


def test_B_v5e():
    hw = get_hardware("tpu-v5e")
    ridge = ridge_intensity(hw.peak_flops_per_second("bf16"), hw.hbm_bytes_per_second)
    assert ridge == pytest.approx(240.5, abs=0.05)
    below = cli_json(
        "intensity",
        "--op",
        "matmul",
        "--b",
        "200",
        "--d",
        "8192",
        "--f",
        "8192",
        "--gpu",
        "tpu-v5e",
    )
    above = cli_json(
        "intensity",
        "--op",
        "matmul",
        "--b",
        "300",
        "--d",
        "8192",
        "--f",
        "8192",
        "--gpu",
        "tpu-v5e",
    )
    assert (below["bound"], above["bound"]) == ("memory-bound", "compute-bound")


def test_B_llama70b():
    # LLaMA-2 70B, mixed-precision Adam: 140 GB weights, 140 GB grads, 840 GB Adam (12 B/param)
    j = cli_json("estimate", "--model", "dense:70e9")
    m = j["memory_bytes"]
    assert (m["params"], m["grads"], m["optimizer"]) == (140 * GB, 140 * GB, 840 * GB)


def test_B_infer():
    j = cli_json("estimate", "--model", "llama-2-70b", "--seq-len", "1")
    assert j["inference"]["flops_per_token_2n"] == 2 * j["params"]


def test_B_kv():
    # batch 8 x 4096 tokens x d_model 8192 x 2 bytes = 0.5 GiB of intermediate activations
    spec = resolve_model("llama-2-70b")
    assert spec.d_model == 8192
    assert hidden_state_bytes(spec, 8 * 4096, 2) == 0.5 * GiB
    j = cli_json("estimate", "--model", "llama-2-70b", "--seq-len", "4096", "--micro-batch", "8")
    assert j["inference"]["hidden_state_bytes"] == 0.5 * GiB
    # and the KV cache beside it: 2 x 80 layers x 8 kv heads x 128 x 2 B x 32768 tokens
    assert j["inference"]["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 2 * 8 * 4096


# ---- seed 004: parallel plans, communication, failures ------------------------------------
def test_B_zero():
    # Psi = 7.5e9, N = 64, K = 12 (mixed-precision Adam): 120 / 31.4 / 16.6 / 1.9 GB per GPU
    expected = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    prec, opt = get_precision("bf16-mixed"), get_optimizer("adam")
    for stage, gb in expected.items():
        state = zero_model_state(7.5e9, shard=64, zero=stage, precision=prec, optimizer=opt)
        assert round(state.total_bytes / GB, 1) == gb
        j = cli_json(
            "estimate",
            "--model",
            "dense:7.5e9",
            "--gpus",
            "64",
            "--zero",
            str(stage),
            "--optimizer",
            "adam",
        )
        assert round(j["memory_bytes"]["total"] / GB, 1) == gb
    # "stage 3 moves 1.5x the data of plain data parallelism": reduce-scatter of gradients +
    # all-gather for forward + all-gather for backward vs one all-reduce (= RS + AG)
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=64)
    n = 7.5e9 * 2
    ddp = collective_cost("all_reduce", n, 64, 8, cluster).bytes_sent_per_rank
    zero3 = (
        collective_cost("reduce_scatter", n, 64, 8, cluster).bytes_sent_per_rank
        + 2 * collective_cost("all_gather", n, 64, 8, cluster).bytes_sent_per_rank
    )
    assert zero3 / ddp == pytest.approx(1.5)


def test_B_walls_communication():
    # 128 replicas exchanging fp32 gradients of GPT-3 175B: 128 x 700 GB = 89.6 TB
    assert data_parallel_gradient_bytes_per_iteration(175e9, 4, 128) == pytest.approx(89.6 * TB)


def test_B_ring_tree():
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=1024)
    for p in (2, 8, 64, 1024):
        ring = collective_cost("all_reduce", 1e9, p, 1, cluster, "ring")
        assert ring.bytes_sent_per_rank == pytest.approx(2 * (p - 1) / p * 1e9)
    steps = {
        p: collective_cost("all_reduce", 1e3, p, 1, cluster, "tree").steps for p in (2, 4, 1024)
    }
    assert steps[1024] / steps[2] == 10  # O(log p): log2(1024) / log2(2)


def test_B_bounds():
    assert step_bounds(3.0, 2.0) == (3.0, 5.0)
    j = cli_json(
        "estimate",
        "--model",
        "llama-2-7b",
        "--gpus",
        "16",
        "--zero",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
    )
    lo, hi = j["step_bounds_seconds"]["lower"], j["step_bounds_seconds"]["upper"]
    assert lo <= j["step_seconds"] <= hi


def test_B_fail_128():
    # a step that fails with 1 % probability per node, on 128 nodes: 1 - 0.99^128 = 72.37 %
    assert job_failure_probability(128, 0.01) * 100 == pytest.approx(72.37, abs=0.005)


def test_B_fail_1000():
    # 8 % of GPUs fail per month -> 0.27 % per GPU-day; a 1000-GPU job fails within a day
    # with probability 1 - (1 - 0.0027)^1000 = 93.3 %
    assert daily_rate_linear(0.08, 30) * 100 == pytest.approx(0.27, abs=0.005)
    assert job_failure_probability(1000, 0.0027) * 100 == pytest.approx(93.3, abs=0.05)
    j = cli_json(
        "reliability",
        "--gpus",
        "1000",
        "--gpu-failure-rate-per-day",
        "0.0027",
        "--checkpoint-bytes",
        "1TB",
        "--write-bytes-per-second",
        "10GB/s",
    )
    assert j["job_failure_probability_per_day"] * 100 == pytest.approx(93.3, abs=0.05)
