"""Tokens per second of `trainbudget train` against an equal nanoGPT-style training loop, on
the CPU with one thread, measured side by side in the same process.

Target (issue 14): ratio trainer / nanoGPT-style >= 1.0 at two sizes, the median of
interleaved pairs:
- 0.84M: the trainer's default model and batch -- GPT-2 style, 4 layers, d_model 128, 4 heads,
  d_ff 512, byte vocabulary (257), 16 x 128 tokens;
- 10.8M: nanoGPT's "baby GPT" shape (its shakespeare_char config: 6 layers, 6 heads, n_embd
  384) with the byte vocabulary, 8 x 256 tokens.
(Parameters as nanoGPT counts them, position embeddings left out; core.params.count_params's
total, which counts them, is printed beside.)

The nanoGPT-style loop is written here, in nanoGPT's manner (model.py and train.py of
karpathy/nanoGPT, written anew, not copied): its module layout (c_attn, c_proj, c_fc, ln_1,
ln_2, ln_f, a tied lm_head), biases on, no dropout, the loss computed inside the model's
forward, `get_batch` stacking random windows of a memory-mapped train.bin, AdamW with nanoGPT's
two groups (weight decay on matrices only) and betas (0.9, 0.95), its cosine learning rate set
every iteration, clip_grad_norm_ 1.0, zero_grad(set_to_none=True), loss.item() every
LOG_INTERVAL iterations. Where it departs from nanoGPT, it is to be equal, not faster:
- GELU: tanh-approximated, as our model spec (GPT-2's own "gelu_new") applies it; nanoGPT's
  nn.GELU() is the exact erf form (issue 14 measured the tanh form ~3 % of a step dearer);
- AdamW: torch's fused CPU kernel, as the trainer uses (model.optimizers); nanoGPT asks for
  fused on CUDA only and gets torch's for-loop implementation on a CPU, whose update of the
  10.8M model took 45-72 ms against the fused kernel's 9-27 ms here (one thread).

The trainer: train(TrainConfig(...)) on the same prepared data (the embedded corpus, byte
tokenizer), the same shape, batch, lr, weight decay, clipping, log interval; its tokens/s is
summary.json's (tokens per step / the median step time, the first step left out). The
nanoGPT-style loop is timed the same way: the median of its iterations' times (each the whole
iteration: batch, learning rate, forward, backward, clip, update, logging), the first left out.

Pairs: each pair runs both (in alternating order: A B, B A, ...) so that a drift of the
machine's speed falls on both; the verdict is the median of the pairs' ratios. Each run also
reads how much CPU other processes took meanwhile (/proc/stat less this process's own CPU
time): a run during which they took more than the cores it leaves free (all but one) plus
BUSY_OTHER_CORES is marked busy, and the median
over the pairs with both runs quiet is printed beside. Exit 1 if a size's median ratio is
below TARGET_RATIO - NOISE_ALLOWANCE.

    python benchmarks/bench_trainer.py [--sizes 0.84M,10.8M] [--pairs 5] [--steps 12] [--quick]

About 4 minutes by default on the shared 2-core machine; --quick (3 pairs of 6 steps) about 2.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from trainbudget.core.single.params import count_params  # noqa: E402
from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.spec.config import TrainConfig  # noqa: E402

TARGET_RATIO = 1.0
NOISE_ALLOWANCE = 0.05  # exit 1 only below TARGET_RATIO - NOISE_ALLOWANCE
BUSY_OTHER_CORES = 0.25  # others using this much more than the cores left free: a shared run
LR, MIN_LR, WEIGHT_DECAY, GRAD_CLIP, SEED = 3e-3, 3e-4, 0.1, 1.0, 1337
LOG_INTERVAL = 10
BETAS = (0.9, 0.95)


@dataclass(frozen=True)
class Size:
    n_layers: int
    d_model: int
    n_heads: int
    micro_batch: int
    seq_len: int
    vocab_size: int = 257  # the byte tokenizer's ids
    max_seq_len: int = 256

    @property
    def overrides(self) -> tuple[str, ...]:
        return (
            f"n_layers={self.n_layers}",
            f"d_model={self.d_model}",
            f"n_heads={self.n_heads}",
            f"d_ff={4 * self.d_model}",  # nanoGPT's MLP is 4 x n_embd wide
            f"vocab_size={self.vocab_size}",
            f"max_seq_len={self.max_seq_len}",
        )


SIZES = {
    "0.84M": Size(n_layers=4, d_model=128, n_heads=4, micro_batch=16, seq_len=128),
    "10.8M": Size(n_layers=6, d_model=384, n_heads=6, micro_batch=8, seq_len=256),
}


# ---------------------------------------------------------------- the nanoGPT-style loop


class NanoBlock(nn.Module):
    def __init__(self, s: Size) -> None:
        super().__init__()
        d = s.d_model
        self.n_heads = s.n_heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        # (B, T, C) -> (B, nh, T, hs)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    def __init__(self, s: Size) -> None:
        super().__init__()
        self.wte = nn.Embedding(s.vocab_size, s.d_model)
        self.wpe = nn.Embedding(s.max_seq_len, s.d_model)
        self.h = nn.ModuleList(NanoBlock(s) for _ in range(s.n_layers))
        self.ln_f = nn.LayerNorm(s.d_model)
        self.lm_head = nn.Linear(s.d_model, s.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        _, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t))  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def n_params(self) -> int:
        """nanoGPT's count: the position embeddings left out."""
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()


