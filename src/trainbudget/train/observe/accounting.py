"""The plan's side of every log line and of summary.json: FLOPs per token, the device's peak,
predicted peak memory and step time, all from the estimating core, computed once per run for
the layout the trainer really runs.

The layout (`run_plan`): data parallel over the run's processes (dp = world size / (tp x pp)),
tensor (and sequence) parallel over tp of them, pipeline stages over pp (train.parallel.pipeline),
experts split over ep of the data-parallel ranks (the trainer runs no context parallelism),
the ZeRO stage of the strategy that runs (train.spec.strategy: ddp 0, zero1 1, zero2 2, fsdp 3,
hsdp 3 over shard groups of zero_shard ranks), the config's micro-batch, gradient accumulation
and recomputation. A single data-parallel rank runs no wrapper: ZeRO 0 whatever the strategy.

What each prediction uses:
- step time: `core.parallel.timing.step_time.step_time` of that plan, on the catalog row of the
  device (or, off the catalog, on this machine's roofline measured at start-up at the run's own
  shapes and thread count: train.observe.step_roofline);
- peak memory per rank: `core.parallel.memory.rank_peak.rank_peak`, the per-GPU phase model
  (`core.parallel.memory.gpu_peak`) that `estimate`, `plan` and the planner use, on each rank's
  pipeline stage, under the trainer's own framework row (`frameworks.TRAINBUDGET`: the engine
  each strategy runs -- DDP's gradient buckets, ZeroRedundancyOptimizer's whole-tensor shares,
  FSDP2 with or without resharding after forward -- and torch's fused Adam); under expert
  parallelism summary.json adds, per rank, the prediction at the routing its measured step had
  (`rank_peak.expert_rows_bytes`);
- model state per rank (weights, gradients, fp32 masters, optimizer state): the same model's
  state at rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.rank_peak import rank_peak, stage_of
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.comm_volume import PlannedCollective, planned_collectives
from trainbudget.core.parallel.timing.step_time import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    step_terms,
    step_time,
)
from trainbudget.core.single.flops import training_flops
from trainbudget.core.spec.hardware import Hardware, get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision, get_optimizer, get_precision
from trainbudget.core.units import MiB
from trainbudget.profile.device import DeviceInfo
from trainbudget.train.spec.pipeline_split import CORE_SCHEDULES, parse_pp_layers
from trainbudget.train.spec.strategy import get_strategy

if TYPE_CHECKING:  # the measurement imports torch: only off the catalog (make_budget)
    from trainbudget.train.observe.step_roofline import MeasuredRoofline


def run_plan(
    strategy: str,
    *,
    world_size: int,
    micro_batch: int,
    grad_accum: int,
    recompute: str,
    zero_shard: int = 0,
    tp: int = 1,
    sequence_parallel: bool = False,
    ep: int = 1,
    pp: int = 1,
    cp: int = 1,
    pp_schedule: str = "1f1b",
    vpp: int = 1,
    pp_layers: str = "",
) -> Plan:
    """The layout the trainer runs for `strategy` on `world_size` processes (see the module
    docstring): world_size / (tp x pp) of them data parallel, the pipeline schedule in the
    core's name. The inverse of preflight.apply_plan's choice of strategy for a plan file."""
    zero = get_strategy(strategy).zero
    dp = world_size // (tp * pp * cp)
    alone = dp * cp == 1  # no data-parallel wrapper (it averages over dp x cp)
    core_schedule = {v: k for k, v in CORE_SCHEDULES.items()}[pp_schedule]
    return Plan(
        dp=dp,
        tp=tp,
        sp=sequence_parallel,
        pp=pp,
        cp=cp,
        vpp=vpp,
        schedule=core_schedule,
        pp_layers=parse_pp_layers(pp_layers),
        zero=0 if alone else zero,
        zero_shard=0 if alone else zero_shard,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        recompute=recompute,
        ep=ep,
        flash_attention=True,  # the reference model's attention is torch's fused SDPA
    )


@dataclass(frozen=True, kw_only=True)
class Budget:
    plan: Plan
    """The layout the predictions are for: the one the trainer runs (`run_plan`)."""
    model_flops_per_token: float
    """Forward + backward matmul FLOPs per token (what MFU counts; causal attention halved)."""
    hardware_flops_per_token: float
    """Plus recomputation (what HFU counts)."""
    peak_flops_per_second: float | None
    """Dense peak of one device in the run's compute dtype; None for a device outside the
    catalog (every CPU): MFU is then not reported."""
    predicted_peak_memory_bytes: float
    """Peak bytes on one rank, the most loaded (see the module docstring for the model used)."""
    predicted_peak_memory_bytes_by_rank: tuple[float, ...] = ()
    """Peak bytes on each rank, in rank order, where ranks differ (ZeroRedundancyOptimizer's
    whole-tensor shards); empty: every rank `predicted_peak_memory_bytes`."""
    predicted_model_state_bytes: float
    """Weights, gradients, fp32 masters and optimizer state on one rank, as the plan shards them."""
    predicted_optimizer_state_bytes: float
    """The optimizer's state tensors on one rank (Adam's two moments; no fp32 masters)."""
    predicted_master_bytes: float
    """fp32 master weights on one rank (bf16-mixed; 0 otherwise)."""
    predicted_step_seconds: float | None
    device: DeviceInfo
    notes: tuple[str, ...]
    roofline: MeasuredRoofline | None = None
    """Off the catalog: this machine's roofline measured at start-up, what the predicted step
    time stands on; `roofline.noisy`: measured on a busy machine, not to be trusted."""
    predicted_collectives: tuple[PlannedCollective, ...] = ()
    """The collectives the step time charges for one step (core.parallel.timing.comm_volume), what
    train.observe.comm_report sets beside the measured ones."""

    def mfu(self, tokens_per_second_per_device: float) -> float | None:
        if self.peak_flops_per_second is None:
            return None
        return (
            self.model_flops_per_token * tokens_per_second_per_device / self.peak_flops_per_second
        )

    def hfu(self, tokens_per_second_per_device: float) -> float | None:
        if self.peak_flops_per_second is None:
            return None
        return (
            self.hardware_flops_per_token
            * tokens_per_second_per_device
            / self.peak_flops_per_second
        )


def predicted_peak_bytes(
    spec: ModelSpec,
    plan: Plan,
    *,
    precision: str,
    optimizer: str,
    seq_len: int,
) -> float:
    """Peak bytes on the most loaded rank of `plan` (from `run_plan`): the figure make_budget
    reports."""
    return _memory(
        spec,
        plan,
        seq_len=seq_len,
        precision=get_precision(precision),
        optimizer=get_optimizer(optimizer),
    ).peak_bytes


def make_budget(
    spec: ModelSpec,
    plan: Plan,
    *,
    device: DeviceInfo,
    precision: str,
    optimizer: str,
    seq_len: int,
) -> Budget:
    """The predictions for `plan` (from `run_plan`) of `spec` on `device`, one per rank: the
    plan's ZeRO stage names the engine that runs it (the module docstring)."""
    prec, opt, notes = get_precision(precision), get_optimizer(optimizer), []
    flops = training_flops(
        spec, seq_len, causal=True, recompute=plan.recompute, flash_attention=plan.flash_attention
    )
    memory = _memory(spec, plan, seq_len=seq_len, precision=prec, optimizer=opt)
    peak = roof = None
    efficiency = DEFAULT_EFFICIENCY
    if device.catalog_key is not None:
        hw = get_hardware(device.catalog_key)
        peak = hw.peak_flops_per_second(prec.compute_dtype)
    else:
        # no datasheet: predict from this machine's own roofline, measured now at the run's
        # shapes; its rates already are what the step's kernels achieve (no further fraction)
        from trainbudget.train.observe.step_roofline import measure_step_roofline

        roof = measure_step_roofline(spec, plan, seq_len=seq_len, precision=prec, device=device)
        hw = measured_hardware(device, prec.compute_dtype, roof)
        efficiency = Efficiency(
            matmul=1.0, in_training=1.0, attention=roof.attention_fraction, hbm=1.0
        )
        notes.append(
            f"no catalog peak for {device.name}: MFU is not reported; the predicted step time "
            f"uses this machine's roofline measured at start-up at the run's shapes "
            f"({roof.describe()})"
        )
        if roof.noisy:
            notes.append(noisy_note(roof))
    gpus_per_node = max(1, plan.n_gpus) if hw.measured else 0
    cluster = Cluster(hardware=hw, n_gpus=plan.n_gpus, gpus_per_node=gpus_per_node)
    kw = dict(seq_len=seq_len, precision=prec, optimizer=opt, efficiency=efficiency)
    predicted = step_time(spec, plan, cluster, **kw).step_seconds
    collectives = planned_collectives(step_terms(spec, plan, cluster, **kw).comm)
    notes.append(
        "FLOPs per token from core.flops with causal attention (the kernel skips the "
        "masked half); MFU = model FLOPs x tokens/s / peak"
    )
    notes.append(
        f"predictions for the layout that runs, {plan.describe()}: step time from "
        f"core.step_time; peak memory from {memory.note}"
    )
    return Budget(
        plan=plan,
        model_flops_per_token=flops.model_flops_per_token,
        hardware_flops_per_token=flops.hardware_flops_per_token,
        peak_flops_per_second=peak,
        predicted_peak_memory_bytes=memory.peak_bytes,
        predicted_peak_memory_bytes_by_rank=memory.peak_bytes_by_rank,
        predicted_model_state_bytes=memory.model_state_bytes,
        predicted_optimizer_state_bytes=memory.optimizer_state_bytes,
        predicted_master_bytes=memory.master_bytes,
        predicted_step_seconds=predicted,
        device=device,
        notes=tuple(notes),
        roofline=roof,
        predicted_collectives=collectives,
    )


