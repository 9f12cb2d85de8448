"""`trainbudget plan`: search every layout, show the fastest that fit and why; or, with
--within-days, which GPU and how many finish the tokens at the least cost. Both answers are
trainbudget.api's (api.answers.plan_answer, api.answers.cheapest: what `trainbudget.plan`
returns)."""

from __future__ import annotations

import argparse

from trainbudget.api.answers.plan_answer import answer_plan_command
from trainbudget.api.inputs.question import Search
from trainbudget.api.returned.results import Quotes
from trainbudget.cli.args import (
    add_causal_args,
    add_framework_arg,
    add_model_args,
    add_optimizer_arg,
)
from trainbudget.cli.plan.plan_emit import add_emit_args, run_emit
from trainbudget.cli.plan.plan_view import add_cluster_args
from trainbudget.cli.plan.question import (
    GLOBAL_BATCH_HELP,
    SEQ_LEN_HELP,
    add_policy_args,
    best_lines,
    inputs_lines,
)
from trainbudget.cli.tools.reliability_view import add_reliability_options, reliability_line
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.spec.frameworks import Framework
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
    add_optimizer_arg(p, parser_checks=False)
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


def run(args: argparse.Namespace) -> int:
    answer = answer_plan_command(args)
    if isinstance(answer, Quotes):
        return _print_quotes(args, answer)
    if args.emit is not None:
        return run_emit(args, answer)
    if args.json:
        print(answer.json_text())
    else:
        print(
            "\n".join(
                _result_lines(answer.search, answer.tokens, answer.reliability, answer.framework)
            )
        )
    return 0


def _print_quotes(args: argparse.Namespace, answer: Quotes) -> int:
    """--within-days: the quotes table, cheapest first (its JSON: the API's document)."""
    if args.json:
        print(answer.json_text())
        return 0
    print(f"{'gpu':<10} {'gpus':>6} {'days':>8} {'cost':>14}  plan")
    for r in answer.quotes:
        days = f"{r['days']:.1f}" if r["days"] is not None else "-"
        cost = f"{r['cost']:,.0f}" if r["cost"] is not None else "no fit"
        mark = "" if r["meets_deadline"] else "  (misses deadline)"
        print(f"{r['gpu']:<10} {r['gpus']:>6} {days:>8} {cost:>14}  {r['plan'] or '-'}{mark}")
    return 0


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
