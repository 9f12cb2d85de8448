"""The seeds' lecture worked through with trainbudget, example by example.

Every quantitative claim of the seeds is a row of ../shared/seed-examples.md with an id
(S-* lecture, T-* GPT-2 sizing notebook, B-* large-model article). For each row this script
computes trainbudget's figure with the public core (`trainbudget.core`, pure Python, no torch)
and prints it beside the figure the seeds give, section by section:

    python examples/seed_lecture.py          # text, one block per example
    python examples/seed_lecture.py --json   # the same figures as JSON

The three rows that need PyTorch (S-tensor-mem's real tensor, S-mfu, S-init) use it when it is
installed and say "skipped (no torch)" otherwise; S-gpu-delta needs a CUDA GPU and is skipped.
The exit code is 1 when any figure differs from the seeds' (beyond the stated tolerance).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import trainbudget
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.parallel_memory import zero_model_state
from trainbudget.core.parallel.reliability import daily_rate_linear, job_failure_probability
from trainbudget.core.parallel.timing.comm import (
    collective_cost,
    data_parallel_gradient_bytes_per_iteration,
)
from trainbudget.core.parallel.timing.step_time import step_bounds
from trainbudget.core.single.flops import (
    forward_flops,
    hidden_state_bytes,
    inference_flops_per_token,
    kv_cache_bytes,
    matmul_flops,
    palm_flops_per_token,
)
from trainbudget.core.single.intensity import dot_intensity, matmul_intensity, ridge_intensity
from trainbudget.core.single.linear_chain import cruncher_memory, linear_chain_flops
from trainbudget.core.single.memory import (
    checkpoint_bytes,
    fit_max_params,
    rule_of_thumb_6gb,
    training_memory,
)
from trainbudget.core.single.params import count_params
from trainbudget.core.single.training_time import mfu_from_measurement, training_time
from trainbudget.core.spec.dtypes import get_format, tensor_bytes
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.model_spec import BareModel
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import GB, TB, GiB


@dataclass(frozen=True)
class Figure:
    """One number of an example: trainbudget's `value` and the seeds' `expected`, equal when
    |value - expected| <= tol. expected None: measured on this machine, nothing to compare."""

    name: str
    value: object
    expected: object = None
    tol: float = 0.0

    @property
    def ok(self) -> bool | None:
        if self.expected is None or self.value is None:
            return None
        if isinstance(self.expected, (int, float)) and not isinstance(self.expected, bool):
            return abs(self.value - self.expected) <= self.tol
        return self.value == self.expected


@dataclass
class Example:
    id: str
    """The row id of ../shared/seed-examples.md."""
    question: str
    figures: list[Figure] = field(default_factory=list)
    note: str = ""
    skipped: str = ""
    """Why the example was not computed here (no torch, no GPU)."""


def cli_json(command: str) -> dict:
    """`trainbudget COMMAND --json`, run as a user would (a separate process)."""
    # the child imports the same trainbudget as this process (installed, or src/ on PYTHONPATH)
    env = {**os.environ, "PYTHONPATH": str(Path(trainbudget.__file__).parents[1])}
    cmd = [sys.executable, "-m", "trainbudget", *shlex.split(command), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# ---- seed 000 / 001 / 002: the PyTorch resource-accounting lecture (利用pytorch构建大模型) ----


def lecture() -> list[Example]:
    h100_bf16 = get_hardware("h100-sxm").peak_flops_per_second("bf16")  # 989.5e12, dense
    t = training_time(
        train_flops=6 * 70e9 * 15e12, n_gpus=1024, peak_flops_per_second=h100_bf16, mfu=0.5
    )
    cli = cli_json("estimate --model dense:70e9 --tokens 15T --gpus 1024 --gpu h100-sxm --mfu 0.5")
    b, d, k = 1024, 256, 64  # the lecture's CPU sizes (seed 001, tensor_operations_flops)
    chain = linear_chain_flops(b, [d, d, k])
    cruncher = cruncher_memory(d=4, n_layers=2, batch=2, optimizer="adagrad", precision="fp32")
    fmt = {n: get_format(n) for n in ("fp32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2")}
    return [
        Example(
            "S-train-time",
            "How long to train a dense 70B model on 15T tokens on 1024 H100s, MFU 0.5? (训练时间)",
            [
                Figure("training FLOPs 6ND", t.train_flops, 6.3e24, 1e20),
                Figure("seconds", t.seconds, 1.2435e7, 500),
                Figure("days", round(t.days, 2), 143.93),
                Figure(
                    "days, from `trainbudget estimate --json`", round(cli["time_days"], 2), 143.93
                ),
            ],
            "peak = H100 SXM dense bf16 989.5 TFLOP/s (the datasheet's 1979 is with 2:4 sparsity)",
        ),
        Example(
            "S-max-model",
            "Largest model 8 H100s can train with AdamW, activations left out (最大模型)",
            [
                Figure(
                    "parameters",
                    fit_max_params(
                        n_gpus=8, memory_bytes_per_gpu=80 * GB, precision="fp32", optimizer="adamw"
                    ),
                    40e9,
                )
            ],
            "16 bytes per parameter: fp32 weights 4 + gradients 4 + Adam m 4 + v 4",
        ),
        Example(
            "S-tensor-mem",
            "Memory of a 4 x 8 fp32 tensor (张量占用内存)",
            [Figure("bytes (core)", tensor_bytes((4, 8), "fp32"), 128), *_torch_tensor_bytes()],
        ),
        Example(
            "S-gpt3-ffn",
            "One GPT-3 FFN matrix, fp32, shape (12288*4, 12288)",
            [
                Figure("bytes", tensor_bytes((12288 * 4, 12288), "fp32"), 2_415_919_104),
                Figure("GiB", tensor_bytes((12288 * 4, 12288), "fp32") / GiB, 2.25),
            ],
            'the seed\'s "2.3 GB" is 2.25 GiB (2**30 bytes); in GB (1e9) it is 2.416 GB',
        ),
        Example(
            "S-dtypes",
            "Bits, bytes and range of fp32, fp16, bf16, fp8 (浮点数: 符号/指数/尾数)",
            [
                Figure(
                    f"{n} sign/exponent/mantissa bits, bytes",
                    [f.sign_bits, f.exponent_bits, f.mantissa_bits, f.storage_bytes],
                    want,
                )
                for n, f, want in (
                    ("fp32", fmt["fp32"], [1, 8, 23, 4]),
                    ("fp16", fmt["fp16"], [1, 5, 10, 2]),
                    ("bf16", fmt["bf16"], [1, 8, 7, 2]),
                )
            ]
            + [
                Figure("fp8 E4M3 max", fmt["fp8-e4m3"].max_value, 448),
                Figure("fp8 E5M2 max", fmt["fp8-e5m2"].max_value, 57344),
                Figure("1e-8 in fp16 (underflows)", fmt["fp16"].round_trips(1e-8), 0.0),
                Figure("1e-8 in bf16 is not 0", fmt["bf16"].round_trips(1e-8) != 0.0, True),
            ]
            + _torch_finfo(fmt),
        ),
        Example(
            "S-matmul-flops",
            f"FLOPs of (B, D) @ (D, K), B={b}, D={d}, K={k} (矩阵乘法的浮点运算次数)",
            [Figure("FLOPs = 2BDK", matmul_flops(b, d, k), 2 * 1024 * 256 * 64)],
            "one multiply and one add per (i, j, k): FLOPs, not MACs",
        ),
        Example(
            "S-linear-fwd-bwd",
            f"x -w1(DxD)-> h1 -w2(DxK)-> h2, B={b}, D={d}, K={k}: forward and backward FLOPs",
            [
                Figure("forward = 2BDD + 2BDK", chain.forward, 2 * b * d * d + 2 * b * d * k),
                Figure("backward = 4BDD + 4BDK", chain.backward, 4 * b * d * d + 4 * b * d * k),
                Figure("total = 6 x B x params", chain.total, 6 * b * (d * d + d * k)),
            ],
        ),
        _measured_mfu(),
        Example(
            "S-cruncher-mem",
            "Deep linear model D=4, 2 layers + final D->1, batch 2, AdaGrad, fp32 (优化器状态)",
            [
                Figure("parameters", cruncher.n_params, 36),
                Figure("activations", cruncher.n_activations, 16),
                Figure("gradients", cruncher.n_gradients, 36),
                Figure("optimizer states", cruncher.n_optimizer_states, 36),
                Figure("bytes = 4 x (36+16+36+36)", cruncher.total_bytes, 496),
                Figure(
                    "step FLOPs = 6 x B x params", linear_chain_flops(2, [4, 4, 4, 1]).total, 432
                ),
            ],
        ),
        _init(),
        Example(
            "S-gpu-delta",
            "Two 32x32 fp32 tensors on the GPU: allocated memory grows by 8192 bytes",
            skipped="needs a CUDA GPU (torch.cuda.memory_allocated); not run by this script",
        ),
    ]


def _torch_tensor_bytes() -> list[Figure]:
    torch = _torch()
    if torch is None:
        return [Figure("bytes (torch): skipped (no torch)", None)]
    x = torch.zeros(4, 8, dtype=torch.float32)
    return [Figure("bytes (torch numel x element_size)", x.numel() * x.element_size(), 128)]


def _torch_finfo(fmt: dict) -> list[Figure]:
    torch = _torch()
    if torch is None:
        return [Figure("torch.finfo agreement: skipped (no torch)", None)]
    pairs = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    pairs.update({"fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2})
    same = all(
        (fmt[n].bits, fmt[n].max_value, fmt[n].eps)
        == (torch.finfo(t).bits, torch.finfo(t).max, torch.finfo(t).eps)
        for n, t in pairs.items()
    )
    return [Figure("bits, max, eps equal torch.finfo", same, True)]


def _measured_mfu() -> Example:
    ex = Example("S-mfu", "MFU = achieved FLOP/s / promised FLOP/s (模型浮点运算利用率)")
    torch = _torch()
    if torch is None:
        ex.skipped = "skipped (no torch)"
        return ex
    b, d, k = 1024, 256, 64
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x, w = torch.ones(b, d, dtype=dtype), torch.randn(d, k).to(dtype)  # (B, D), (D, K)
        x @ w  # warm-up
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            x @ w
            samples.append(time.perf_counter() - start)
        rate = matmul_flops(b, d, k) / statistics.median(samples)
        ex.figures.append(Figure(f"achieved {name} FLOP/s, ({b},{d})@({d},{k})", rate))
    ex.note = (
        "measured, no fixed figure; a CPU has no catalog peak, so MFU is undefined here: "
        "`trainbudget bench` reports it on a catalogued GPU (docs/calibration.md)"
    )
    return ex


def _init() -> Example:
    ex = Example(
        "S-init", "Init std 1/sqrt(d_in), cut at 3 std: output independent of d_in (参数初始化)"
    )
    torch = _torch()
    if torch is None:
        ex.skipped = "skipped (no torch)"
        return ex
    gen = torch.Generator().manual_seed(0)
    stds = {}
    for d_in in (1024, 16384):
        std = 1 / math.sqrt(d_in)
        x = torch.randn(256, d_in, generator=gen)  # (batch, d_in)
        w = torch.nn.init.trunc_normal_(
            torch.empty(d_in, 64), std=std, a=-3 * std, b=3 * std, generator=gen
        )
        stds[d_in] = (x @ w).std().item()  # (batch, 64): one std over all outputs
    ex.figures = [
        Figure("output std, d_in 1024", stds[1024]),
        Figure("output std, d_in 16384", stds[16384]),
        Figure("ratio of the two (independent of d_in)", stds[16384] / stds[1024], 1.0, 0.05),
    ]
    ex.note = "std 1/sqrt(d_in) is Xavier's up to a constant; the 3-std cut scales it by 0.987"
    return ex


# ---- seed 003: the GPT-2 small sizing notebook (Transformer 理论模型) ---------------------------


def sizing() -> list[Example]:
    gpt2 = resolve_model("gpt2", ["bias=false"])
    p = count_params(gpt2)
    ckpt = checkpoint_bytes(gpt2, precision="fp32", optimizer="adamw")
    fwd = forward_flops(gpt2, 1024)
    palm = palm_flops_per_token(gpt2, 1024) * 1024
    a100 = get_hardware("a100-80gb").peak_flops_per_second("bf16")  # 312e12
    mfu = mfu_from_measurement(
        flops_per_step=3 * fwd.total * 100, step_seconds=0.755, n_gpus=1, peak_flops_per_second=a100
    )
    days = training_time(
        train_flops=6 * p.total * 300e9, n_gpus=8, peak_flops_per_second=a100, mfu=0.3
    ).days
    per_part = {k: v for k, v in fwd.as_dict().items() if v}
    return [
        Example(
            "T-params",
            "GPT-2 small (bias=False, tied embeddings): parameters, per part (参数数量)",
            [
                Figure("total", p.total, 124_337_664),
                Figure("embedding/position", p.embedding_position, 786_432),
                Figure("embedding/token", p.embedding_token, 38_597_376),
                Figure("per block", p.per_layer // gpt2.n_layers, 7_079_424),
            ],
        ),
        Example(
            "T-ckpt",
            "Checkpoint: fp32 weights + AdamW's 2 buffers (检查点大小)",
            [
                Figure("bytes", ckpt, 1_492_051_968),
                Figure("measured file / estimate, %", round(1_542_470_366 / ckpt * 100, 2), 103.38),
            ],
        ),
        Example(
            "T-gpu-frac",
            "That checkpoint as a share of a 40 GB A100",
            [Figure("%", round(ckpt / get_hardware("a100-40gb").memory_bytes * 100, 2), 3.73)],
        ),
        Example(
            "T-fwd-flops",
            "Forward FLOPs of one 1024-token sequence, per part (前向传播 FLOPs)",
            [Figure(f"{k} (12 layers)" if k != "logits" else k, v) for k, v in per_part.items()]
            + [
                Figure("forward", fwd.total, 291_648_307_200),
                Figure("forward + backward (3 x forward)", 3 * fwd.total, 874_944_921_600),
            ],
            "the core's part names for the seed's kqv, scores, reduce, proj, ffw1, ffw2, dense",
        ),
        Example(
            "T-palm",
            "PaLM's estimate (6N + 12 L H Q T) x T, N without the position table",
            [
                Figure("FLOPs", palm, 875_062_886_400),
                Figure("ratio to the detailed count", round(palm / (3 * fwd.total), 6), 1.000135),
            ],
        ),
        Example(
            "T-mfu",
            "0.755 s per iteration of 20 x 5 sequences on one A100 (312 TFLOP/s bf16)",
            [Figure("MFU %", round(mfu * 100, 2), 37.14)],
        ),
        Example(
            "T-days",
            "6ND with D = 300e9 tokens on 8 A100s at 30 % MFU",
            [Figure("days", round(days, 2), 3.46)],
        ),
    ]


# ---- seed 004: the large-model training article (大模型训练) -------------------------------------


def article() -> list[Example]:
    rule = rule_of_thumb_6gb(
        training_memory(BareModel(n_params=10**9), precision="bf16-mixed", optimizer="adamw"), 10**9
    )
    pure_bf16 = training_memory(BareModel(n_params=10**9), precision="bf16", optimizer="momentum")
    gpt3 = count_params(resolve_model("gpt3-175b")).total
    fp32_175b = training_memory(
        BareModel(n_params=175 * 10**9), precision="fp32", optimizer="adamw"
    )
    v5e = get_hardware("tpu-v5e")
    llama70 = training_memory(
        BareModel(n_params=70 * 10**9), precision="bf16-mixed", optimizer="adamw"
    )
    spec70 = resolve_model("llama-2-70b")
    prec, adam = get_precision("bf16-mixed"), get_optimizer("adam")
    zero = {
        s: zero_model_state(7.5e9, shard=64, zero=s, precision=prec, optimizer=adam).total_bytes
        / GB
        for s in range(4)
    }
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=1024)
    sent = {
        kind: collective_cost(kind, 15e9, 64, 8, cluster).bytes_sent_per_rank
        for kind in ("all_reduce", "reduce_scatter", "all_gather")
    }
    ring = collective_cost("all_reduce", 1e9, 64, 1, cluster, "ring").bytes_sent_per_rank
    tree_steps = {
        q: collective_cost("all_reduce", 1e3, q, 1, cluster, "tree").steps for q in (2, 1024)
    }
    return [
        Example(
            "B-rule-6gb",
            '"6 GB per 1B parameters at 16-bit": what does the rule cover? (经验法则)',
            [
                Figure("rule, bytes per 1B params", rule.rule_bytes, 6e9),
                Figure("pure bf16 + SGD momentum (2+2+2 B)", pure_bf16.total_bytes, 6e9),
                Figure("mixed-precision AdamW (2+2+4+8 B)", rule.ours_bytes, 16e9),
            ],
            f"covers {rule.covers}; leaves out {rule.leaves_out}",
        ),
        Example(
            "B-walls",
            "GPT-3 175B: compute wall, memory wall, communication wall (计算墙、显存墙、通信墙)",
            [
                Figure("training FLOPs 6ND, D = 300e9", gpt3 * 6 * 300e9, 3.14e23, 0.01e23),
                Figure("fp32 weights, bytes", fp32_175b.params_bytes, 700e9),
                Figure(
                    "fits one 80 GB H100",
                    fp32_175b.params_bytes <= get_hardware("h100-sxm").memory_bytes,
                    False,
                ),
                Figure(
                    "128 replicas x fp32 gradients, TB",
                    data_parallel_gradient_bytes_per_iteration(175e9, 4, 128) / TB,
                    89.6,
                    1e-9,
                ),
            ],
        ),
        Example(
            "B-bounds",
            "Step time from compute 3 s and communication 2 s",
            [
                Figure(
                    "lower max(compute, comm), upper compute + comm",
                    list(step_bounds(3.0, 2.0)),
                    [3.0, 5.0],
                )
            ],
        ),
        Example(
            "B-ai-dot",
            "Arithmetic intensity of a bf16 dot product of length N (算术强度)",
            [
                Figure("N = 1000: (2N-1)/(4N+2)", dot_intensity(1000, 2), 1999 / 4002, 1e-12),
                Figure("N = 1e9 (-> 0.5 FLOP/byte)", dot_intensity(10**9, 2), 0.5, 1e-6),
            ],
        ),
        Example(
            "B-ai-matmul",
            "bf16 (B,D)@(D,F) with B=64 << D=F=8192: intensity ~ B",
            [Figure("FLOP/byte", matmul_intensity(64, 8192, 8192, 2), 64, 64 * 0.02)],
        ),
        Example(
            "B-v5e",
            "TPU v5e: 197e12 FLOP/s over 819e9 B/s: compute-bound above how many tokens?",
            [
                Figure(
                    "ridge, FLOP/byte",
                    ridge_intensity(v5e.peak_flops_per_second("bf16"), v5e.hbm_bytes_per_second),
                    240.5,
                    0.05,
                ),
                Figure(
                    "B = 200 is compute-bound", matmul_intensity(200, 8192, 8192) > 240.5, False
                ),
                Figure("B = 300 is compute-bound", matmul_intensity(300, 8192, 8192) > 240.5, True),
            ],
        ),
        Example(
            "B-zero",
            "ZeRO per-GPU model state, Psi = 7.5e9, N = 64, K = 12 (混合精度 Adam)",
            [
                Figure(f"stage {s}, GB", round(gb, 1), want)
                for (s, gb), want in zip(zero.items(), (120.0, 31.4, 16.6, 1.9), strict=True)
            ]
            + [
                Figure(
                    "stage 3 traffic / plain data parallelism",
                    (sent["reduce_scatter"] + 2 * sent["all_gather"]) / sent["all_reduce"],
                    1.5,
                    1e-9,
                )
            ],
            "stage 3: reduce-scatter of gradients + two all-gathers of weights; DP: one all-reduce",
        ),
        Example(
            "B-fail-128",
            "A step fails with 1 % per node; on 128 nodes? 1-(1-p)^128 (故障概率)",
            [Figure("%", round(job_failure_probability(128, 0.01) * 100, 2), 72.37)],
        ),
        Example(
            "B-fail-1000",
            "8 % of GPUs fail per month: per GPU-day, and a 1000-GPU job within a day",
            [
                Figure(
                    "per GPU-day, % (8 % / 30)", round(daily_rate_linear(0.08, 30) * 100, 2), 0.27
                ),
                Figure(
                    "1000-GPU job in a day at 0.27 %, %",
                    round(job_failure_probability(1000, 0.0027) * 100, 1),
                    93.3,
                ),
            ],
        ),
        Example(
            "B-llama70b",
            "LLaMA-2 70B training state, mixed-precision Adam (混合精度)",
            [
                Figure("weights (bf16), GB", llama70.params_bytes / GB, 140),
                Figure("gradients, GB", llama70.grads_bytes / GB, 140),
                Figure(
                    "Adam state + fp32 master (12 B/param), GB", llama70.optimizer_bytes / GB, 840
                ),
            ],
        ),
        Example(
            "B-infer",
            "Inference FLOPs per generated token",
            [
                Figure(
                    "70B model: 2 x params",
                    inference_flops_per_token(BareModel(n_params=70 * 10**9)),
                    140e9,
                )
            ],
        ),
        Example(
            "B-kv",
            "70B inference, batch 8 x 4096 tokens x d_model 8192 x 2 bytes: intermediate results",
            [
                Figure("GiB", hidden_state_bytes(spec70, 8 * 4096, 2) / GiB, 0.5),
                Figure(
                    "KV cache beside it (80 layers, 8 KV heads), GiB",
                    kv_cache_bytes(spec70, 8 * 4096, 2) / GiB,
                ),
            ],
        ),
        Example(
            "B-ring-tree",
            "All-reduce on p ranks: ring bytes per rank, tree steps",
            [
                Figure(
                    "ring, p = 64: bytes per rank / buffer = 2(p-1)/p",
                    ring / 1e9,
                    2 * 63 / 64,
                    1e-12,
                ),
                Figure(
                    "tree steps p = 1024 / p = 2 (O(log p))", tree_steps[1024] / tree_steps[2], 10
                ),
            ],
        ),
    ]


SECTIONS = (
    ("Seed 000/001/002: PyTorch resource accounting (利用pytorch构建大模型)", lecture),
    ("Seed 003: GPT-2 small sizing (Transformer 理论模型)", sizing),
    ("Seed 004: large-model training (大模型训练: 显存、通信、故障)", article),
)


def run() -> list[tuple[str, list[Example]]]:
    return [(title, build()) for title, build in SECTIONS]


def _show(v: object) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.7g}"
    if isinstance(v, float) and abs(v) >= 1e15:
        return f"{v:.5g}"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{int(v):,}"
    return str(v)


def print_text(sections: list[tuple[str, list[Example]]]) -> None:
    for title, examples in sections:
        print(f"== {title} ==\n")
        for ex in examples:
            print(f"{ex.id}  {ex.question}")
            if ex.skipped:
                print(f"  {ex.skipped}")
            for f in ex.figures:
                mark = {True: "ok", False: "DIFFERS", None: ""}[f.ok]
                want = "" if f.expected is None else f"seeds {_show(f.expected)}"
                print(f"  {f.name:<48} {_show(f.value):>22}   {want:<24} {mark}".rstrip())
            if ex.note:
                print(f"  ({ex.note})")
            print()


def as_json(sections: list[tuple[str, list[Example]]]) -> dict:
    return {
        "sections": [
            {
                "title": title,
                "examples": [
                    {
                        "id": ex.id,
                        "question": ex.question,
                        "skipped": ex.skipped or None,
                        "note": ex.note or None,
                        "figures": [
                            {"name": f.name, "value": f.value, "expected": f.expected, "ok": f.ok}
                            for f in ex.figures
                        ],
                    }
                    for ex in examples
                ],
            }
            for title, examples in sections
        ]
    }


def main(argv: list[str]) -> int:
    sections = run()
    if "--json" in argv:
        print(json.dumps(as_json(sections), indent=1, ensure_ascii=False))
    else:
        print_text(sections)
    differs = [
        f"{ex.id}: {f.name}"
        for _, exs in sections
        for ex in exs
        for f in ex.figures
        if f.ok is False
    ]
    for d in differs:
        print(f"differs from the seeds: {d}", file=sys.stderr)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
