"""`trainbudget plan`: search every layout, show the fastest that fit and why; or, with
--within-days, which GPU and how many finish the tokens at the least cost. The search's answer
is trainbudget.api's (api.plan_answer, which `trainbudget.plan` calls too)."""

from __future__ import annotations

import argparse
import functools

from trainbudget.api.plan_answer import answer_plan, plan_question
from trainbudget.api.question import Search
from trainbudget.cli.args import (
    add_causal_args,
    add_framework_arg,
    add_model_args,
    add_optimizer_arg,
    comma_list,
    dumps_json,
    duration_days,
    money,
    positive_int,
    refuse_repeats,
    token_count,
)
from trainbudget.cli.plan_emit import add_emit_args, run_emit
from trainbudget.cli.plan_view import add_cluster_args
from trainbudget.cli.question import (
    GLOBAL_BATCH_HELP,
    SEQ_LEN_HELP,
    add_policy_args,
    best_lines,
    global_batch_from_args,
    inputs_lines,
    policy_from_args,
    seq_len_from_args,
)
from trainbudget.cli.reliability_view import add_reliability_options, reliability_line
from trainbudget.core.errors import SpecError, lookup
from trainbudget.core.parallel.search.planner_fast import search_fast
from trainbudget.core.parallel.search.procurement import Candidate, cheapest
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.hardware import HARDWARE, get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import GB


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--gpus", required=True, help="GPUs in the cluster")
    p.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        help=f"accelerator (default {DEFAULT_GPU}; see `trainbudget hardware`)",
    )
    p.add_argument("--global-batch", help=GLOBAL_BATCH_HELP)
    p.add_argument("--seq-len", help=SEQ_LEN_HELP)
    p.add_argument("--tokens", help="training tokens: adds days and GPU-hours per plan")
    p.add_argument("--precision", default="bf16-mixed", help="precision policy")
    add_optimizer_arg(p)
    add_framework_arg(p)
    add_causal_args(p)
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
    add_emit_args(p)


def _prices(args: argparse.Namespace, names: list[str]) -> dict[str, float]:
    """A price per GPU option: one for all, or NAME=PRICE for each (names as --gpu-options
    spells them, case ignored); a missing, repeated or extra name is an error."""
    if args.prices is None:
        raise SpecError("--prices", None, "is required with --within-days (price per GPU-hour)")
    if "=" not in args.prices:
        price = money("prices", args.prices)
        return dict.fromkeys(names, price)
    items = [item.partition("=") for item in comma_list("prices", args.prices)]
    keys = [lookup("prices", name.strip(), HARDWARE).name for name, _, _ in items]
    refuse_repeats("prices", args.prices, keys)
    extra = [k for k in keys if k not in names]
    if extra:
        raise SpecError(
            "--prices",
            args.prices,
            f"prices {', '.join(extra)}, which is not among the GPU options ({', '.join(names)})",
        )
    out = {k: money(f"prices[{k}]", value) for k, (_, _, value) in zip(keys, items, strict=True)}
    missing = [n for n in names if n not in out]
    if missing:
        raise SpecError("--prices", args.prices, f"has no price for {', '.join(missing)}")
    return out


def run(args: argparse.Namespace) -> int:
    question = plan_question(args)
    if args.within_days is not None:
        return _run_cheapest_from_args(args, *question)
    answer = answer_plan(args, question)
    if args.emit is not None:
        model = question[0]
        return run_emit(args, answer.search.result, model, answer.seq_len.value, answer.tokens)
    if args.json:
        print(answer.json_text())
    else:
        print(
            "\n".join(
                _result_lines(answer.search, answer.tokens, answer.reliability, answer.framework)
            )
        )
    return 0


def _run_cheapest_from_args(args: argparse.Namespace, model: ModelSpec, fw: Framework) -> int:
    """--within-days: the cheapest GPU type and count that finish the tokens in time."""
    if args.calibration is not None:
        raise SpecError(
            "--calibration",
            args.calibration,
            "describes one GPU; it cannot be used with --within-days, which compares GPU types",
        )
    if args.emit is not None:
        raise SpecError("--emit", args.emit, "emits one plan; not with --within-days")
    seq_len = seq_len_from_args(args, model).value
    run_search = functools.partial(
        search_fast,
        model,
        global_batch=global_batch_from_args(args, seq_len).value,
        seq_len=seq_len,
        precision=get_precision(args.precision),
        optimizer=get_optimizer(args.optimizer),
        policy=policy_from_args(args),
        top=positive_int("top", args.top),
        causal=args.causal,
        count_causal=args.count_causal,
        framework=fw,
    )
    return _run_cheapest(args, run_search, fw)


def _result_lines(found: Search, tokens, reliability, fw: Framework) -> list[str]:
    result = found.result
    out = [
        *inputs_lines(found),
        f"{result.evaluated:,} layouts evaluated in {result.search_seconds:.2f} s; "
        f"{result.n_fitting:,} fit ({found.headroom_text()})",
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
    out += ["", *best_lines(found, tokens)]
    out.append(f"framework    {fw.assumption().removeprefix('framework: ')}")
    if reliability is not None:
        out.append(reliability_line(reliability))
    return out


def _run_cheapest(args: argparse.Namespace, run_search, fw: Framework) -> int:
    if args.tokens is None:
        raise SpecError("--tokens", None, "is required with --within-days")
    names_text = args.gpu if args.gpu_options is None else args.gpu_options
    names = [lookup("gpu_options", n, HARDWARE).name for n in comma_list("gpu_options", names_text)]
    refuse_repeats("gpu_options", names_text, names)
    counts_text = args.gpus if args.gpu_counts is None else args.gpu_counts
    counts = [positive_int("gpu_counts", c) for c in comma_list("gpu_counts", counts_text)]
    refuse_repeats("gpu_counts", counts_text, counts)
    prices = _prices(args, names)
    candidates = [
        Candidate(hardware=get_hardware(n), n_gpus=c, price_per_gpu_hour=prices[n])
        for n in names
        for c in counts
    ]
    quotes = cheapest(
        candidates,
        tokens=token_count("tokens", args.tokens),
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