def nanogpt_loop(s: Size, train_bin: Path, steps: int) -> float:
    """Train `steps` iterations; tokens/s from the median iteration time (the first left out)."""
    torch.manual_seed(SEED)
    model = NanoGPT(s)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=True)

    def get_batch():
        data = np.memmap(train_bin, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - s.seq_len, (s.micro_batch,))
        x = torch.stack([torch.from_numpy(data[i : i + s.seq_len].astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy(data[i + 1 : i + 1 + s.seq_len].astype(np.int64)) for i in ix]
        )
        return x, y

    def get_lr(it: int) -> float:
        ratio = it / max(1, steps)
        return MIN_LR + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - MIN_LR)

    times, lossf = [], float("nan")
    x, y = get_batch()
    for it in range(steps):
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        _, loss = model(x, y)
        x, y = get_batch()  # the next batch, while nanoGPT's GPU would still be busy
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (it + 1) % LOG_INTERVAL == 0 or it == steps - 1:
            lossf = loss.item()
        times.append(time.perf_counter() - t0)
    if not math.isfinite(lossf):
        raise RuntimeError(f"nanoGPT-style loop: loss {lossf}")
    return s.micro_batch * s.seq_len / statistics.median(times[1:])


# ---------------------------------------------------------------- the trainer


def trainer(s: Size, data_dir: Path, out: Path, steps: int) -> float:
    """One run of `trainbudget train`; returns summary.json's tokens/s."""
    cfg = TrainConfig(
        model="gpt2",
        overrides=s.overrides,
        data=str(data_dir),
        out=str(out),
        steps=steps,
        micro_batch=s.micro_batch,
        seq_len=s.seq_len,
        lr=LR,
        min_lr_ratio=MIN_LR / LR,
        weight_decay=WEIGHT_DECAY,
        grad_clip=GRAD_CLIP,
        optimizer="adamw",
        precision="fp32",
        device="cpu",
        seed=SEED,
        log_interval=LOG_INTERVAL,
        eval_interval=1000 * LOG_INTERVAL,  # once, after the last step (not timed)
        eval_batches=1,
        tensorboard=False,
        checkpoint_every=0,
    )
    with contextlib.redirect_stderr(io.StringIO()):  # the progress lines
        summary = train(cfg)
    if summary["loss_final"] is None or not np.isfinite(summary["loss_final"]):
        raise RuntimeError(f"trainer: loss {summary['loss_final']}")
    return summary["tokens_per_second"]


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Run:
    tps: float
    """Tokens per second from the run's median step time."""
    others: float | None
    """CPU cores' worth that other processes took meanwhile (/proc/stat less this process's
    own CPU time); None where /proc/stat is missing."""

    @property
    def busy(self) -> bool:
        """Other processes took more than the cores this one-thread run leaves free."""
        spare = (os.cpu_count() or 1) - 1
        return self.others is not None and self.others > spare + BUSY_OTHER_CORES

    def describe(self) -> str:
        others = "" if self.others is None else f", others {self.others:.2f} cores"
        return f"{self.tps:7,.0f} tok/s{others}{' BUSY' if self.busy else ''}"


