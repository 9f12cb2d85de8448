"""Predictions against published training runs (data: trainbudget.published).

Each run's measured figure is turned into seconds per step with the source's own FLOP
convention; the prediction is step_time() for the published model, layout and batch, with
one efficiency setting for every case (no per-case tuning). The error is broken down by
source, framework, GPU generation and layout family; memory is compared where a source
reports it; and the one fitted constant (Efficiency.in_training, a grid search) is checked by
leaving each source out of its own fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import FLAT_RULE, FitsRule, fits, in_measure, n_communicators
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY, Efficiency, step_time
from trainbudget.core.single.flops import palm_flops_per_token
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.frameworks import GENERIC, Framework, get_framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision

# kept apart so that a plan's error range reads them without this module (re-exported here)
from trainbudget.validation_keys import GPU_GENERATION, gpu_generation, layout_family  # noqa: F401

# the notes on the runs beyond OUTLIER_LIMIT, apart (re-exported here)
from trainbudget.validation_notes import OUTLIER_LIMIT, OUTLIERS

if TYPE_CHECKING:
    from trainbudget.published import PublishedRun

TFLOPS = 1e12  # the sources quote TFLOP/s = 1e12 FLOP/s
# passes over the model that each Megatron convention counts (full recomputation adds one)
_MEGATRON_PASSES = {"megatron-96Bslh2": 4, "megatron-72Bslh2": 3}

_NEMO_CONVENTIONS = {"nemo-dgxc": False, "nemo-causal": True}
"""NeMo's FLOP conventions -> whether the attention term is halved for the causal mask."""


def plan_of(run: PublishedRun) -> Plan:
    lay = run.layout
    return Plan(
        dp=lay.dp,
        tp=lay.tp,
        pp=lay.pp,
        cp=lay.cp,
        zero=lay.zero,
        zero_shard=lay.zero_shard,
        sp=lay.sp,
        vpp=lay.vpp,
        pp_layers=lay.pp_layers,
        embedding_in_pp_split=lay.embedding_in_pp_split,
        loss_in_pp_split=lay.loss_in_pp_split,
        schedule="interleaved" if lay.vpp > 1 else "1f1b",
        micro_batch=lay.micro_batch,
        grad_accum=lay.grad_accum,
        recompute=lay.recompute,
        flash_attention=lay.flash_attention,
        offload_optimizer=lay.offload_optimizer,
    )


def megatron_flops(run: PublishedRun, passes: int) -> float:
    """Narayanan et al. 2021 eq. 3 per iteration: 24*passes*B*s*l*h^2*(1 + s/6h + V/(16 or
    12)lh); passes = 4 with full recomputation (the 96Bslh^2 form), 3 without (72Bslh^2)."""
    m = run.model
    b, s, h, v = run.layout.global_batch, run.seq_len, m.d_model, m.vocab_size
    n = m.n_layers
    return 24 * passes * b * s * n * h * h * (1 + s / (6 * h) + v / (4 * passes * n * h))


def flash_attention2_flops(run: PublishedRun) -> float:
    """Dao 2023 §4.2 per iteration: B * (6*s*N + 12*l*h*s^2), N every parameter."""
    m, s = run.model, run.seq_len
    per_sequence = 6 * s * count_params(m).total + 12 * m.n_layers * m.d_model * s * s
    return run.layout.global_batch * per_sequence


