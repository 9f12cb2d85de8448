"""`trainbudget estimate`: one training run, as JSON, a summary, or the full derivation. The
answer is trainbudget.api's (api.answers.estimate_answer, which `trainbudget.estimate` calls
too); this module reads the options and prints."""

from __future__ import annotations

import argparse

from trainbudget.api.answers.estimate_answer import answer_estimate
from trainbudget.api.answers.estimate_json import ANSWERS
from trainbudget.api.answers.estimate_json import to_json as to_json  # tests read one-GPU JSON
from trainbudget.api.inputs.request import request_from_args as request_from_args
from trainbudget.api.returned.results import Estimate as Answer
from trainbudget.cli.args import (
    add_framework_arg,
    add_model_args,
    add_training_args,
)
from trainbudget.cli.plan.estimate_views import explain, head_lines, summary
from trainbudget.cli.plan.plan_view import add_plan_args, plan_lines
from trainbudget.cli.plan.question import add_policy_args
from trainbudget.cli.plan.uncertainty_view import leave_unstated, range_line, sensitivity_line
from trainbudget.cli.tools.reliability_view import add_reliability_options, reliability_line
from trainbudget.core.single.estimate import DEFAULT_MFU, FLOPS_FORMULAS
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.units import SECONDS_PER_DAY, format_bytes


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--tokens", help="training tokens, e.g. 15T or 300e9 (or use --epochs)")
    p.add_argument("--epochs", help="with --samples and --mean-length: tokens = E x S x L")
    p.add_argument("--samples", help="number of training samples (documents)")
    p.add_argument("--mean-length", help="mean tokens per sample")
    p.add_argument(
        "--gpus",
        default="1",
        help="number of GPUs (default 1); more than one and no layout: the planner picks the "
        "fastest layout that fits, as `trainbudget plan` does",
    )
    p.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        help=f"accelerator (default {DEFAULT_GPU}; see `trainbudget hardware`)",
    )
    p.add_argument(
        "--mfu",
        help="model FLOPs utilisation, 0-1: the 6ND back-of-envelope at this MFU instead of the "
        f"planner's answer (one GPU, or dense:N, assume {DEFAULT_MFU}: Llama 3 405B reached "
        "0.38-0.43)",
    )
    p.add_argument("--price-per-gpu-hour", help="price of one GPU-hour, for the cost")
    p.add_argument(
        "--grad-accum",
        default="1",
        help="micro-batches per optimizer step per GPU (default 1); a step is "
        "micro-batch x grad-accum x gpus sequences",
    )
    p.add_argument(
        "--flops-formula",
        default="exact",
        metavar="{" + ",".join(FLOPS_FORMULAS) + "}",  # checked by api.inputs.choices
        help="exact per-part count (default), 6n, or palm (6N + 12LHQT)",
    )
    add_training_args(p)
    add_framework_arg(p)
    add_plan_args(p)
    add_policy_args(
        p.add_argument_group("layout search (--gpus > 1 and no layout: as in `trainbudget plan`)"),
        flash=False,
        recompute=False,
    )
    add_reliability_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print each formula, inputs and result (with --json: a 'derivation' list)",
    )
    leave_unstated(p)


def run(args: argparse.Namespace) -> int:
    answer = answer_estimate(args)
    if args.json:
        print(answer.json_text())
        return 0
    if answer.kind == "planner":
        from trainbudget.cli.plan.estimate_planned import planner_lines

        print("\n".join(planner_lines(answer, args.explain)))
        return 0
    e = answer.single
    print(f"answer       {ANSWERS[answer.kind]}")
    if answer.ranked is not None:
        print("\n".join(_layout_lines(answer, args)))
    else:
        print(summary(e, answer.seq_len, answer.memory.rule))
    print(f"framework    {answer.framework.assumption().removeprefix('framework: ')}")
    if answer.plan is None and "plan" in (doc := answer.to_json()):
        _bare_lines(doc)
    if answer.reliability is not None:
        print(reliability_line(answer.reliability))
    if args.explain:
        print()
        print(explain(e, answer.to_json()["assumptions"], answer.ranked))
    return 0


def _bare_lines(doc: dict) -> None:
    """dense:N under a layout: its sharded model state (no architecture, no activations)."""
    mem = doc["memory_bytes"]
    print(
        f"\nplan         {doc['plan']['description']} (model state only: dense:N has no "
        "architecture)"
    )
    print(
        f"memory/GPU   weights {format_bytes(mem['params'])} + grads "
        f"{format_bytes(mem['grads'])} + optimizer {format_bytes(mem['optimizer'])} = "
        f"{format_bytes(mem['total'])}"
    )


def _layout_lines(answer: Answer, args: argparse.Namespace) -> list[str]:
    e, ranked, cluster = answer.single, answer.ranked, answer.cluster
    rng, sens = answer.error_range, answer.sensitivity
    out = head_lines(e, answer.seq_len)
    out += plan_lines(ranked, cluster, answer.memory.rule)
    out.append(range_line(rng))
    tokens = e.request.tokens
    if tokens is not None:
        seconds = tokens / ranked.time.tokens_per_second
        low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
        price = e.request.price_per_gpu_hour
        gpu_hours = seconds * e.request.n_gpus / 3600
        out.append(
            f"time         {seconds / SECONDS_PER_DAY:.2f} days ({low:.2f}-{high:.2f}) for "
            f"{tokens:.4g} tokens; {gpu_hours:,.0f} GPU-hours"
            + (f"; cost {gpu_hours * price:,.0f}" if price is not None else "")
        )
    line = sensitivity_line(sens)
    if line is not None:
        out.append(line)
    if args.mfu is not None and e.time is not None:
        out.append(
            f"what-if      at an assumed MFU {e.request.mfu} instead of the predicted "
            f"{100 * ranked.time.mfu:.1f} %: {e.time.days:.2f} days"
        )
    out.append(f"checkpoint   {format_bytes(e.checkpoint_bytes)}")
    return out