@dataclass(frozen=True, kw_only=True)
class _Memory:
    peak_bytes: float
    peak_bytes_by_rank: tuple[float, ...]
    model_state_bytes: float
    optimizer_state_bytes: float
    master_bytes: float
    note: str


def _memory(
    spec: ModelSpec,
    plan: Plan,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
) -> _Memory:
    """Per-rank memory predictions: `rank_peak` on every rank (see the module docstring)."""
    kw = dict(precision=precision.name, optimizer=optimizer.name, seq_len=seq_len)
    ranks = [rank_peak(spec, plan, rank=rank, **kw) for rank in range(plan.n_gpus)]
    by_rank = tuple(r.total_bytes for r in ranks)
    top = by_rank.index(max(by_rank))
    heaviest = ranks[top]
    # the model state of a rank of the heaviest stage, at the even share of a whole-tensor
    # sharded optimizer state (the mean over that stage's ranks: their shares add up to it)
    stage = [r.state for i, r in enumerate(ranks) if stage_of(i, plan) == stage_of(top, plan)]

    def mean(field: str) -> float:
        return sum(getattr(s, field) for s in stage) / len(stage)

    return _Memory(
        peak_bytes=max(by_rank),
        peak_bytes_by_rank=by_rank if plan.n_gpus > 1 else (),
        model_state_bytes=mean("total_bytes"),
        optimizer_state_bytes=mean("optimizer_state_bytes"),
        master_bytes=mean("master_bytes"),
        note=f"core.gpu_peak's phase model on each rank of {plan.describe()} under the "
        f"trainer's engines (peak at {heaviest.peak.phase} on the {heaviest.stage} stage)",
    )


