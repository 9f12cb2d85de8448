"""A given layout read from the options (--tp, --pp, ... --global-batch), the cluster and the
step-time efficiencies, and a ranked plan's JSON: what `estimate` with a layout and `plan`
both print for a plan."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from trainbudget.api.inputs.values import positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import FitsRule, allocated_limit_bytes, n_communicators
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.precision import get_precision

if TYPE_CHECKING:  # the step-time models load with the first plan (a one-GPU estimate has none)
    from trainbudget.core.parallel.timing.efficiency import Efficiency

LAYOUT_FLAGS = (
    "dp",
    "tp",
    "pp",
    "pp_layers",
    "vpp",
    "cp",
    "ep",
    "zero",
    "zero_shard",
    "recompute_every",
)
"""The options that name one layout. --global-batch is not one: it describes the run, and with
no layout the planner searches the layouts that reach it."""


def wants_plan(args: argparse.Namespace) -> bool:
    """Any layout option given; --calibration is one (it calibrates the plan's step time)."""
    return (
        any(getattr(args, f) is not None for f in LAYOUT_FLAGS)
        or args.calibration is not None
        or args.sp
        or getattr(args, "account_for_embedding", False)
        or getattr(args, "account_for_loss", False)
        or args.offload_optimizer != "none"
        or args.offload_params != "none"
        or args.schedule is not None
    )


def cluster_from_args(args: argparse.Namespace, hardware: Hardware, n_gpus: int) -> Cluster:
    extra: dict = {}
    if args.gpus_per_node is not None:
        extra["gpus_per_node"] = positive_int("gpus_per_node", args.gpus_per_node)
    if args.link_efficiency is not None:
        try:
            extra["link_efficiency"] = float(args.link_efficiency)
        except ValueError:
            raise SpecError(
                "link_efficiency", args.link_efficiency, "must be a number in (0, 1]"
            ) from None
    nic = getattr(args, "nic_bandwidth", None)
    if nic is not None:
        hardware = with_nic_bandwidth(hardware, nic)
    return Cluster(hardware=hardware, n_gpus=n_gpus, **extra)


def with_nic_bandwidth(hardware: Hardware, text: str | float) -> Hardware:
    """The GPU row with its per-GPU inter-node bandwidth replaced (--nic-bandwidth): a rate
    such as 400Gb/s or 50GB/s, above zero."""
    from dataclasses import replace

    from trainbudget.core.units import parse_bandwidth

    rate = parse_bandwidth(text, "nic_bandwidth")
    if not rate > 0:
        raise SpecError("nic_bandwidth", text, "must be above zero, e.g. 400Gb/s")
    return replace(
        hardware, inter_node_bytes_per_second=rate, inter_node_link=f"--nic-bandwidth {text}"
    )


def efficiency_from_args(args: argparse.Namespace, hardware: Hardware) -> Efficiency:
    """The step-time efficiencies: measured ones from --calibration, else the defaults."""
    if args.calibration is None:
        from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY

        return DEFAULT_EFFICIENCY
    from trainbudget.core.parallel.timing.calibration import (
        efficiency_from_calibration,
        load_calibration,
    )

    cal = load_calibration(args.calibration)
    if cal.catalog_key != hardware.name:
        raise SpecError(
            "calibration",
            args.calibration,
            f"was measured on {cal.catalog_key or cal.device_name}, not on {hardware.name}",
        )
    # the matmul fraction measured in the dtype the run computes in (fp32 for --precision fp32)
    precision = getattr(args, "precision", None)
    dtype = get_precision(precision).compute_dtype if precision else "bf16"
    return efficiency_from_calibration(cal, dtype=dtype)


def plan_from_args(
    args: argparse.Namespace,
    n_gpus: int,
    micro_batch: int,
    grad_accum: int,
    recompute: str,
    flash_attention: bool,
) -> Plan:
    def opt(name: str, default: int) -> int:
        value = getattr(args, name)
        if value is None:
            return default
        if name in ("zero", "zero_shard"):
            try:
                return int(value)
            except ValueError:
                raise SpecError(name, value, "must be an integer") from None
        return positive_int(name, value)

    pp_layers = _pp_layers(args.pp_layers)
    tp, cp, vpp = opt("tp", 1), opt("cp", 1), opt("vpp", 1)
    pp = opt("pp", len(pp_layers) or 1)
    # a dp that does not multiply out is reported by validate_plan with every other problem
    dp = opt("dp", max(1, n_gpus // (tp * pp * cp)))
    if args.global_batch is not None:
        global_batch = positive_int("global_batch", args.global_batch)
        if global_batch % (micro_batch * dp):
            raise SpecError(
                "global_batch",
                global_batch,
                f"must be divisible by micro_batch ({micro_batch}) * dp ({dp})",
            )
        grad_accum = global_batch // (micro_batch * dp)
    schedule = args.schedule or ("interleaved" if vpp > 1 else "1f1b")
    return Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        pp_layers=pp_layers,
        embedding_in_pp_split=getattr(args, "account_for_embedding", False),
        loss_in_pp_split=getattr(args, "account_for_loss", False),
        cp=cp,
        ep=opt("ep", 1),
        zero=opt("zero", 0),
        zero_shard=opt("zero_shard", 0),
        recompute_every=opt("recompute_every", 1),
        sp=args.sp,
        vpp=vpp,
        schedule=schedule,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        recompute=recompute,
        flash_attention=flash_attention,
        offload_optimizer=args.offload_optimizer,
        offload_params=args.offload_params,
    )


def _pp_layers(text: str | None) -> tuple[int, ...]:
    """--pp-layers 7,8,8,9 as a tuple; the plan's validation checks it against pp and the
    model's layers."""
    if text is None:
        return ()
    return tuple(positive_int("pp_layers", part.strip()) for part in text.split(","))


def fits_json(hardware: Hardware, rule: FitsRule, communicators: int) -> dict:
    """The fits rule's fields: the GPU's nominal memory, what the device gives the process
    (the rule's capacity), the rule, and the largest allocated peak it lets fit."""
    capacity = hardware.usable_memory_bytes
    return {
        "gpu_memory_bytes": hardware.memory_bytes,
        "device_memory_bytes": capacity,
        "memory_headroom": rule.headroom,
        "fits_rule": rule.describe(),
        "memory_limit_bytes": allocated_limit_bytes(capacity, rule, communicators),
    }


def plan_json(r: RankedPlan, cluster: Cluster, rule: FitsRule) -> dict:
    """The plan-aware fields of the interface contract."""
    p, t, m = r.plan, r.time, r.memory
    comms = n_communicators(p.dp, p.tp, p.pp, p.cp)
    return {
        "plan": {
            "dp": p.dp,
            "tp": p.tp,
            "pp": p.pp,
            "pp_layers": list(p.pp_layers),
            "vpp": p.vpp,
            "embedding_in_pp_split": p.embedding_in_pp_split,
            "loss_in_pp_split": p.loss_in_pp_split,
            "cp": p.cp,
            "ep": p.ep,
            "zero": p.zero,
            "zero_shard": p.zero_shard,
            "sp": p.sp,
            "schedule": p.schedule,
            "micro_batch": p.micro_batch,
            "grad_accum": p.grad_accum,
            "global_batch": p.global_batch,
            "recompute": p.recompute,
            "recompute_every": p.recompute_every,
            "flash_attention": p.flash_attention,
            "offload_optimizer": p.offload_optimizer,
            "offload_params": p.offload_params,
            "description": p.describe(),
        },
        "fits": r.fits,
        # the heaviest GPU at its peak phase: the parts alive then, which sum to the total
        "memory_bytes": {
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "activations": m.activations_bytes,
            "temporaries": m.temporaries_bytes,
            "buffers": m.buffers_bytes,
            "total": m.total_bytes,
            "host_offloaded": m.host_bytes,
            "peak_stage": m.stage,
            "peak_phase": m.phase,
        },
        "memory_phases_bytes": dict(m.phases_bytes),
        "model_state_bytes": {
            "params": m.state.params_bytes,
            "grads": m.state.grads_bytes,
            "master_weights": m.state.master_bytes,
            "optimizer_state": m.state.optimizer_state_bytes,
        },
        "memory_bytes_per_stage": r.stage_memory_bytes,
        "memory_peak_phase_per_stage": r.stage_peak_phases,
        **fits_json(cluster.hardware, rule, comms),
        "step_seconds": t.step_seconds,
        "step_breakdown_seconds": t.breakdown_seconds,
        "step_bounds_seconds": {"lower": t.lower_bound_seconds, "upper": t.upper_bound_seconds},
        "overlap": t.overlap_note,
        "tokens_per_step": t.tokens_per_step,
        "tokens_per_second": t.tokens_per_second,
        "mfu": t.mfu,
        "hfu": t.hfu,
        "comm_bytes_per_step": t.comm_bytes,
        "comm_seconds_per_step": t.comm_seconds,
    }
