"""`trainbudget plan`: search every layout, show the fastest that fit and why; or, with
--within-days, which GPU and how many finish the tokens at the least cost."""

from __future__ import annotations

import argparse
import functools

from trainbudget.cli.args import (
    add_framework_arg,
    add_model_args,
    add_optimizer_arg,
    dumps_json,
    duration_days,
    fraction,
    framework_from_args,
    money,
    nonnegative_float,
    positive_int,
)
from trainbudget.cli.plan_view import (
    add_cluster_args,
    cluster_from_args,
    efficiency_from_args,
    plan_json,
    plan_lines,
)
from trainbudget.cli.reliability_view import (
    add_reliability_options,
    reliability_json,
    reliability_line,
)
from trainbudget.cli.uncertainty_view import range_json, range_line
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.planner import Policy, why_best
from trainbudget.core.parallel.planner_fast import search_fast
from trainbudget.core.parallel.procurement import Candidate, cheapest
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.single.memory import checkpoint_bytes
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import GB, SECONDS_PER_DAY, format_bytes


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--gpus", required=True, help="GPUs in the cluster")
    p.add_argument("--gpu", default="h100-sxm", help="accelerator (see `trainbudget hardware`)")
    p.add_argument("--global-batch", required=True, help="sequences per optimizer step")
    p.add_argument("--seq-len", help="tokens per sequence (default: the model's max_seq_len)")
    p.add_argument("--tokens", help="training tokens: adds days and GPU-hours per plan")
    p.add_argument("--precision", default="bf16-mixed", help="precision policy")
    add_optimizer_arg(p)
    add_framework_arg(p)
    p.add_argument(
        "--causal",
        action="store_true",
        help="causal attention: FlashAttention skips the masked tiles and MFU counts only the "
        "unmasked pairs (default: non-causal, as the seeds and PaLM count)",
    )
    p.add_argument("--top", default="5", help="how many plans to show (default 5)")
    add_cluster_args(p)
    add_reliability_options(p)
    add_policy_args(p.add_argument_group("policy"))
    c = p.add_argument_group("cheapest cluster (with --tokens)")
    c.add_argument("--within-days", help="deadline: find the cheapest GPU type and count")
    c.add_argument("--gpu-options", help="comma-separated GPU names to compare (default --gpu)")
    c.add_argument("--gpu-counts", help="comma-separated GPU counts (default --gpus)")
    c.add_argument("--prices", help="price per GPU-hour, one or NAME=PRICE,... per GPU option")
    p.add_argument("--json", action="store_true", help="print JSON")


def add_policy_args(g) -> None:
    """The layout search's options (what policy_from_args reads), for plan and report."""
    g.add_argument("--max-tp", help="largest TP degree (default: GPUs per node)")
    g.add_argument("--zero-stages", default="0,1,2,3", help="ZeRO stages to try (default 0-3)")
    g.add_argument(
        "--recompute-options", default="none,selective,full", help="recomputation policies to try"
    )
    g.add_argument("--allow-offload", action="store_true", help="also try CPU optimizer offload")
    g.add_argument("--no-cp", action="store_true", help="do not try context parallelism")
    g.add_argument(
        "--no-hsdp",
        action="store_true",
        help="ZeRO over the whole data-parallel group only (by default shard groups of a node's "
        "dp ranks and their multiples are tried too)",
    )
    g.add_argument(
        "--no-flash-attention",
        action="store_true",
        help="plans without FlashAttention (the s x s matrix is stored)",
    )
    g.add_argument("--max-micro-batch", default="16", help="largest micro-batch (default 16)")
    g.add_argument(
        "--memory-headroom",
        default="0.9",
        help="fraction of GPU memory a plan may use (default 0.9)",
    )


