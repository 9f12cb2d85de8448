"""The plan's side of every log line and of summary.json: FLOPs per token, the device's peak,
predicted peak memory and step time, all from the estimating core, computed once per run for
the layout the trainer really runs.

The layout (`run_plan`): data parallel over the run's processes (dp = world size; the trainer
runs no tensor, pipeline, context or expert parallelism), ZeRO stage 0 under DDP (replicated
model state) and 3 under FSDP2's `fully_shard` (parameters, gradients and optimizer state
sharded over every rank; train.distributed), the config's micro-batch, gradient accumulation
and recomputation. A single process runs no wrapper: ZeRO 0 whatever the strategy.

What each prediction uses:
- step time: `core.parallel.step_time.step_time` of that plan, on the catalog row of the device
  (or, off the catalog, on this machine's roofline measured at start-up at the run's own
  shapes and thread count: train.step_roofline);
- peak memory per rank: for one process, `core.single.peak_memory.training_peak`, the phase
  model of the reference implementation (held to torch's MemTracker by the profile tests); for
  several, `core.parallel.parallel_memory.plan_memory` of the plan, which shards the model state
  by the ZeRO stage and adds DDP's gradient buckets or FSDP2's gathered layers;
- model state per rank (weights, gradients, fp32 masters, optimizer state): `plan_memory`'s, for
  any number of processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.parallel_memory import plan_memory
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.step_time import DEFAULT_EFFICIENCY, Efficiency, step_time
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.hardware import Hardware, get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import MiB
from trainbudget.profile.device import DeviceInfo

if TYPE_CHECKING:  # the measurement imports torch: only off the catalog (make_budget)
    from trainbudget.train.step_roofline import MeasuredRoofline

STRATEGY_ZERO = {"ddp": 0, "fsdp": 3}
"""The ZeRO stage of each strategy train.distributed runs: DDP replicates the model state on
every rank; FSDP2's fully_shard shards parameters, gradients and optimizer state (ZeRO-3)."""


def run_plan(
    strategy: str, *, world_size: int, micro_batch: int, grad_accum: int, recompute: str
) -> Plan:
    """The layout the trainer runs for `strategy` on `world_size` processes (see the module
    docstring). The inverse of preflight.apply_plan's choice of strategy for a plan file."""
    if strategy not in STRATEGY_ZERO:
        raise SpecError("strategy", strategy, f"must be one of {', '.join(STRATEGY_ZERO)}")
    return Plan(
        dp=world_size,
        zero=STRATEGY_ZERO[strategy] if world_size > 1 else 0,  # alone: no wrapper
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        recompute=recompute,
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
    """Peak bytes on one rank (see the module docstring for the model used)."""
    predicted_model_state_bytes: float
    """Weights, gradients, fp32 masters and optimizer state on one rank, as the plan shards them."""
    predicted_step_seconds: float | None
    device: DeviceInfo
    notes: tuple[str, ...]
    roofline: MeasuredRoofline | None = None
    """Off the catalog: this machine's roofline measured at start-up, what the predicted step
    time stands on; `roofline.noisy`: measured on a busy machine, not to be trusted."""

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
    spec: ModelSpec, plan: Plan, *, precision: str, optimizer: str, seq_len: int
) -> float:
    """Peak bytes on one rank of `plan` (from `run_plan`): the phase model of the reference
    step for one process, the plan's per-rank memory for several (the module docstring)."""
    if plan.n_gpus == 1:
        return training_peak(
            spec,
            precision=precision,
            optimizer=optimizer,
            seq_len=seq_len,
            micro_batch=plan.micro_batch,
            recompute=plan.recompute,
        ).total_bytes
    return plan_memory(
        spec,
        plan,
        seq_len=seq_len,
        precision=get_precision(precision),
        optimizer=get_optimizer(optimizer),
    ).total_bytes


def make_budget(
    spec: ModelSpec,
    plan: Plan,
    *,
    device: DeviceInfo,
    precision: str,
    optimizer: str,
    seq_len: int,
) -> Budget:
    """The predictions for `plan` (from `run_plan`) of `spec` on `device`, one per rank."""
    prec, opt, notes = get_precision(precision), get_optimizer(optimizer), []
    flops = training_flops(
        spec, seq_len, causal=True, recompute=plan.recompute, flash_attention=plan.flash_attention
    )
    per_rank = plan_memory(spec, plan, seq_len=seq_len, precision=prec, optimizer=opt)
    peak_memory = predicted_peak_bytes(
        spec, plan, precision=precision, optimizer=optimizer, seq_len=seq_len
    )
    if plan.n_gpus == 1:
        memory_note = "core.peak_memory's phase model of the reference implementation"
    else:
        memory_note = f"core.parallel_memory for {plan.describe()}, per rank"
    peak = roof = None
    efficiency = DEFAULT_EFFICIENCY
    if device.catalog_key is not None:
        hw = get_hardware(device.catalog_key)
        peak = hw.peak_flops_per_second(prec.compute_dtype)
    else:
        # no datasheet: predict from this machine's own roofline, measured now at the run's
        # shapes; its rates already are what the step's kernels achieve (no further fraction)
        from trainbudget.train.step_roofline import measure_step_roofline

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
    predicted = step_time(
        spec, plan, cluster, seq_len=seq_len, precision=prec, optimizer=opt, efficiency=efficiency
    ).step_seconds
    notes.append(
        "FLOPs per token from core.flops with causal attention (the kernel skips the "
        "masked half); MFU = model FLOPs x tokens/s / peak"
    )
    notes.append(
        f"predictions for the layout that runs, {plan.describe()}: step time from "
        f"core.step_time; peak memory from {memory_note}"
    )
    return Budget(
        plan=plan,
        model_flops_per_token=flops.model_flops_per_token,
        hardware_flops_per_token=flops.hardware_flops_per_token,
        peak_flops_per_second=peak,
        predicted_peak_memory_bytes=peak_memory,
        predicted_model_state_bytes=per_rank.state.total_bytes,
        predicted_step_seconds=predicted,
        device=device,
        notes=tuple(notes),
        roofline=roof,
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
        notes="measured at start-up by trainbudget.train (train.step_roofline)",
        measured=True,
    )
