"""`trainbudget plan`'s answer, the one function both `trainbudget.plan` and the CLI command
call: every layout searched for one cluster, the fastest that fit ranked, and the JSON
`plan --json` prints."""

from __future__ import annotations

import argparse

from trainbudget.api.answers.reliability import reliability_json
from trainbudget.api.answers.sensitivity import range_json
from trainbudget.api.inputs.choices import check_choices
from trainbudget.api.inputs.layout import plan_json
from trainbudget.api.inputs.model_input import resolve
from trainbudget.api.inputs.question import Search, inputs_json, search_from_args
from trainbudget.api.inputs.values import dumps_json, framework_from_args, positive_int, token_count
from trainbudget.api.returned.results import PlanResult, Quotes
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.search.planner import why_best
from trainbudget.core.single.memory import checkpoint_bytes
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


def plan_question(args: argparse.Namespace) -> tuple[ModelSpec, Framework]:
    """The model and framework of a plan question, after the checks every plan run makes: an
    architecture (not dense:N), a known framework, no option this run would ignore."""
    check_choices(args)
    model = resolve(args.model, args.overrides)
    if not isinstance(model, ModelSpec):
        raise SpecError("--model", args.model, "the planner needs an architecture, not dense:N")
    fw = framework_from_args(args)
    _refuse_unused(args)
    return model, fw


def answer_plan_command(args: argparse.Namespace) -> PlanResult | Quotes:
    """What `trainbudget plan` answers: the ranked plans of one cluster, or, with
    --within-days, the quotes of every GPU type and count."""
    question = plan_question(args)
    if args.within_days is not None:
        from trainbudget.api.answers.cheapest import answer_cheapest  # the procurement search

        return answer_cheapest(args, *question)
    return answer_plan(args, question)


def answer_plan(
    args: argparse.Namespace, question: tuple[ModelSpec, Framework] | None = None
) -> PlanResult:
    """The ranked plans for one cluster (--gpu, --gpus): `question` is plan_question's answer
    when the caller has read it already."""
    model, fw = question if question is not None else plan_question(args)
    found = search_from_args(
        args,
        model,
        get_hardware(args.gpu),
        positive_int("gpus", args.gpus),
        fw,
        top=positive_int("top", args.top),
    )
    result, cluster = found.result, found.cluster
    tokens = token_count("tokens", args.tokens) if args.tokens else None
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
    return PlanResult(
        plans=result.plans,
        cluster=cluster,
        framework=fw,
        seq_len=found.seq_len,
        global_batch=found.global_batch,
        evaluated=result.evaluated,
        fitting=result.n_fitting,
        search=found,
        tokens=tokens,
        reliability=reliability,
        model=model,
        precision=args.precision,
        optimizer=args.optimizer,
        _json_text=dumps_json(_result_json(found, tokens, reliability, fw)),
    )


CHEAPEST_ONLY = ("gpu_options", "gpu_counts", "prices")
"""Options that only the cheapest-cluster search (--within-days) reads."""


def _refuse_unused(args: argparse.Namespace) -> None:
    """Options that this run would ignore are errors, not silence."""
    if args.emit_out is not None and args.emit is None:
        raise SpecError("--emit-out", args.emit_out, "is where --emit writes; give --emit ENGINE")
    if args.within_days is None:
        for name in CHEAPEST_ONLY:
            if getattr(args, name) is not None:
                raise SpecError(
                    f"--{name.replace('_', '-')}",
                    getattr(args, name),
                    "compares GPU types and counts for --within-days D (with --tokens); "
                    "without it plan searches one cluster (--gpu, --gpus)",
                )


def _result_json(found: Search, tokens, reliability, fw: Framework) -> dict:
    result = found.result
    return {
        **inputs_json(found),
        "plans": best_json(found, tokens),
        "evaluated": result.evaluated,
        "fitting": result.n_fitting,
        "search_seconds": result.search_seconds,
        "why": why_best(result),
        "reliability": reliability,
        "framework": fw.name,
        "assumptions": [fw.assumption()],
    }


def best_json(found: Search, tokens: float | None) -> list[dict]:
    """Each plan shown, the best first: the fields `plan --json` prints under "plans", which
    `estimate --json` prints for its answer (with the best plan's range, sensitivity.py's)."""

    result, cluster = found.result, found.cluster
    plans = []
    for r in result.plans:
        j = plan_json(r, cluster, found.rule)
        j["seconds_per_token"] = r.seconds_per_token
        if tokens is not None:
            j["time_seconds"] = tokens / r.time.tokens_per_second
            j["time_days"] = j["time_seconds"] / SECONDS_PER_DAY
            j["gpu_hours"] = j["time_seconds"] * cluster.n_gpus / SECONDS_PER_HOUR
        plans.append(j)
    if result.plans:  # the best plan's range from the model's error on similar runs
        rng = range_json(result.plans[0], cluster.hardware.name, tokens)
        plans[0]["step_seconds_range"] = rng["step_seconds_range"]
        if tokens is not None:
            low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
            plans[0]["time_days_range"] = {"low": low, "high": high}
    return plans
