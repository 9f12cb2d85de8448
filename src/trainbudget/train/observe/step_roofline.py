"""This machine's roofline for one run, measured at start-up at the run's own shapes and torch
thread count: what the predicted step time stands on off the catalog (a CPU has no datasheet
row). A square 512 x 512 matmul, as measured before, said little about a step of small,
thin GEMMs and swung 65x between runs on a loaded machine.

Three rates, each timed on the kernels the step runs, at its shapes, in its compute dtype:
- matmul FLOP/s: every distinct GEMM of a step -- each weight matrix's forward, input-gradient
  and weight-gradient products at micro_batch x seq_len rows (`step_gemms`) -- weighted by how
  often the step runs it: total FLOPs / total seconds;
- attention: torch's fused causal SDPA, forward and backward, at (B, H, T, E), as the fraction
  of that matmul rate the core's FlashAttention term (`Efficiency.attention`) must use to give
  the measured time;
- element-wise bytes/s: a layer's norms, residual adds and MLP activation (the spec's kinds),
  forward and backward, as the bytes the core charges them over the measured time.
The last two are converted through the core's own layer model (`layer_compute`), so the
prediction reproduces the measured kernels by construction and the rest -- how many of them a
step runs, the head, the loss, the optimizer -- is the core's.

Robustness: one warm-up pass, then REPEATS passes over all the kernels; each rate is the median
of its passes. Two readings say whether another process was taking the cores meanwhile, and
the prediction is then flagged as not to be trusted (`MeasuredRoofline.noisy`):
- the spread of the passes' totals (median absolute deviation / median) above NOISY_SPREAD:
  the machine's speed changed from pass to pass;
- this process's CPU seconds over wall seconds x threads below BUSY_CPU_SHARE: it was
  steadily sharing its cores (a co-runner on the same core halves every pass alike, which no
  spread shows; on a loaded 2-core machine the rate swung 2x between runs this way).
A noisy measurement is taken again, up to ATTEMPTS in all (a passing load may have ended), and
the steadiest is kept."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainbudget.core.parallel.layout import as_numbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.efficiency import Efficiency
from trainbudget.core.parallel.timing.layer_time import layer_compute
from trainbudget.core.parallel.timing.layer_traffic import BACKWARD_PER_FORWARD
from trainbudget.core.single.params import matrix_shapes
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Precision
from trainbudget.model.transformer import RMSNorm, apply_rope, rope_tables
from trainbudget.profile.device import DeviceInfo

REPEATS = 5
"""Timed passes over the kernels (after one warm-up pass); each rate is their median."""
ATTEMPTS = 3
"""Measurements taken at most, while they are noisy (a passing load may end meanwhile)."""
NOISY_SPREAD = 0.10
"""Passes whose totals spread more than this (`relative_spread`) mean the machine was
busy while measuring: the prediction is then said not to be trusted."""
BUSY_CPU_SHARE = 0.8
"""Below this share of its threads' worth of CPU while measuring, the process was sharing its
cores with another one."""
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PASSES_PER_STEP = 1 + BACKWARD_PER_FORWARD
"""A kernel's forward and backward: the core charges the backward BACKWARD_PER_FORWARD x."""


@dataclass(frozen=True, kw_only=True)
class MeasuredRoofline:
    matmul_flops_per_second: float
    """The step's GEMMs: their FLOPs over their seconds (median of the passes)."""
    attention_fraction: float
    """Fused causal attention's rate as a fraction of the matmul rate, in the core's
    convention (its FlashAttention FLOPs, tile-skipping included)."""
    elementwise_bytes_per_second: float
    """A layer's norms, residual adds and activation: the bytes the core charges them over
    their seconds."""
    spread: float
    """The passes' total seconds: median absolute deviation / median (`relative_spread`)."""
    cpu_share: float
    """This process's CPU seconds / (wall seconds x threads) over the passes: 1 on cores of
    its own (a little more with the runtime's helper threads), less when it shared them."""
    threads: int
    """torch's intra-op threads while measuring (the run's)."""
    repeats: int
    n_gemm_shapes: int
    """Distinct GEMM shapes timed."""
    attempts: int = 1
    """Measurements taken (more than one when the first ones were noisy)."""

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD or self.cpu_share < BUSY_CPU_SHARE

    def why_noisy(self) -> str:
        """What made it noisy, in words ("" when it is not)."""
        why = []
        if self.spread > NOISY_SPREAD:
            why.append(
                f"its {self.repeats} passes spread {100 * self.spread:.0f}% (above "
                f"{100 * NOISY_SPREAD:.0f}%)"
            )
        if self.cpu_share < BUSY_CPU_SHARE:
            why.append(
                f"it got {100 * self.cpu_share:.0f}% of its {self.threads} thread(s)' "
                f"CPU time (below {100 * BUSY_CPU_SHARE:.0f}%)"
            )
        return " and ".join(why)

    def describe(self) -> str:
        return (
            f"{self.matmul_flops_per_second:.3g} FLOP/s matmul over {self.n_gemm_shapes} GEMM "
            f"shapes of the step, attention at {self.attention_fraction:.2f} of it, "
            f"{self.elementwise_bytes_per_second:.3g} bytes/s element-wise; {self.threads} "
            f"thread(s), median of {self.repeats} passes, spread {100 * self.spread:.0f}%, "
            f"CPU share {100 * self.cpu_share:.0f}%"
            + (f" (steadiest of {self.attempts} measurements)" if self.attempts > 1 else "")
        )

    def as_dict(self) -> dict:
        return {
            "matmul_flops_per_second": self.matmul_flops_per_second,
            "attention_fraction": self.attention_fraction,
            "elementwise_bytes_per_second": self.elementwise_bytes_per_second,
            "spread": self.spread,
            "noisy": self.noisy,
            "noisy_above": NOISY_SPREAD,
            "cpu_share": self.cpu_share,
            "busy_below": BUSY_CPU_SHARE,
            "threads": self.threads,
            "repeats": self.repeats,
            "attempts": self.attempts,
        }


