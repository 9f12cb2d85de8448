"""`trainbudget estimate` with GPUs and no layout: `plan`'s search for the same question, its
best plan the answer (days, layout and per-GPU memory equal to `plan`'s)."""

from __future__ import annotations

import argparse
import dataclasses

from trainbudget.api.answers.estimate_json import (
    ANSWERS,
    derivation_json,
    layout_assumptions,
    to_json,
)
from trainbudget.api.answers.plan_answer import best_json
from trainbudget.api.answers.reliability import reliability_json
from trainbudget.api.answers.sensitivity import sensitivity
from trainbudget.api.inputs.assumed import take_assumptions
from trainbudget.api.inputs.layout import efficiency_from_args
from trainbudget.api.inputs.model_input import resolve
from trainbudget.api.inputs.question import Search, inputs_json, search_from_args
from trainbudget.api.inputs.request import request_from_args
from trainbudget.api.inputs.values import dumps_json, framework_from_args
from trainbudget.api.returned.results import Estimate as Answer
from trainbudget.api.returned.results import plan_memory
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.planner import RankedPlan, evaluate, why_best
from trainbudget.core.single.estimate import Estimate, estimate
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import format_bytes


def _refuse_half_a_layout(args: argparse.Namespace, explicit: dict) -> None:
    if explicit["micro_batch"] is not None:
        raise SpecError(
            "--micro-batch",
            explicit["micro_batch"],
            "fixes part of a layout: give the layout too (--dp, --tp, ...), or leave the "
            "planner to choose it (--max-micro-batch bounds it)",
        )
    if args.grad_accum != "1":
        raise SpecError(
            "--grad-accum",
            args.grad_accum,
            "fixes part of a layout: give the layout too, or --global-batch for the planner",
        )


def answer_planner(args: argparse.Namespace, explicit: dict) -> Answer:
    """--gpus > 1 and no layout: `plan`'s search for the same question; its best plan is the
    answer (days, layout, per-GPU memory equal to `plan`'s). Refused when nothing fits; the
    model's counts are estimated at the best plan's settings."""
    _refuse_half_a_layout(args, explicit)
    unstated = take_assumptions(args)
    search_args = argparse.Namespace(**vars(args))
    search_args.recompute = explicit["recompute"]  # stated: the search tries only it
    model = resolve(args.model, args.overrides)
    fw = framework_from_args(args)
    req = request_from_args(args)
    found = search_from_args(search_args, model, req.hardware, req.n_gpus, fw, top=5)
    best = found.result.plans[0]
    if not best.fits:
        raise SpecError(
            "--gpus",
            req.n_gpus,
            f"no layout of {model.name} fits in {found.headroom_text()}: the least memory is "
            f"{format_bytes(best.memory.total_bytes)} per GPU ({best.plan.describe()}); add "
            "GPUs, allow offload (--allow-offload) or shorten --seq-len",
        )
    plan = best.plan
    e = estimate(
        dataclasses.replace(
            req,
            seq_len=found.seq_len.value,
            micro_batch=plan.micro_batch,
            grad_accum=plan.grad_accum,
            recompute=plan.recompute,
            flash_attention=plan.flash_attention,
        )
    )
    tokens = req.tokens
    reliability = reliability_json(
        args,
        n_gpus=req.n_gpus,
        checkpoint_bytes=e.checkpoint_bytes,
        useful_seconds=tokens / best.time.tokens_per_second if tokens is not None else None,
    )

    def run_plan(plan: Plan, framework: Framework) -> RankedPlan:
        return evaluate(
            model,
            plan,
            found.cluster,
            seq_len=found.seq_len.value,
            precision=get_precision(req.precision),
            optimizer=get_optimizer(req.optimizer),
            efficiency=efficiency_from_args(args, req.hardware),
            causal=args.causal,
            count_causal=req.causal,
            framework=framework,
            headroom=found.policy.memory_headroom,
        )

    sens = sensitivity(best, fw, tuple(u for u in unstated if u != "micro_batch"), run_plan)
    return _result(args, e, found, fw, reliability, sens)


def _planner_assumptions(found, e: Estimate, fw_line: str, causal: bool) -> list[str]:
    policy = found.policy
    searched = (
        "layouts searched: recomputation "
        + ", ".join(policy.recompute)
        + "; ZeRO "
        + ",".join(str(z) for z in policy.zero_stages)
        + ("; HSDP shard groups" if policy.hsdp else "")
        + ("; context parallelism" if policy.allow_cp else "")
        + f"; micro-batch up to {policy.max_micro_batch}"
    )
    return [
        f"sequence length {found.seq_len.value:,}: {found.seq_len.source}",
        f"global batch {found.global_batch.value:,}: {found.global_batch.source}",
        searched,
        *layout_assumptions(e, found.rule, fw_line, causal),
    ]


def _planner_json(e: Estimate, found, tokens: float | None) -> dict:
    """The model's counts, then `plan --json`'s best plan at the top level (equal fields); the
    one-GPU figures the answer does not use are left out."""
    plans = best_json(found, tokens)
    out = {k: v for k, v in to_json(e, found.rule).items() if k not in ONE_GPU_KEYS}
    out.update(
        {
            "answer": {"kind": "planner", "how": ANSWERS["planner"]},
            **inputs_json(found),
            **plans[0],
            "fits_in_gpu_memory": plans[0]["fits"],
            "evaluated": found.result.evaluated,
            "fitting": found.result.n_fitting,
            "why": why_best(found.result),
            "plans": plans,
        }
    )
    price = e.request.price_per_gpu_hour
    out["cost"] = out["gpu_hours"] * price if tokens is not None and price is not None else None
    return out


ONE_GPU_KEYS = frozenset(
    {
        "time_seconds",
        "time_days",
        "gpu_hours",
        "cost",
        "mfu",
        "memory_bytes",
        "memory_model",
        "activations_breakdown",
        "fits_in_gpu_memory",
        "tokens_per_step",
        "flops_per_step",
        "assumptions",
    }
)
"""to_json's fields of the one-GPU estimate, replaced by the plan's in a planned answer."""


def _result(
    args: argparse.Namespace,
    e: Estimate,
    found: Search,
    fw: Framework,
    reliability: dict | None,
    sens: list[dict],
) -> Answer:
    """The planner's answer and its JSON (`plan --json`'s best plan at the top level)."""
    best = found.result.plans[0]
    out = _planner_json(e, found, e.request.tokens)
    out["sensitivity"] = sens
    if reliability is not None:
        out["reliability"] = reliability
    out["framework"] = fw.name
    out["assumptions"] = _planner_assumptions(found, e, fw.assumption(), args.causal)
    if args.explain:
        out["derivation"] = derivation_json(e, best)
    return Answer(
        kind="planner",
        single=e,
        plan=best.plan,
        ranked=best,
        cluster=found.cluster,
        framework=fw,
        seq_len=found.seq_len,
        memory=plan_memory(best, found.cluster, found.rule),
        step=best.time,
        error_range={"step_seconds_range": out["step_seconds_range"]},
        sensitivity=sens,
        reliability=reliability,
        search=found,
        _json_text=dumps_json(out),
    )
