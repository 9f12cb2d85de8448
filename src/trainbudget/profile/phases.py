"""Where one training step's time goes, phase by phase, on a real device (cpu or cuda).

The phases are the seed article's list of what a step really does (seed 004: "you may say
forward, backward, sync ... reality is more complicated"), with its two data steps (read a
sample, collate a batch) merged into one:

1. data_loading: sample `micro_batch` windows of `seq_len + 1` tokens from an in-memory uint16
   token array with numpy, stack them, and move inputs and targets to the device
   (`random_batch`, nanoGPT's `get_batch` without the memmap);
2. forward: `model(idx)` without targets, embeddings to logits (the head included);
3. loss: `F.cross_entropy` of the fp32 logits, exactly what the model computes when it is given
   targets (the forward and the loss are timed apart by calling the model without targets,
   not by splitting its submodules); for amp-* both run inside the trainer's torch.autocast
   (`profile.memory.step_autocast`), the phases after them outside it, as in the trainer;
4. backward: `loss.backward()`;
5. grad_sync: an all-reduce (sum, then / world size) of every gradient when torch.distributed
   is initialised; nothing, and ~0 s, on one process;
6. optimizer: `optimizer.step()` and `zero_grad(set_to_none=True)`;
7. logging: formatting a log line with `loss.item()`, which copies the loss to the host and so
   waits for the device.

Timing: the clock is read at every phase boundary after a device synchronisation
(`torch.cuda.synchronize()` on CUDA; CPU work is already synchronous), so each phase is charged
for its own kernels, not for the launches of the next. On a GPU those synchronisations stall
the launch queue a little (a few microseconds each, and kernels of one phase can no longer
overlap the next one's launch overhead), so the synchronised total is slightly longer than a
real step: `trainbudget profile` therefore also reports the step time of `time_steps`, which
synchronises only once per step. In a real (unsynchronised) loop, `loss.item()` is where the
host waits for the GPU, so there "logging" absorbs the queued work; here it is only the copy.

Each phase is the median over `steps` steps after `warmup` dropped ones; `total` is the median
of the per-step sums, so the phase medians add up to about, not exactly, `total`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.profile.memory import real_training_setup, step_autocast

PHASES = ("data_loading", "forward", "loss", "backward", "grad_sync", "optimizer", "logging")

DEFAULT_TOKENS = 1 << 16
"""Tokens in the synthetic in-memory dataset (at least 4 batches' worth are made)."""


@dataclass(frozen=True, kw_only=True)
class PhaseTimes:
    """Seconds per phase of one training step (median over the timed steps)."""

    data_loading: float
    forward: float
    loss: float
    backward: float
    grad_sync: float
    optimizer: float
    logging: float
    total: float
    """Median of the synchronised per-step totals (first to last clock read of a step)."""
    steps: int
    warmup: int
    device: str
    world_size: int
    """Processes the gradients were averaged over (1 without torch.distributed)."""
    distributed: bool
    """torch.distributed was initialised, so grad_sync all-reduced the gradients; else it did
    nothing and measures only the clock reads."""

    @property
    def phases(self) -> dict[str, float]:
        """phase -> seconds, in step order."""
        return {p: getattr(self, p) for p in PHASES}

    @property
    def phase_sum(self) -> float:
        return sum(self.phases.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "phases_seconds": self.phases,
            "total_seconds": self.total,
            "steps": self.steps,
            "warmup": self.warmup,
            "device": self.device,
            "world_size": self.world_size,
            "distributed": self.distributed,
        }


def make_tokens(vocab_size: int, n_tokens: int = DEFAULT_TOKENS, seed: int = 0) -> np.ndarray:
    """A synthetic token stream: uniform ids in [0, vocab_size), uint16 as tokenised datasets
    store GPT-2/Llama ids (uint32 for a vocabulary beyond 65536)."""
    if vocab_size <= 0 or n_tokens <= 1:
        raise SpecError("tokens", (vocab_size, n_tokens), "need vocab_size >= 1, n_tokens >= 2")
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.uint32
    return np.random.default_rng(seed).integers(0, vocab_size, size=n_tokens, dtype=dtype)


def random_batch(
    tokens: np.ndarray,
    micro_batch: int,
    seq_len: int,
    generator: np.random.Generator,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), both int64 (micro_batch, seq_len) on `device`: `micro_batch` windows
    of `seq_len + 1` consecutive tokens starting at uniform random offsets drawn from
    `generator`; targets are the inputs shifted by one token."""
    if micro_batch <= 0 or seq_len <= 0:
        raise SpecError("batch", (micro_batch, seq_len), "micro_batch and seq_len must be >= 1")
    if tokens.ndim != 1 or len(tokens) < seq_len + 1:
        raise SpecError(
            "tokens", len(tokens), f"need a 1-D array of at least seq_len + 1 = {seq_len + 1}"
        )
    starts = generator.integers(0, len(tokens) - seq_len, size=micro_batch)  # (B,)
    windows = tokens[starts[:, None] + np.arange(seq_len + 1)]  # (B, T + 1)
    batch = torch.from_numpy(windows.astype(np.int64))  # (B, T + 1)
    dev = torch.device(device)
    if dev.type == "cuda":
        batch = batch.pin_memory()  # page-locked: the copy runs asynchronously (nanoGPT)
    batch = batch.to(dev, non_blocking=dev.type == "cuda")
    return batch[:, :-1], batch[:, 1:]


def sync_gradients(model: torch.nn.Module) -> int | None:
    """Average every gradient over the torch.distributed world (one all-reduce per tensor, as
    DDP without buckets would); returns the world size, or None (and does nothing) when
    torch.distributed is not initialised."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(world)
    return world


class _PhaseClock:
    """Reads perf_counter at phase boundaries, after synchronising the device."""

    def __init__(self, device: str) -> None:
        self._cuda = torch.device(device).type == "cuda"
        self.laps: dict[str, float] = {}
        self._start = self._last = 0.0

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self) -> None:
        self.laps = {}
        self._start = self._last = self._now()

    def lap(self, phase: str) -> None:
        now = self._now()
        self.laps[phase] = now - self._last
        self._last = now

    @property
    def total(self) -> float:
        return self._last - self._start