def policy_from_args(args: argparse.Namespace) -> Policy:
    try:
        zero = tuple(int(z) for z in args.zero_stages.split(","))
    except ValueError:
        raise SpecError("zero_stages", args.zero_stages, "must be a list like 0,1,3") from None
    if not zero or any(z not in (0, 1, 2, 3) for z in zero):
        raise SpecError("zero_stages", args.zero_stages, "stages must be among 0, 1, 2, 3")
    rec = tuple(args.recompute_options.split(","))
    if not rec or any(r not in RECOMPUTE_KINDS for r in rec):
        raise SpecError(
            "recompute_options",
            args.recompute_options,
            "must be a list of " + ", ".join(RECOMPUTE_KINDS),
        )
    return Policy(
        max_tp=positive_int("max_tp", args.max_tp) if args.max_tp else 0,
        zero_stages=zero,
        recompute=rec,
        allow_offload=args.allow_offload,
        allow_cp=not args.no_cp,
        hsdp=not args.no_hsdp,
        flash_attention=not args.no_flash_attention,
        max_micro_batch=positive_int("max_micro_batch", args.max_micro_batch),
        memory_headroom=fraction("memory_headroom", args.memory_headroom),
    )


def _prices(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    if args.prices is None:
        raise SpecError("--prices", None, "is required with --within-days (price per GPU-hour)")
    if "=" not in args.prices:
        price = money("prices", args.prices)
        return dict.fromkeys(names, price)
    out: dict[str, float] = {}
    for item in args.prices.split(","):
        name, _, value = item.partition("=")
        out[name.strip()] = money(f"prices[{name.strip()}]", value)
    missing = [n for n in names if n not in out]
    if missing:
        raise SpecError("--prices", args.prices, f"has no price for {', '.join(missing)}")
    return out


def run(args: argparse.Namespace) -> int:
    model = resolve_model(args.model, args.overrides)
    if not isinstance(model, ModelSpec):
        raise SpecError("--model", args.model, "the planner needs an architecture, not dense:N")
    seq_len = positive_int("seq_len", args.seq_len) if args.seq_len else model.max_seq_len
    fw = framework_from_args(args)
    run_search = functools.partial(
        search_fast,
        model,
        global_batch=positive_int("global_batch", args.global_batch),
        seq_len=seq_len,
        precision=get_precision(args.precision),
        optimizer=get_optimizer(args.optimizer),
        policy=policy_from_args(args),
        top=positive_int("top", args.top),
        causal=args.causal,
        framework=fw,
    )
    if args.within_days is not None:
        if args.calibration is not None:
            raise SpecError(
                "--calibration",
                args.calibration,
                "describes one GPU; it cannot be used with --within-days, which compares GPU types",
            )
        return _run_cheapest(args, run_search, fw)
    hardware = get_hardware(args.gpu)
    cluster = cluster_from_args(args, hardware, positive_int("gpus", args.gpus))
    result = run_search(cluster, efficiency=efficiency_from_args(args, hardware))
    tokens = nonnegative_float("tokens", args.tokens) if args.tokens else None
    reliability = None
    if result.plans and result.plans[0].fits:
        best = result.plans[0]
        reliability = reliability_json(
            args,
            n_gpus=cluster.n_gpus,
            checkpoint_bytes=checkpoint_bytes(
                model, precision=args.precision, optimizer=args.optimizer
            ),
            useful_seconds=tokens / best.time.tokens_per_second if tokens else None,
        )
    if args.json:
        print(dumps_json(_result_json(result, cluster, tokens, reliability, fw)))
    else:
        print("\n".join(_result_lines(result, cluster, tokens, reliability, fw)))
    return 0


def _result_json(result, cluster, tokens, reliability, fw: Framework) -> dict:
    plans = []
    for r in result.plans:
        j = plan_json(r, cluster)
        j["seconds_per_token"] = r.seconds_per_token
        if tokens is not None:
            j["time_days"] = tokens / r.time.tokens_per_second / SECONDS_PER_DAY
            j["gpu_hours"] = j["time_days"] * 24 * cluster.n_gpus
        plans.append(j)
    if result.plans:  # the best plan's range from the model's error on similar runs
        rng = range_json(result.plans[0], cluster.hardware.name, tokens)
        plans[0]["step_seconds_range"] = rng["step_seconds_range"]
        if tokens is not None:
            low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
            plans[0]["time_days_range"] = {"low": low, "high": high}
    return {
        "plans": plans,
        "evaluated": result.evaluated,
        "fitting": result.n_fitting,
        "search_seconds": result.search_seconds,
        "why": why_best(result),
        "reliability": reliability,
        "framework": fw.name,
        "assumptions": [fw.assumption()],
    }


def _result_lines(result, cluster, tokens, reliability, fw: Framework) -> list[str]:
    out = [
        f"{result.evaluated:,} layouts evaluated in {result.search_seconds:.2f} s; "
        f"{result.n_fitting:,} fit in {format_bytes(cluster.hardware.memory_bytes)}",
        f"{'#':>2} {'plan':<46} {'step s':>8} {'tokens/s':>12} {'MFU':>6} {'mem GB':>7} fits",
    ]
    for i, r in enumerate(result.plans, 1):
        out.append(
            f"{i:>2} {r.plan.describe():<46} {r.time.step_seconds:>8.3f} "
            f"{r.time.tokens_per_second:>12,.0f} {100 * r.time.mfu:>5.1f}% "
            f"{r.memory.total_bytes / GB:>7.1f} {'yes' if r.fits else 'NO'}"
        )
    if not result.plans:
        return out
    best = result.plans[0]
    out += ["", *plan_lines(best, cluster)]
    rng = range_json(best, cluster.hardware.name, tokens)
    out.append(range_line(rng))
    if tokens is not None:
        days = tokens / best.time.tokens_per_second / SECONDS_PER_DAY
        low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
        out.append(f"time         {days:.2f} days ({low:.2f}-{high:.2f}) for {tokens:.4g} tokens")
    out.append(f"why          {why_best(result)}")
    out.append(f"framework    {fw.assumption().removeprefix('framework: ')}")
    if reliability is not None:
        out.append(reliability_line(reliability))
    return out


def _run_cheapest(args: argparse.Namespace, run_search, fw: Framework) -> int:
    if args.tokens is None:
        raise SpecError("--tokens", None, "is required with --within-days")
    names = (args.gpu_options or args.gpu).split(",")
    counts = [positive_int("gpu_counts", c) for c in (args.gpu_counts or args.gpus).split(",")]
    prices = _prices(args, names)
    candidates = [
        Candidate(hardware=get_hardware(n), n_gpus=c, price_per_gpu_hour=prices[n])
        for n in names
        for c in counts
    ]
    quotes = cheapest(
        candidates,
        tokens=nonnegative_float("tokens", args.tokens),
        max_days=duration_days("within_days", args.within_days),
        search=run_search,
    )
    rows = [
        {
            "gpu": q.candidate.hardware.name,
            "gpus": q.candidate.n_gpus,
            "price_per_gpu_hour": q.candidate.price_per_gpu_hour,
            "plan": q.best.plan.describe() if q.best else None,
            "days": q.days if q.best else None,
            "cost": q.cost if q.best else None,
            "meets_deadline": q.meets_deadline,
        }
        for q in quotes
    ]
    if args.json:
        print(dumps_json({"quotes": rows, "best": rows[0], "framework": fw.name}))
        return 0
    print(f"{'gpu':<10} {'gpus':>6} {'days':>8} {'cost':>14}  plan")
    for r in rows:
        days = f"{r['days']:.1f}" if r["days"] is not None else "-"
        cost = f"{r['cost']:,.0f}" if r["cost"] is not None else "no fit"
        mark = "" if r["meets_deadline"] else "  (misses deadline)"
        print(f"{r['gpu']:<10} {r['gpus']:>6} {days:>8} {cost:>14}  {r['plan'] or '-'}{mark}")
    return 0
