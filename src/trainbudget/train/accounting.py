"""The plan's side of every log line: FLOPs per token, the device's peak, predicted peak memory
and step time, all from the estimating core, computed once per run."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.step_time import DEFAULT_EFFICIENCY, Efficiency, step_time
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.hardware import Hardware, get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import MiB
from trainbudget.profile.device import DeviceInfo


@dataclass(frozen=True, kw_only=True)
class Budget:
    model_flops_per_token: float
    """Forward + backward matmul FLOPs per token (what MFU counts; causal attention halved)."""
    hardware_flops_per_token: float
    """Plus recomputation (what HFU counts)."""
    peak_flops_per_second: float | None
    """Dense peak of one device in the run's compute dtype; None for a device outside the
    catalog (every CPU): MFU is then not reported."""
    predicted_peak_memory_bytes: float
    """core.peak_memory for the reference model, per device (no sharding)."""
    predicted_step_seconds: float | None
    device: DeviceInfo
    notes: tuple[str, ...]

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


def make_budget(
    spec: ModelSpec,
    *,
    device: DeviceInfo,
    precision: str,
    optimizer: str,
    micro_batch: int,
    grad_accum: int,
    seq_len: int,
    recompute: str,
    world_size: int,
) -> Budget:
    prec, notes = get_precision(precision), []
    flops = training_flops(spec, seq_len, causal=True, recompute=recompute, flash_attention=True)
    peak_memory = training_peak(
        spec,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        micro_batch=micro_batch,
        recompute=recompute,
    ).total_bytes
    peak = None
    efficiency = DEFAULT_EFFICIENCY
    if device.catalog_key is not None:
        hw = get_hardware(device.catalog_key)
        peak = hw.peak_flops_per_second(prec.compute_dtype)
    else:
        # no datasheet: predict from this machine's own roofline, measured now
        hw = measured_hardware(device, prec.compute_dtype)
        efficiency = Efficiency(matmul=1.0, attention=DEFAULT_EFFICIENCY.attention, hbm=1.0)
        rate = hw.dense_flops_per_second[prec.compute_dtype]
        notes.append(
            f"no catalog peak for {device.name}: MFU is not reported; the predicted step time "
            f"uses this machine's roofline measured at start-up ({rate:.3g} FLOP/s "
            f"{prec.compute_dtype} matmul, {hw.hbm_bytes_per_second:.3g} bytes/s copy)"
        )
    gpus_per_node = max(1, world_size) if hw.measured else 0
    cluster = Cluster(hardware=hw, n_gpus=world_size, gpus_per_node=gpus_per_node)
    plan = Plan(
        dp=world_size,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        recompute=recompute,
        flash_attention=True,
    )
    predicted = step_time(
        spec,
        plan,
        cluster,
        seq_len=seq_len,
        precision=prec,
        optimizer=get_optimizer(optimizer),
        efficiency=efficiency,
    ).step_seconds
    notes.append(
        "FLOPs per token from core.flops with causal attention (the kernel skips the "
        "masked half); MFU = model FLOPs x tokens/s / peak"
    )
    return Budget(
        model_flops_per_token=flops.model_flops_per_token,
        hardware_flops_per_token=flops.hardware_flops_per_token,
        peak_flops_per_second=peak,
        predicted_peak_memory_bytes=peak_memory,
        predicted_step_seconds=predicted,
        device=device,
        notes=tuple(notes),
    )


def measured_hardware(device: DeviceInfo, compute_dtype: str) -> Hardware:
    """A hardware row for a device outside the catalog (a CPU): matmul FLOP/s at n = 512 and
    copy bandwidth from `profile.bench` (about a second), used as the achievable peaks."""
    from trainbudget.profile.bench import bandwidth_bench, time_matmul

    n = 512
    flops = 2 * n**3 / time_matmul(n, compute_dtype, "cpu", warmup=1, repeats=3)
    bandwidth = bandwidth_bench(64 * MiB, "cpu", warmup=1, repeats=3)
    return Hardware(
        name="this-machine",
        description=device.name,
        memory_bytes=float(device.total_memory_bytes or 1),
        hbm_bytes_per_second=bandwidth,
        dense_flops_per_second={compute_dtype: flops},
        sparse_flops_per_second={},
        intra_node_bytes_per_second=bandwidth,
        inter_node_bytes_per_second=bandwidth,
        gpus_per_node=1,
        intra_node_link="shared memory",
        inter_node_link="none",
        source_urls=(),
        notes="measured at start-up by trainbudget.train",
        measured=True,
    )