def time_phases(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    optimizer: str,
    recompute: str = "none",
    device: str = "cpu",
    steps: int = 5,
    warmup: int = 2,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> PhaseTimes:
    """Median seconds of each phase (`PHASES`) of a training step of the reference model on a
    real device; `log` receives each step's log line (inside the logging phase)."""
    if steps < 1 or warmup < 0:
        raise SpecError("steps", (steps, warmup), "need steps >= 1 and warmup >= 0")
    model, opt = real_training_setup(
        spec,
        precision=precision,
        optimizer=optimizer,
        recompute=recompute,
        device=device,
        seed=seed,
    )
    tokens = make_tokens(
        spec.vocab_size, max(DEFAULT_TOKENS, 4 * micro_batch * (seq_len + 1)), seed
    )
    gen = np.random.default_rng(seed)
    autocast = step_autocast(precision, device)
    clock = _PhaseClock(device)
    samples: dict[str, list[float]] = {p: [] for p in (*PHASES, "total")}
    world: int | None = None
    for i in range(warmup + steps):
        clock.start()
        x, y = random_batch(tokens, micro_batch, seq_len, gen, device)
        clock.lap("data_loading")
        with autocast:  # forward and loss only, as the trainer
            logits, _ = model(x)  # (B, T, V)
            clock.lap("forward")
            # as the model computes it given targets: in fp32 whatever the activation dtype
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
        clock.lap("loss")
        loss.backward()
        clock.lap("backward")
        world = sync_gradients(model)
        clock.lap("grad_sync")
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.lap("optimizer")
        line = f"step {i:4d} | loss {loss.item():.4f} | tokens {micro_batch * seq_len}"
        if log is not None:
            log(line)
        clock.lap("logging")
        del logits, loss, x, y  # not alive while the next step's batch and forward run
        if i >= warmup:
            for p in PHASES:
                samples[p].append(clock.laps[p])
            samples["total"].append(clock.total)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return PhaseTimes(
        **{p: med[p] for p in PHASES},
        total=med["total"],
        steps=steps,
        warmup=warmup,
        device=device,
        world_size=world or 1,
        distributed=world is not None,
    )
