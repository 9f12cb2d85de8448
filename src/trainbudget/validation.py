"""Predictions against published training runs (data: trainbudget.published).

Each run's measured figure is turned into seconds per step with the source's own FLOP
convention; the prediction is step_time() for the published model, layout and batch, with
one efficiency setting for every case (no per-case tuning).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.parallel_memory import plan_memory
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.step_time import DEFAULT_EFFICIENCY, Efficiency, step_time
from trainbudget.core.single.flops import palm_flops_per_token
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.published import PUBLISHED_RUNS, PublishedRun

TFLOPS = 1e12  # the sources quote TFLOP/s = 1e12 FLOP/s
# passes over the model that each Megatron convention counts (full recomputation adds one)
_MEGATRON_PASSES = {"megatron-96Bslh2": 4, "megatron-72Bslh2": 3}


def timing_spec(run: PublishedRun) -> ModelSpec:
    """The spec whose even pipeline split matches the run's heaviest stage.

    BLOOM (70 layers on 12 stages; DeepSpeed counts the embedding and head as pipeline
    units, 6 per stage) and Llama 3 405B (126 layers on 16 stages, the first and last one
    layer short) split unevenly, which Megatron-style validation forbids; the slowest stage
    sets the pace, so they are timed as ceil(L / stages) layers per stage."""
    spec = run.model
    stages = run.layout.pp * run.layout.vpp
    per_stage = -(-spec.n_layers // stages)
    return spec.replace(n_layers=per_stage * stages)


def plan_of(run: PublishedRun) -> Plan:
    lay = run.layout
    return Plan(
        dp=lay.dp,
        tp=lay.tp,
        pp=lay.pp,
        cp=lay.cp,
        zero=lay.zero,
        sp=lay.sp,
        vpp=lay.vpp,
        schedule="interleaved" if lay.vpp > 1 else "1f1b",
        micro_batch=lay.micro_batch,
        grad_accum=lay.grad_accum,
        recompute=lay.recompute,
        flash_attention=lay.flash_attention,
    )


def megatron_flops(run: PublishedRun, passes: int) -> float:
    """Narayanan et al. 2021 eq. 3 per iteration: 24*passes*B*s*l*h^2*(1 + s/6h + V/(16 or
    12)lh); passes = 4 with full recomputation (the 96Bslh^2 form), 3 without (72Bslh^2)."""
    m = run.model
    b, s, h, v = run.layout.global_batch, run.seq_len, m.d_model, m.vocab_size
    n = m.n_layers
    return 24 * passes * b * s * n * h * h * (1 + s / (6 * h) + v / (4 * passes * n * h))


def measured_step_seconds(run: PublishedRun) -> float | None:
    """The source's figure as seconds per step (None when it gives nothing convertible)."""
    meas, n = run.measured, run.n_gpus
    tokens = run.layout.global_batch * run.seq_len
    if meas.iteration_seconds is not None:
        return meas.iteration_seconds
    passes = _MEGATRON_PASSES.get(meas.flops_convention or "")
    if meas.tflops_per_second_per_gpu is not None and passes is not None:
        return megatron_flops(run, passes) / (meas.tflops_per_second_per_gpu * TFLOPS * n)
    if meas.tokens_per_second_per_gpu is not None:
        return tokens / (meas.tokens_per_second_per_gpu * n)
    if meas.mfu is not None and meas.flops_convention == "palm":
        # Llama 3: MFU of the PaLM-convention model FLOPs over the bf16 dense peak
        flops = palm_flops_per_token(run.model, run.seq_len) * tokens
        peak = get_hardware(run.gpu).peak_flops_per_second("bf16")
        return flops / (meas.mfu * peak * n)
    return None


@dataclass(frozen=True)
class Comparison:
    run_id: str
    source: str
    n_gpus: int
    layout: str
    measured_seconds: float
    predicted_seconds: float
    predicted_memory_bytes: float
    gpu_memory_bytes: float

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_seconds / self.measured_seconds - 1


def compare(run: PublishedRun, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> Comparison | None:
    """None for runs on hardware outside the catalog or without a convertible figure."""
    if run.gpu.startswith("other:"):
        return None
    measured = measured_step_seconds(run)
    if measured is None:
        return None
    spec, plan, seq_len = timing_spec(run), plan_of(run), run.seq_len
    validate_plan(plan, spec, n_gpus=run.n_gpus, seq_len=seq_len)
    hw = get_hardware(run.gpu)
    cluster = Cluster(hardware=hw, n_gpus=run.n_gpus, gpus_per_node=run.gpus_per_node)
    prec, opt = get_precision("bf16-mixed"), get_optimizer("adam")
    t = step_time(
        spec,
        plan,
        cluster,
        seq_len=seq_len,
        precision=prec,
        optimizer=opt,
        efficiency=efficiency,
    )
    mem = plan_memory(spec, plan, seq_len=seq_len, precision=prec, optimizer=opt)
    return Comparison(
        run_id=run.id,
        source=run.source.split(",")[0],
        n_gpus=run.n_gpus,
        layout=plan.describe(),
        measured_seconds=measured,
        predicted_seconds=t.step_seconds,
        predicted_memory_bytes=mem.total_bytes,
        gpu_memory_bytes=hw.memory_bytes,
    )


def compare_all(efficiency: Efficiency = DEFAULT_EFFICIENCY) -> list[Comparison]:
    return [c for c in (compare(r, efficiency) for r in PUBLISHED_RUNS) if c is not None]


def mean_absolute_error(comparisons: list[Comparison]) -> float:
    return sum(abs(c.error) for c in comparisons) / len(comparisons)


# The runs whose published layout leaves out what decides the prediction.
EXCLUDED = {
    "llama3-405b-8k-8192gpu": "virtual pipeline stages not published (vpp=1 placeholder); the "
    "bubble of pp=16 with 16-32 micro-batches depends on it",
    "llama3-405b-8k-16384gpu": "virtual pipeline stages not published (vpp=1 placeholder)",
    "llama3-405b-128k-cp16": "virtual pipeline stages not published (vpp=1 placeholder)",
}
MATMUL_GRID = (0.60, 0.65, 0.70, 0.75)


def scored(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons that count towards the error (EXCLUDED left out)."""
    return [c for c in comparisons if c.run_id not in EXCLUDED]


def leave_one_out_errors(grid: tuple[float, ...] = MATMUL_GRID) -> dict[str, float]:
    """Each scored run predicted with the matmul efficiency that fits all the others best:
    how well the one global constant generalises to a run it was not chosen on."""
    by_value = {v: {c.run_id: c for c in scored(compare_all(Efficiency(matmul=v)))} for v in grid}
    ids = list(by_value[grid[0]])
    out = {}
    for held in ids:

        def others_mae(v: float, held: str = held) -> float:
            return sum(abs(c.error) for i, c in by_value[v].items() if i != held) / (len(ids) - 1)

        best = min(grid, key=others_mae)
        out[held] = by_value[best][held].error
    return out
