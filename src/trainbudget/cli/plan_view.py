"""Plan options shared by `estimate` and `plan`, and how a ranked plan is shown."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.compute_time import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.plan_space import RankedPlan
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
from trainbudget.core.spec.hardware import Hardware
from trainbudget.core.spec.precision import get_precision
from trainbudget.core.units import format_bytes

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


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus-per-node", help="GPUs per node (default: the hardware's platform)")
    p.add_argument("--link-efficiency", help="achieved / nominal link bandwidth (default 0.8)")
    p.add_argument(
        "--calibration",
        metavar="PATH",
        type=calibration_path,
        help="a file from `trainbudget bench --save-calibration`: the measured matmul "
        "and HBM efficiency of this GPU replace the defaults (a plan option)",
    )


def calibration_path(text: str) -> str:
    """--calibration's type: the file is read and checked whenever the option is given, so a
    missing, binary or malformed file is an error even where no step time is computed."""
    from trainbudget.profile.bench import load_calibration

    try:
        load_calibration(text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def efficiency_from_args(args: argparse.Namespace, hardware: Hardware) -> Efficiency:
    """The step-time efficiencies: measured ones from --calibration, else the defaults."""
    if args.calibration is None:
        return DEFAULT_EFFICIENCY
    from trainbudget.profile.bench import efficiency_from_calibration, load_calibration

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


def add_plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallel plan (any of these switches to the plan-aware model)")
    g.add_argument("--dp", help="data-parallel degree (default: gpus / (tp * pp * cp))")
    g.add_argument("--tp", help="tensor-parallel degree (default 1)")
    g.add_argument("--pp", help="pipeline stages (default 1)")
    g.add_argument(
        "--pp-layers",
        metavar="N,N,...",
        help="layers of each pipeline stage, first to last, e.g. 7,8,8,9 (sum n_layers; "
        "default: an even split; --pp defaults to the number of entries)",
    )
    g.add_argument("--vpp", help="virtual stages per GPU: interleaved schedule (default 1)")
    g.add_argument("--cp", help="context-parallel degree (default 1)")
    g.add_argument("--ep", help="expert-parallel degree (default 1)")
    g.add_argument("--zero", help="ZeRO stage 0-3 (3 = FSDP; default 0)")
    g.add_argument("--zero-shard", help="HSDP: shard over this many dp ranks, replicate across")
    g.add_argument("--sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    g.add_argument(
        "--recompute-every",
        help="with --recompute full: recompute only every K-th layer, the others keep their "
        "activations (default 1: every layer); counted as the --framework row does: from the "
        "first layer, ceil(L/K) of a stage's L (trainbudget's convention), or torchtitan's K-th, "
        "2K-th, ... (floor(L/K))",
    )
    g.add_argument(
        "--schedule",
        choices=("1f1b", "gpipe", "interleaved"),
        help="pipeline schedule (default 1f1b; interleaved when --vpp > 1)",
    )
    g.add_argument(
        "--global-batch",
        help="sequences per optimizer step (with a layout, default micro-batch x grad-accum x "
        "dp; alone it picks no layout: the planner searches those that reach it)",
    )
    g.add_argument("--offload-optimizer", choices=("none", "cpu", "nvme"), default="none")
    g.add_argument("--offload-params", choices=("none", "cpu", "nvme"), default="none")
    add_cluster_args(p)


def wants_plan(args: argparse.Namespace) -> bool:
    """Any layout option given; --calibration is one (it calibrates the plan's step time)."""
    return (
        any(getattr(args, f) is not None for f in LAYOUT_FLAGS)
        or args.calibration is not None
        or args.sp
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
    return Cluster(hardware=hardware, n_gpus=n_gpus, **extra)


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


def plan_json(r: RankedPlan, cluster: Cluster, headroom: float = DEFAULT_MEMORY_HEADROOM) -> dict:
    """The plan-aware fields of the interface contract."""
    p, t, m = r.plan, r.time, r.memory
    return {
        "plan": {
            "dp": p.dp,
            "tp": p.tp,
            "pp": p.pp,
            "pp_layers": list(p.pp_layers),
            "vpp": p.vpp,
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
        "gpu_memory_bytes": cluster.hardware.memory_bytes,
        "memory_headroom": headroom,
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


def fits_text(fits: bool, memory_bytes: float, headroom: float) -> str:
    """The fits verdict with its rule: a plan fits when its peak is at most `headroom` of the
    GPU's memory (core.spec.defaults.DEFAULT_MEMORY_HEADROOM unless --memory-headroom)."""
    verdict = "fits" if fits else "does NOT fit"
    return (
        f"{verdict}: limit {format_bytes(headroom * memory_bytes)} = {100 * headroom:g} % of "
        f"{format_bytes(memory_bytes)}, --memory-headroom"
    )


def plan_lines(
    r: RankedPlan, cluster: Cluster, headroom: float = DEFAULT_MEMORY_HEADROOM
) -> list[str]:
    t, m = r.time, r.memory
    parts = ", ".join(f"{k} {v:.3g}" for k, v in t.breakdown_seconds.items() if v > 0)
    return [
        f"plan         {r.plan.describe()}",
        f"step         {t.step_seconds:.4g} s ({parts}); bounds {t.lower_bound_seconds:.4g}-"
        f"{t.upper_bound_seconds:.4g} s",
        f"throughput   {t.tokens_per_second:,.0f} tokens/s; MFU {100 * t.mfu:.1f} %, HFU "
        f"{100 * t.hfu:.1f} %",
        f"memory/GPU   weights {format_bytes(m.params_bytes)} + grads {format_bytes(m.grads_bytes)}"
        f" + optimizer {format_bytes(m.optimizer_bytes)} + activations "
        f"{format_bytes(m.activations_bytes)} + temporaries {format_bytes(m.temporaries_bytes)} "
        f"+ buffers {format_bytes(m.buffers_bytes)} = {format_bytes(m.total_bytes)} at "
        f"{m.phase} on the {m.stage} stage "
        f"({fits_text(r.fits, cluster.hardware.memory_bytes, headroom)})",
        *_stage_lines(r),
        f"overlap      {t.overlap_note}",
    ]


def _stage_lines(r: RankedPlan) -> list[str]:
    """Each pipeline stage's peak when there are several (the heaviest one is the total)."""
    if len(r.stage_memory_bytes) < 2:
        return []
    parts = ", ".join(
        f"{k} {format_bytes(v)} at {r.stage_peak_phases[k]}"
        for k, v in r.stage_memory_bytes.items()
    )
    return [f"per stage    {parts} (heaviest: {r.memory.stage})"]