def measured_step_seconds(run: PublishedRun) -> float | None:
    """The source's figure as seconds per step (None when it gives nothing convertible)."""
    meas, n = run.measured, run.n_gpus
    batch = run.layout.global_batch
    if meas.iteration_seconds is not None:
        return meas.iteration_seconds
    if meas.tflops_per_second_per_gpu is not None:
        passes = _MEGATRON_PASSES.get(meas.flops_convention or "")
        if passes is not None:
            flops = megatron_flops(run, passes)
            return flops / (meas.tflops_per_second_per_gpu * TFLOPS * n)
        if meas.flops_convention == "flash-attention-2":
            flops = flash_attention2_flops(run)
            return flops / (meas.tflops_per_second_per_gpu * TFLOPS * n)
    if meas.tokens_per_second_per_gpu is not None:
        return batch * run.seq_len / (meas.tokens_per_second_per_gpu * n)
    if meas.samples_per_second_per_gpu is not None:
        return batch / (meas.samples_per_second_per_gpu * n)
    if meas.tflops_per_second_per_gpu is not None and meas.flops_convention in _NEMO_CONVENTIONS:
        # NeMo's performance pages: model TFLOP/s by its own per-token formula
        from trainbudget.published.nvidia.nemo_perf import nemo_flops_per_token

        causal = _NEMO_CONVENTIONS[meas.flops_convention]
        flops = nemo_flops_per_token(run.model, run.seq_len, causal=causal) * batch * run.seq_len
        return flops / (meas.tflops_per_second_per_gpu * TFLOPS * n)
    if meas.mfu is not None and meas.flops_convention == "palm":
        # Llama 3: MFU of the PaLM-convention model FLOPs over the bf16 dense peak
        flops = palm_flops_per_token(run.model, run.seq_len) * batch * run.seq_len
        peak = get_hardware(run.gpu).peak_flops_per_second("bf16")
        return flops / (meas.mfu * peak * n)
    return None


@dataclass(frozen=True)
class Comparison:
    run_id: str
    source_key: str
    framework: str
    gpu_generation: str
    layout_family: str
    n_gpus: int
    layout: str
    measured_seconds: float
    predicted_seconds: float
    predicted_memory_bytes: float
    """The allocated peak: the step's (plan_memory), or all the weights where the run's code
    puts the unsharded model on every GPU at start-up and that is more
    (PublishedRun.whole_model_on_gpu_at_init)."""
    gpu_memory_bytes: float
    """The memory the GPU gives the process (Hardware.usable_memory_bytes): the fits capacity."""
    measured_memory_bytes: float | None = None
    precision: str = "bf16-mixed"
    seq_len: int = 0
    n_params: float = 0.0
    memory_measure: str | None = None
    """What the measured peak measures (core.parallel.fits.MEMORY_MEASURES); None without one."""
    n_communicators: int = 0
    """NCCL communicators a rank of the layout holds (fits.n_communicators)."""
    dp_comm_share: float = 0.0
    """The predicted step's data-parallel collectives (gradient reductions, weight gathers;
    hidden or not) over the predicted step: how much the data-parallel axis moves."""

    @property
    def predicted_in_measure_bytes(self) -> float | None:
        """The predicted (allocated) peak as a figure of the source's own measure."""
        if self.memory_measure is None:
            return None
        return in_measure(self.predicted_memory_bytes, self.memory_measure, self.n_communicators)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_seconds / self.measured_seconds - 1

    @property
    def memory_error(self) -> float | None:
        """(predicted - measured) / measured peak memory, the prediction converted to what the
        source measures (allocated, reserved or device); None where none was reported."""
        predicted = self.predicted_in_measure_bytes
        if self.measured_memory_bytes is None or predicted is None:
            return None
        return predicted / self.measured_memory_bytes - 1

    @property
    def allocated_memory_error(self) -> float | None:
        """The error as it was before measures were told apart: the allocated peak against the
        figure, whatever it measures (validate prints both)."""
        if self.measured_memory_bytes is None:
            return None
        return self.predicted_memory_bytes / self.measured_memory_bytes - 1