def step_gemms(spec: ModelSpec, rows: int) -> list[tuple[int, int, int, int]]:
    """The GEMMs of one training step as (m, n, k, count): (m, k) @ (k, n), `count` times.
    Each weight matrix (in, out) of `matrix_shapes` that `rows` tokens go through: forward
    (rows, in) @ (in, out), input gradient (rows, out) @ (out, in), weight gradient
    (out, rows) @ (rows, in). The tied token embedding is the head; an untied one and the
    position embedding are lookups, no GEMM. The counts only weight the shapes' rates (the
    step's FLOPs are the core's): a routed expert is weighted as if it saw every token."""
    out: dict[tuple[int, int, int], int] = {}
    for name, n_in, n_out, count in matrix_shapes(spec):
        if name == "embedding/position" or (name == "embedding/token" and not spec.tied_embeddings):
            continue
        if name == "embedding/token":  # tied: the head, d_model -> vocab
            n_in, n_out = n_out, n_in
        for shape in ((rows, n_out, n_in), (rows, n_in, n_out), (n_out, n_in, rows)):
            out[shape] = out.get(shape, 0) + count
    return [(m, n, k, c) for (m, n, k), c in out.items()]


def measure_step_roofline(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    device: DeviceInfo | None = None,
    repeats: int = REPEATS,
    attempts: int = ATTEMPTS,
) -> MeasuredRoofline:
    """Time the step's kernels at its shapes on `device` (default: the CPU; see the module
    docstring); about the time of 1 / n_layers of a step per pass. A noisy measurement is
    taken again, up to `attempts` times in all; the steadiest one is kept."""
    to = {"dtype": TORCH_DTYPES.get(precision.compute_dtype, torch.float32)}
    to["device"] = torch.device(device.kind if device is not None else "cpu")
    b = plan.micro_batch
    kernels = _Kernels(
        gemms=_gemm_kernels(step_gemms(spec, b * seq_len), to),
        attention=_attention_kernel(spec, b, seq_len, to),
        elementwise=_elementwise_kernel(spec, b, seq_len, to),
        sync=torch.cuda.synchronize if to["device"].type == "cuda" else _nothing,
    )
    # the core's layer at unit rates: its attention term in seconds at fraction 1 and its
    # memory-bound terms in bytes (seconds at 1 byte/s); the matmul rate does not enter them
    unit = Efficiency(matmul=1.0, in_training=1.0, attention=1.0, hbm=1.0)
    layer = layer_compute(
        spec,
        as_numbers(plan),
        seq_len=seq_len,
        e=precision.activation_bytes,
        peak=1.0,
        hbm=1.0,
        eff=unit,
        causal=True,
    )
    tried = []
    for _ in range(attempts):
        passes, cpu_share = kernels.time(repeats)
        flops = passes[0][0]
        matmul = statistics.median(flops / p[1] for p in passes)
        roof = MeasuredRoofline(
            matmul_flops_per_second=matmul,
            # the core's attention seconds at fraction 1 and peak 1 are its FLOPs
            attention_fraction=PASSES_PER_STEP
            * layer.attention_seconds
            / matmul
            / statistics.median(p[2] for p in passes),
            elementwise_bytes_per_second=PASSES_PER_STEP
            * layer.memory_bound_seconds
            / statistics.median(p[3] for p in passes),
            spread=relative_spread([p[1] + p[2] + p[3] for p in passes]),
            cpu_share=cpu_share,
            threads=torch.get_num_threads(),
            repeats=repeats,
            n_gemm_shapes=len(kernels.gemms),
        )
        tried.append(roof)
        if not roof.noisy:
            break
    best = max(tried, key=lambda r: (not r.noisy, r.cpu_share, -r.spread))
    return dataclasses.replace(best, attempts=len(tried))