def noisy_note(roof: MeasuredRoofline) -> str:
    return (
        "the machine was too busy to trust the predicted step time: while its roofline was "
        f"measured at start-up, {roof.why_noisy()}; another process was using the cores"
    )


def measured_hardware(device: DeviceInfo, compute_dtype: str, roof: MeasuredRoofline) -> Hardware:
    """A hardware row for a device outside the catalog (a CPU): the rates of `roof`, measured
    at the run's shapes, as the achievable peaks; the copy bandwidth of `profile.bench` for
    the links between processes."""
    from trainbudget.profile.bench import bandwidth_bench

    bandwidth = bandwidth_bench(64 * MiB, device.kind, warmup=1, repeats=3)
    return Hardware(
        name="this-machine",
        description=device.name,
        memory_bytes=float(device.total_memory_bytes or 1),
        hbm_bytes_per_second=roof.elementwise_bytes_per_second,
        dense_flops_per_second={compute_dtype: roof.matmul_flops_per_second},
        sparse_flops_per_second={},
        intra_node_bytes_per_second=bandwidth,
        inter_node_bytes_per_second=bandwidth,
        gpus_per_node=1,
        intra_node_link="shared memory",
        inter_node_link="none",
        source_urls=(),
        notes="measured at start-up by trainbudget.train (train.observe.step_roofline)",
        measured=True,
    )