# The Framework row each published run's stack is predicted with, the same for every run of it.
# NeMo 2 trains on Megatron-Core's DDP (its bf16_mixed recipe sets grad_reduce_in_fp32=True;
# its FP8 recipe keeps FP8 primary weights: the nemo-2 row),
# NeMo 1.x (containers up to 24.09) on Apex's DistributedFusedAdam (the nemo-1 rows);
# Megatron-DeepSpeed and GPT-NeoX hand data parallelism and ZeRO to DeepSpeed's engine, so
# DeepSpeed's defaults (bf16 gradients, 5e8-element buckets) apply, not Megatron's fp32
# main_grad; the FSDP sources (2022-2024: FSDP1, FairScale's FSDP, Lightning's FSDPStrategy)
# predate FSDP2, so FSDP1's row; torch-native FSDP2 trainers (NeMo AutoModel) torchtitan's,
# the FSDP2 row with its reductions; DDP, nanotron and "other" (in-house stacks) get the
# framework-neutral GENERIC.
RUN_FRAMEWORK_ROWS = {
    "megatron": "megatron",
    "nemo": "nemo-2",
    "nemo-1": "nemo-1",
    "nemo-1-bf16-grads": "nemo-1-bf16-grads",
    "nemo-1-bf16-adam": "nemo-1-bf16-adam",
    "megatron-bridge-perf": "megatron-bridge-perf",
    "megatron-legacy": "megatron-legacy",
    "megatron-deepspeed": "deepspeed",
    "megatron-deepspeed-2021": "deepspeed-2021",
    "deepspeed": "deepspeed",
    "deepspeed-0.19.2": "deepspeed-0.19.2",
    "pytorch-fsdp": "pytorch-fsdp1",
    "pytorch-fsdp2": "torchtitan",
    "kempnerforge": "kempnerforge",
    "nanotron": "nanotron",
    "internlm-2023": "internlm-2023",
}


def framework_row(
    run_framework: str, attention_kernel: str = "", loss_kernel: str | None = None
) -> Framework:
    """The Framework a published run is predicted with; GENERIC where no row matches, with
    the attention kernel and the loss kernel the run's code pins where it names one."""
    name = RUN_FRAMEWORK_ROWS.get(run_framework)
    row = GENERIC if name is None else get_framework(name)
    row = replace(row, attention_kernel=attention_kernel) if attention_kernel else row
    return replace(row, loss_kernel=loss_kernel) if loss_kernel else row


