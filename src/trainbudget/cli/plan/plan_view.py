"""Plan options shared by `estimate` and `plan`, and how a ranked plan is shown. What the
options mean (the layout, the cluster, a plan's JSON) is read in trainbudget.api.inputs.layout."""

from __future__ import annotations

import argparse

# read by `report` as well as `estimate` and `plan`: one reading of the cluster options
from trainbudget.api.inputs.layout import cluster_from_args as cluster_from_args
from trainbudget.api.inputs.layout import efficiency_from_args as efficiency_from_args
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import FitsRule, n_communicators, verdict_text
from trainbudget.core.parallel.plan import OFFLOAD_TARGETS, SCHEDULES
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.units import format_bytes


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus-per-node", help="GPUs per node (default: the hardware's platform)")
    p.add_argument("--link-efficiency", help="achieved / nominal link bandwidth (default 0.8)")
    p.add_argument(
        "--nic-bandwidth",
        metavar="RATE",
        help="each GPU's network bandwidth to other nodes, one direction, e.g. 400Gb/s (bits: "
        "one NDR port a GPU) or 6.25GB/s (4 x 100Gb/s shared by a node of 8); default: the "
        "GPU row's platform (`trainbudget catalog`)",
    )
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
    from trainbudget.core.parallel.timing.calibration import load_calibration

    try:
        load_calibration(text)
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallel plan (any of these switches to the plan-aware model)")
    g.add_argument("--dp", help="data-parallel degree (default: gpus / (tp * pp * cp))")
    g.add_argument("--tp", help="tensor-parallel degree (default 1)")
    g.add_argument("--pp", help="pipeline stages (default 1)")
    g.add_argument(
        "--pp-layers",
        metavar="N,N,...",
        help="layers of each pipeline stage (GPU), first to last, e.g. 7,8,8,9 (sum n_layers; "
        "default: an even split; --pp defaults to the number of entries); with --vpp each "
        "stage's layers split evenly over its chunks, so each count (+ 1 for a counted "
        "embedding or loss) must be divisible by vpp",
    )
    g.add_argument(
        "--account-for-embedding",
        action="store_true",
        help="count the embedding as a layer slot of the first stage's first chunk, as "
        "Megatron-Core's --account-for-embedding-in-pipeline-split (the even split then gives "
        "that stage one layer fewer)",
    )
    g.add_argument(
        "--account-for-loss",
        action="store_true",
        help="count the head and loss as a layer slot of the last stage's last chunk, as "
        "Megatron-Core's --account-for-loss-in-pipeline-split",
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
        metavar="{" + ",".join(SCHEDULES) + "}",  # checked by api.inputs.choices
        help="pipeline schedule (default 1f1b; interleaved when --vpp > 1)",
    )
    g.add_argument(
        "--global-batch",
        help="sequences per optimizer step (with a layout, default micro-batch x grad-accum x "
        "dp; alone it picks no layout: the planner searches those that reach it)",
    )
    offload = "{" + ",".join(OFFLOAD_TARGETS) + "}"
    g.add_argument("--offload-optimizer", metavar=offload, default="none")
    g.add_argument("--offload-params", metavar=offload, default="none")
    add_cluster_args(p)


def plan_lines(r: RankedPlan, cluster: Cluster, rule: FitsRule) -> list[str]:
    t, m, p = r.time, r.memory, r.plan
    comms = n_communicators(p.dp, p.tp, p.pp, p.cp)
    verdict = verdict_text(r.fits, cluster.hardware.usable_memory_bytes, rule, comms)
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
        f"({verdict})",
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