def machine_busy_seconds() -> float | None:
    """CPU seconds spent not idle by the whole machine so far (Linux), else None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def measure(fn: Callable[[], float]) -> Run:
    """Run `fn` (returning tokens/s) and read how much CPU everything else got meanwhile."""
    gc.collect()
    m0, t0, w0 = machine_busy_seconds(), os.times(), time.perf_counter()
    tps = fn()
    m1, t1, wall = machine_busy_seconds(), os.times(), time.perf_counter() - w0
    own = (t1.user - t0.user) + (t1.system - t0.system)
    others = None if m0 is None or m1 is None else max(0.0, (m1 - m0 - own) / wall)
    return Run(tps, others)


def bench_size(name: str, s: Size, data_dir: Path, tmp: Path, pairs: int, steps: int) -> float:
    spec = resolve_model("gpt2", s.overrides)
    nano = NanoGPT(s)
    print(
        f"\n{name}: {s.n_layers} layers, d_model {s.d_model}, {s.n_heads} heads, d_ff "
        f"{4 * s.d_model}, vocab {s.vocab_size}: {nano.n_params() / 1e6:.2f}M parameters as "
        f"nanoGPT counts them ({count_params(spec).total:,} with position embeddings, "
        f"core.params.count_params); batch {s.micro_batch} x {s.seq_len} tokens, fp32, "
        f"{steps} steps per run (first left out); load average {load_average()}"
    )
    train_bin = data_dir / "train.bin"
    nanogpt_loop(s, train_bin, 2)  # warm-up: thread pool, allocator, kernels
    ratios, quiet = [], []
    for i in range(pairs):
        runs = {}
        order = ("nanogpt", "trainer") if i % 2 == 0 else ("trainer", "nanogpt")
        for side in order:
            if side == "nanogpt":
                runs[side] = measure(lambda: nanogpt_loop(s, train_bin, steps))
            else:
                out = tmp / f"{name}-run{i}"
                runs[side] = measure(lambda out=out: trainer(s, data_dir, out, steps))
        ratio = runs["trainer"].tps / runs["nanogpt"].tps
        ratios.append(ratio)
        if not (runs["trainer"].busy or runs["nanogpt"].busy):
            quiet.append(ratio)
        print(
            f"  pair {i + 1}: nanoGPT-style {runs['nanogpt'].describe()} | trainer "
            f"{runs['trainer'].describe()} | ratio {ratio:.3f}"
        )
    median = statistics.median(ratios)
    quiet_text = (
        f"median of the {len(quiet)} quiet pair(s) {statistics.median(quiet):.3f}"
        if quiet
        else "no pair was quiet: every ratio was measured while other processes used the CPU"
    )
    print(
        f"{name}: ratio trainer / nanoGPT-style, median of {pairs} pairs: {median:.3f} "
        f"(pairs {min(ratios):.3f}..{max(ratios):.3f}); {quiet_text}; load average "
        f"{load_average()}"
    )
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default=",".join(SIZES), help="comma-separated: " + ", ".join(SIZES)
    )
    parser.add_argument("--pairs", type=int, default=5, help="(nanoGPT-style, trainer) pairs")
    parser.add_argument("--steps", type=int, default=12, help="steps per run (first is warm-up)")
    parser.add_argument("--quick", action="store_true", help="3 pairs of 6 steps")
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.steps = 3, 6
    names = args.sizes.split(",")
    unknown = [n for n in names if n not in SIZES]
    if unknown:
        parser.error(f"--sizes {','.join(unknown)}: unknown; known: {', '.join(SIZES)}")
    if args.steps < 3 or args.pairs < 1:
        parser.error("--steps must be >= 3 and --pairs >= 1")
    torch.set_num_threads(1)
    print(
        f"CPU, torch {torch.__version__}, {torch.get_num_threads()} thread; {os.cpu_count()} "
        f"CPUs, load average {load_average()}"
    )
    floor = TARGET_RATIO - NOISE_ALLOWANCE
    failed = []
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        data_dir = Path(tmp) / "data"
        with contextlib.redirect_stdout(io.StringIO()):
            prepare(None, data_dir, tokenizer="byte")
        if json.loads((data_dir / "meta.json").read_text())["dtype"] != "uint16":
            raise RuntimeError("the prepared tokens are not uint16, as get_batch reads them")
        for name in names:
            median = bench_size(name, SIZES[name], data_dir, Path(tmp), args.pairs, args.steps)
            if median < floor:
                failed.append(f"{name} {median:.3f}")
    print(f"\ntarget: median ratio >= {TARGET_RATIO:.2f} per size (exit 1 below {floor:.2f})")
    if failed:
        print("FAIL: " + ", ".join(failed))
        return 1
    print("PASS")
    return 0


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not on every platform
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