def compare(run: PublishedRun, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> Comparison | None:
    """None for runs on hardware outside the catalog or without a convertible figure."""
    if run.gpu.startswith("other:"):
        return None
    measured = measured_step_seconds(run)
    if measured is None:
        return None
    spec, plan, seq_len = run.model, plan_of(run), run.seq_len
    validate_plan(plan, spec, n_gpus=run.n_gpus, seq_len=seq_len)
    hw = get_hardware(run.gpu)
    network = hw  # the source's own network where it states one (PublishedRun.nic_bytes...)
    if run.nic_bytes_per_second is not None:
        network = replace(hw, inter_node_bytes_per_second=run.nic_bytes_per_second)
    cluster = Cluster(hardware=network, n_gpus=run.n_gpus, gpus_per_node=run.gpus_per_node)
    prec, opt = get_precision(run.precision), get_optimizer("adam")
    kw = dict(
        seq_len=seq_len,
        precision=prec,
        optimizer=opt,
        framework=replace(
            framework_row(run.framework, run.attention_kernel, run.loss_kernel),
            tp_comm_overlap=run.tp_comm_overlap,
            compiled=run.compiled,
        ),
    )
    # every published run trains a decoder-only LM: the causal mask step_time times by
    # default, as the CLI does (tests/test_validation.py holds the two equal)
    t = step_time(spec, plan, cluster, efficiency=efficiency, **kw)
    mem = plan_memory(spec, plan, **kw)
    peak = mem.total_bytes
    if run.whole_model_on_gpu_at_init:  # start-up's high-water mark: every weight, unsharded
        peak = max(peak, count_params(spec).total * prec.weight_bytes)
    return Comparison(
        run_id=run.id,
        source_key=run.source_key,
        framework=run.framework,
        gpu_generation=gpu_generation(run.gpu),
        layout_family=layout_family(run.layout),
        n_gpus=run.n_gpus,
        layout=plan.describe(),
        measured_seconds=measured,
        predicted_seconds=t.step_seconds,
        predicted_memory_bytes=peak,
        gpu_memory_bytes=hw.usable_memory_bytes,
        measured_memory_bytes=run.measured.memory_bytes_per_gpu,
        memory_measure=run.measured.memory_measure,
        n_communicators=n_communicators(plan.dp, plan.tp, plan.pp, plan.cp),
        precision=run.precision,
        seq_len=seq_len,
        n_params=count_params(spec).total,
        dp_comm_share=t.data_parallel_share,
    )


def compare_all(efficiency: Efficiency = DEFAULT_EFFICIENCY) -> list[Comparison]:
    # imported here, not at the top: a plan's range (uncertainty) needs only GPU_GENERATION and
    # layout_family, and building the published rows would add ~15 ms to every `estimate`
    from trainbudget.published import PUBLISHED_RUNS

    return [c for c in (compare(r, efficiency) for r in PUBLISHED_RUNS) if c is not None]


def mean_absolute_error(comparisons: list[Comparison]) -> float:
    return sum(abs(c.error) for c in comparisons) / len(comparisons)


# A figure from a whole run's GPU-hours (tokens / (GPU-hours x 3600)) is not a step time of the
# stated configuration: it averages over restarts, evaluation and checkpointing. Such rows are
# listed, not scored, whatever their layout (a stated steady-state throughput is scored).
WHOLE_RUN_AVERAGE = "GPU-hours are a whole-run average (restarts and evaluation included)"
_NO_LAYOUT_WHOLE_RUN = "layout not published; " + WHOLE_RUN_AVERAGE
_META_GPU_HOURS_RUNS = (
    "llama1-33b-gpuhours",
    "llama1-13b-gpuhours",
    "llama1-7b-gpuhours",
    "llama2-7b-gpuhours",
    "llama2-13b-gpuhours",
    "llama2-34b-gpuhours",
    "llama2-70b-gpuhours",
    "llama3-8b-gpuhours",
    "llama3-70b-gpuhours",
)

# The runs whose published figure or layout leaves out what decides the prediction.
EXCLUDED = {
    "llama3-405b-8k-8192gpu": "virtual pipeline stages not published (vpp=1 placeholder); the "
    "bubble of pp=16 with 16-32 micro-batches depends on it",
    "llama3-405b-8k-16384gpu": "virtual pipeline stages not published (vpp=1 placeholder)",
    "llama3-405b-128k-cp16": "virtual pipeline stages not published (vpp=1 placeholder)",
    "opt-175b-992gpu": "the paper does not say how its 'up to 147 TFLOP/s' counts FLOPs (with "
    "or without the recomputed forward: 33 % apart) nor give the batch per replica",
    **dict.fromkeys(_META_GPU_HOURS_RUNS, _NO_LAYOUT_WHOLE_RUN),
    "pythia-1b-64gpu": WHOLE_RUN_AVERAGE + "; the layout is published (pythia-1b.yml)",
    "starcoderbase-15b-512gpu": WHOLE_RUN_AVERAGE + "; TP, PP, DP and batch are published, "
    "recomputation and sharding are not",
}
IN_TRAINING_GRID = (0.75, 0.80, 0.85, 0.90, 0.95)


def outliers(comparisons: Iterable[Comparison]) -> list[tuple[Comparison, str]]:
    """The comparisons beyond OUTLIER_LIMIT, each with its OUTLIERS entry ('' where none)."""
    return [(c, OUTLIERS.get(c.run_id, "")) for c in comparisons if abs(c.error) > OUTLIER_LIMIT]


def scored(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons that count towards the error (EXCLUDED left out)."""
    return [c for c in comparisons if c.run_id not in EXCLUDED]


@dataclass(frozen=True)
class Group:
    """The error over the runs of one source, framework, GPU generation or layout family."""

    name: str
    n_runs: int
    mean_absolute_error: float
    mean_error: float
    """Signed mean: > 0 when the model predicts these runs slower than measured."""


def breakdown(
    comparisons: Iterable[Comparison],
    key: Callable[[Comparison], str],
    error: Callable[[Comparison], float] = lambda c: c.error,
) -> list[Group]:
    """One Group per value of `key`, in the order the values first appear."""
    groups: dict[str, list[float]] = {}
    for c in comparisons:
        groups.setdefault(key(c), []).append(error(c))
    return [
        Group(name, len(errs), sum(map(abs, errs)) / len(errs), sum(errs) / len(errs))
        for name, errs in groups.items()
    ]


SEQUENCE_BANDS = ((4096, "< 4k"), (16384, "4k-16k"), (65536, "16k-64k"))
"""(upper bound exclusive, label); beyond the last: '>= 64k'."""
MODEL_SIZE_BANDS = ((1e9, "< 1B"), (10e9, "1B-10B"), (100e9, "10B-100B"))
"""(upper bound exclusive, parameters, label); beyond the last: '>= 100B'."""


DP_COMM_BANDS = ((0.03, "< 3 %"), (0.10, "3-10 %"), (0.30, "10-30 %"))
"""(upper bound exclusive, share of the predicted step, label); beyond the last: '>= 30 %'."""


def _band(value: float, bands: tuple, last: str) -> str:
    return next((label for bound, label in bands if value < bound), last)


BREAKDOWN_KEYS: dict[str, Callable[[Comparison], str]] = {
    "source": lambda c: c.source_key,
    "framework": lambda c: c.framework,
    "GPU generation": lambda c: c.gpu_generation,
    "precision": lambda c: c.precision,
    "sequence band": lambda c: _band(c.seq_len, SEQUENCE_BANDS, ">= 64k"),
    "model size band": lambda c: _band(c.n_params, MODEL_SIZE_BANDS, ">= 100B"),
    "layout family": lambda c: c.layout_family,
    "data-parallel communication": lambda c: _band(c.dp_comm_share, DP_COMM_BANDS, ">= 30 %"),
}
"""The breakdowns `trainbudget validate` prints, in order."""

MEMORY_BREAKDOWN_KEYS: dict[str, Callable[[Comparison], str]] = {
    "memory measure": lambda c: c.memory_measure or "-",
}
"""The memory error's breakdowns beyond BREAKDOWN_KEYS: by what the source's figure measures."""


def predicted_not_to_fit(
    comparisons: Iterable[Comparison],
    rule: FitsRule | Callable[[Comparison], FitsRule] = FLAT_RULE,
) -> list[Comparison]:
    """The runs, all of which completed, that `fits` (the rule of `estimate` and `plan`) would
    have rejected; `rule` may depend on the run (the device rule's margin from similar runs)."""
    at = rule if callable(rule) else (lambda _c: rule)
    return [
        c
        for c in comparisons
        if not fits(c.predicted_memory_bytes, c.gpu_memory_bytes, at(c), c.n_communicators)
    ]


def with_memory(comparisons: Iterable[Comparison]) -> list[Comparison]:
    """The comparisons whose source reports peak memory."""
    return [c for c in comparisons if c.measured_memory_bytes is not None]


def memory_error(c: Comparison) -> float:
    error = c.memory_error
    if error is None:
        raise ValueError(f"{c.run_id}: its source reports no memory")
    return error


@dataclass(frozen=True)
class LeaveOneSourceOut:
    errors: dict[str, float]
    """Run id -> error, predicted with Efficiency.in_training fitted without its source."""
    chosen: dict[str, float]
    """Source key -> the grid value fitted on every other source's runs."""


def leave_one_source_out(
    grid: tuple[float, ...] = IN_TRAINING_GRID,
    comparisons_at: Callable[[float], list[Comparison]] | None = None,
) -> LeaveOneSourceOut:
    """Each source's scored runs predicted with the in-training GEMM share that gives the
    smallest mean absolute error over the runs of all OTHER sources (the documented grid search, one
    source held out at a time): how the one global constant generalises to a source it was not
    chosen on. `comparisons_at(v)` gives the comparisons with Efficiency(in_training=v)."""
    at = comparisons_at or (lambda v: compare_all(Efficiency(in_training=v)))
    by_value = {v: scored(at(v)) for v in grid}
    sources = list(dict.fromkeys(c.source_key for c in by_value[grid[0]]))
    if len(sources) < 2:
        raise ValueError("leave-one-source-out needs runs from at least two sources")
    errors: dict[str, float] = {}
    chosen: dict[str, float] = {}
    for held in sources:

        def others_mae(v: float, held: str = held) -> float:
            return mean_absolute_error([c for c in by_value[v] if c.source_key != held])

        best = min(grid, key=others_mae)
        chosen[held] = best
        errors.update({c.run_id: c.error for c in by_value[best] if c.source_key == held})
    return LeaveOneSourceOut(errors=errors, chosen=chosen)