@dataclass(frozen=True)
class _Kernels:
    gemms: list
    """(run, count, flops) per GEMM shape."""
    attention: Callable[[], None]
    elementwise: Callable[[], None]
    sync: Callable[[], None]

    def time(self, repeats: int) -> tuple[list[tuple[float, ...]], float]:
        """One warm-up pass (caches, allocator, thread pool), then `repeats` passes of
        (GEMM FLOPs, GEMM seconds, attention seconds, element-wise seconds); and the process's
        CPU seconds / (wall seconds x threads) over them."""
        passes = []
        for i in range(1 + repeats):
            if i == 1:
                cpu, wall = time.process_time(), time.perf_counter()
            flops = seconds = 0.0
            for run, count, gemm_flops in self.gemms:
                seconds += count * _seconds(run, self.sync)
                flops += count * gemm_flops
            attention = _seconds(self.attention, self.sync)
            passes.append((flops, seconds, attention, _seconds(self.elementwise, self.sync)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return passes[1:], cpu / (wall * torch.get_num_threads())


def relative_spread(values: list[float]) -> float:
    """The median absolute deviation over the median: robust to one or two passes that another
    process slowed (the median stands then), large when the passes scatter."""
    mid = statistics.median(values)
    return statistics.median(abs(v - mid) for v in values) / mid


def _nothing() -> None:
    pass


def _seconds(run, sync) -> float:
    """One call's seconds, the device synchronised before each clock read."""
    sync()
    t = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - t


def _gemm_kernels(shapes, to: dict) -> list:
    """(run, count, flops) per shape: a matmul into a preallocated output (no allocation
    timed)."""
    gen = torch.Generator().manual_seed(0)
    kernels = []
    for m, n, k, count in shapes:
        a = torch.randn(m, k, generator=gen).to(**to)  # (m, k)
        w = torch.randn(k, n, generator=gen).to(**to)  # (k, n)
        out = torch.empty(m, n, **to)  # (m, n)

        def run(a=a, w=w, out=out):
            torch.matmul(a, w, out=out)

        kernels.append((run, count, 2 * m * n * k))
    return kernels


def _attention_kernel(spec: ModelSpec, b: int, t: int, to: dict):
    """The model's attention core (causal SDPA, GQA), forward and backward."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(b, spec.n_heads, t, spec.d_head, generator=gen).to(**to)  # (B, H, T, E)
    k = torch.randn(b, spec.n_kv_heads, t, spec.d_head, generator=gen).to(**to)  # (B, K, T, E)
    v = torch.randn(b, spec.n_kv_heads, t, spec.d_v_head, generator=gen).to(**to)
    grad = torch.randn(b, spec.n_heads, t, spec.d_v_head, generator=gen).to(**to)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    gqa = spec.n_kv_heads != spec.n_heads

    def run():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        torch.autograd.grad(y, (q, k, v), grad)

    return run


def _elementwise_kernel(spec: ModelSpec, b: int, t: int, to: dict):
    """A layer's memory-bound ops, forward and backward: its two norms and residual adds, the
    MLP's activation as model.transformer.MLP applies it, RoPE on q and k."""
    gen = torch.Generator().manual_seed(2)
    d, hidden = spec.d_model, spec.d_ff_expert if spec.is_moe else spec.d_ff
    norm = RMSNorm(d, **to) if spec.norm == "rmsnorm" else None
    x = torch.randn(b, t, d, generator=gen).to(**to).requires_grad_()  # (B, T, D)
    h = torch.randn(b, t, hidden, generator=gen).to(**to).requires_grad_()  # (B, T, F)
    g = torch.randn(b, t, hidden, generator=gen).to(**to).requires_grad_()  # the gate
    q = torch.randn(b, t, spec.n_heads, spec.d_head, generator=gen).to(**to).requires_grad_()
    rope = rope_tables(t, spec.d_rope, to["device"]) if spec.position == "rope" else None
    gy, gh, gq = (torch.randn(z.shape, generator=gen).to(**to) for z in (x, h, q))
    ln_w = torch.ones(d, **to, requires_grad=True)
    ln_b = torch.zeros(d, **to, requires_grad=True) if spec.bias else None

    def normed(z):
        return norm(z) if norm is not None else F.layer_norm(z, (d,), ln_w, ln_b)

    def run():
        y = (x + normed(x)) + normed(x)  # (B, T, D): two norms, two residual adds
        if spec.mlp == "swiglu":
            act = (
                F.gelu(g, approximate="tanh") if spec.gate_activation == "gelu_tanh" else F.silu(g)
            )
            a = act * h
        else:
            a = F.gelu(h, approximate="tanh")
        outs, grads = [y, a], [gy, gh]
        if rope is not None:
            outs.append(apply_rope(q, *rope))
            grads.append(gq)
        torch.autograd.backward(outs, grads)

    return run
