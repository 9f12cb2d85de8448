"""`trainbudget estimate`'s answer, the one function both `trainbudget.estimate` and the CLI
command call: the options read, the kind of answer chosen (one GPU, --mfu, dense:N, a given
layout, or the planner's), its figures computed and its JSON built."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from trainbudget.api.answers.estimate_json import (
    ANSWERS,
    derivation_json,
    framework_assumption,
    layout_assumptions,
    to_json,
)
from trainbudget.api.answers.reliability import reliability_json
from trainbudget.api.answers.sensitivity import range_json, sensitivity
from trainbudget.api.inputs.assumed import take_assumptions
from trainbudget.api.inputs.choices import check_choices
from trainbudget.api.inputs.layout import (
    cluster_from_args,
    efficiency_from_args,
    plan_from_args,
    plan_json,
    wants_plan,
)
from trainbudget.api.inputs.model_input import resolve
from trainbudget.api.inputs.question import search_options_given, seq_len_from_args
from trainbudget.api.inputs.request import (
    explicit_options,
    headroom_from_args,
    request_from_args,
    rule_from_args,
)
from trainbudget.api.inputs.values import dumps_json, framework_from_args, positive_int
from trainbudget.api.returned.results import Estimate as Answer
from trainbudget.api.returned.results import plan_memory, single_memory
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan, validate_layout, validate_plan
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.single.estimate import Estimate, estimate
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import SECONDS_PER_DAY


def answer_estimate(args: argparse.Namespace) -> Answer:
    """The answer to the question `args` asks (the options as `trainbudget estimate` parses
    them; unstated assumptions are filled in place)."""
    check_choices(args)
    explicit = explicit_options(args)
    model = resolve(args.model, args.overrides)
    kind = answer_kind(args, model, positive_int("gpus", args.gpus))
    refuse_unused(args, kind)
    if kind == "planner":
        from trainbudget.api.answers.estimate_planned import answer_planner  # numpy and the search

        return answer_planner(args, explicit)
    unstated = take_assumptions(args)
    seq = seq_len_from_args(args, model) if isinstance(model, ModelSpec) else None
    e = estimate(request_from_args(args, seq.value if seq else None))
    fw = framework_from_args(args)
    planned = _plan_result(args, e, fw)
    rng = sens = None
    if planned is not None:
        ranked, _, run_plan = planned
        rng = range_json(ranked, e.request.hardware.name, e.request.tokens)
        sens = sensitivity(ranked, fw, unstated, run_plan)
    reliability = reliability_json(
        args,
        n_gpus=e.request.n_gpus,
        checkpoint_bytes=e.checkpoint_bytes,
        useful_seconds=_useful_seconds(e, planned),
    )
    ranked, cluster = (planned[0], planned[1]) if planned is not None else (None, None)
    out = _answer_json(args, kind, e, seq, fw, (ranked, cluster, rng, sens, reliability))
    rule = rule_from_args(args, fw.name)
    return Answer(
        kind=kind,
        single=e,
        plan=ranked.plan if ranked is not None else None,
        ranked=ranked,
        cluster=cluster,
        framework=fw,
        seq_len=seq,
        memory=(
            plan_memory(ranked, cluster, rule)
            if ranked is not None
            else single_memory(e, rule, out["memory_bytes"])
        ),
        step=ranked.time if ranked is not None else None,
        error_range=rng,
        sensitivity=sens,
        reliability=reliability,
        _json_text=dumps_json(out),
    )


def _answer_json(
    args: argparse.Namespace, kind: str, e: Estimate, seq, fw: Framework, parts: tuple
) -> dict:
    """`estimate --json`'s document: the one-GPU estimate's fields, then what the answer
    replaces or adds (a layout's plan, memory and time; dense:N's sharded model state; the
    failure block; the assumptions; the derivation with --explain)."""
    ranked, cluster, rng, sens, reliability = parts
    bare = _bare_plan_json(args, e, fw) if wants_plan(args) and ranked is None else None
    rule = rule_from_args(args, fw.name)
    out = to_json(e, rule)
    out["answer"] = {"kind": kind, "how": ANSWERS[kind]}
    if seq is not None:
        out["seq_len_source"] = seq.source
    if bare is not None:
        out.update(bare)
    if ranked is not None:
        _layout_json(out, e, (ranked, cluster, rng), rule, args.mfu is not None)
        out["sensitivity"] = sens
    if reliability is not None:
        out["reliability"] = reliability
    out["framework"] = fw.name
    fw_line = framework_assumption(fw, ranked is not None or bare is not None)
    if ranked is not None:
        out["assumptions"] = layout_assumptions(e, rule, fw_line, args.causal)
    else:
        out["assumptions"] = [*out["assumptions"], fw_line]
    if args.explain:
        out["derivation"] = derivation_json(e, ranked)
    return out


PlanRun = Callable[[Plan, Framework], RankedPlan]
"""A layout and framework -> its validated, evaluated plan (the other inputs fixed)."""


def _plan_result(
    args: argparse.Namespace, e: Estimate, fw: Framework
) -> tuple[RankedPlan, Cluster, PlanRun] | None:
    """The plan-aware evaluation when any plan option was given, else None."""
    if not wants_plan(args):
        return None
    from trainbudget.core.parallel.search.planner import evaluate  # a layout's models, on demand

    req = e.request
    if not isinstance(req.model, ModelSpec):
        return None  # a bare count gets model-state memory only: see _bare_plan_json
    model = req.model
    cluster = cluster_from_args(args, req.hardware, req.n_gpus)
    efficiency = efficiency_from_args(args, req.hardware)

    def run_plan(plan: Plan, framework: Framework) -> RankedPlan:
        validate_plan(plan, model, n_gpus=req.n_gpus, seq_len=e.seq_len)
        return evaluate(
            model,
            plan,
            cluster,
            seq_len=e.seq_len,
            precision=get_precision(req.precision),
            optimizer=get_optimizer(req.optimizer),
            efficiency=efficiency,
            causal=args.causal,
            count_causal=req.causal,
            framework=framework,
            headroom=headroom_from_args(args),
        )

    plan = plan_from_args(
        args, req.n_gpus, req.micro_batch, req.grad_accum, req.recompute, req.flash_attention
    )
    return run_plan(plan, fw), cluster, run_plan


def _bare_plan_json(args: argparse.Namespace, e: Estimate, fw: Framework) -> dict:
    """dense:N under a plan: ZeRO-sharded model state per GPU, weights split evenly over
    tp * pp (B-zero, seed 004). No activations or step time without an architecture."""
    req = e.request
    plan = plan_from_args(
        args, req.n_gpus, req.micro_batch, req.grad_accum, req.recompute, req.flash_attention
    )
    validate_layout(plan, n_gpus=req.n_gpus, seq_len=e.seq_len)
    from trainbudget.core.parallel.memory.parallel_memory import zero_model_state

    precision = get_precision(req.precision)
    state = zero_model_state(
        req.model.n_params / (plan.tp * plan.pp),
        shard=plan.shard_group,
        zero=plan.zero,
        precision=precision,
        optimizer=get_optimizer(req.optimizer),
        grad_bytes=fw.main_grad_bytes or precision.grad_bytes,
    )
    return {
        "plan": {
            "description": plan.describe(),
            "dp": plan.dp,
            "tp": plan.tp,
            "pp": plan.pp,
            "cp": plan.cp,
            "zero": plan.zero,
        },
        "memory_bytes": {
            "params": state.params_bytes,
            "grads": state.grads_bytes,
            "optimizer": state.optimizer_bytes,
            "activations": 0.0,
            "total": state.total_bytes,
        },
        "step_seconds": None,
        "assumptions": [
            *e.assumptions,
            "plan memory for dense:N is model state only (ZeRO over dp * cp, "
            "weights split evenly over tp * pp); no activations or step time "
            "without an architecture",
        ],
    }


def answer_kind(args: argparse.Namespace, model, n_gpus: int) -> str:
    """layout flags: that layout; --mfu: the back-of-envelope; several GPUs (or a global batch)
    and an architecture: the planner; else one GPU (or a bare count) at the default MFU."""
    if wants_plan(args):
        return "layout"
    if args.mfu is not None:
        return "mfu"
    if not isinstance(model, ModelSpec):
        return "bare" if n_gpus > 1 else "one-gpu"
    if n_gpus > 1 or args.global_batch is not None:
        return "planner"
    return "one-gpu"


def refuse_unused(args: argparse.Namespace, kind: str) -> None:
    """Options the chosen answer would ignore are errors, not silence."""
    no_tokens = args.tokens is None and args.epochs is None
    if kind == "layout" and args.mfu is not None and no_tokens:
        raise SpecError(
            "--mfu",
            args.mfu,
            "with a layout (--tp, --dp, ...) only adds a what-if time at this MFU, which needs "
            "--tokens; the layout's step is timed by its own model, not an assumed MFU",
        )
    given = search_options_given(args) if kind != "planner" else {}
    if given:
        option, value = next(iter(given.items()))
        raise SpecError(
            option,
            value,
            "bounds the layout search, which estimate runs only with --gpus > 1, an "
            "architecture and no layout flag (--tp, --dp, ...) or --mfu: here it would do nothing",
        )


def _useful_seconds(e: Estimate, planned: tuple[RankedPlan, Cluster] | None) -> float | None:
    """Failure-free training time: from the plan's predicted step when there is one."""
    if e.request.tokens is None:
        return None
    if planned is not None:
        return e.request.tokens / planned[0].time.tokens_per_second
    return e.time.seconds if e.time else None


def _layout_json(out: dict, e: Estimate, layout: tuple, rule, mfu_given: bool) -> None:
    """A layout's answer replaces the one-GPU time, memory and MFU; the MFU figure stays only
    as a labelled what-if when --mfu was given."""
    ranked, cluster, rng = layout
    one_gpu_time = {k: out.pop(k) for k in ("time_seconds", "time_days", "gpu_hours", "cost")}
    # the one-GPU memory figures give way to the plan's (one answer: core.parallel.memory.gpu_peak)
    out.pop("activations_breakdown", None)
    out.update(plan_json(ranked, cluster, rule))
    m = ranked.memory
    out.pop("memory_phases_bytes")  # given once, here
    out["memory_model"] = {
        "kind": "phase-peak",
        "peak_phase": m.phase,
        "peak_stage": m.stage,
        "phases_bytes": dict(m.phases_bytes),
    }
    out["fits_in_gpu_memory"] = ranked.fits
    out["step_seconds_range"] = rng["step_seconds_range"]
    tokens = e.request.tokens
    if tokens is not None:
        seconds = tokens / ranked.time.tokens_per_second
        out["time_seconds"] = seconds
        out["time_days"] = seconds / SECONDS_PER_DAY
        out["gpu_hours"] = seconds * e.request.n_gpus / 3600
        price = e.request.price_per_gpu_hour
        out["cost"] = out["gpu_hours"] * price if price is not None else None
        low, high = rng["time_seconds_range"].values()
        out["time_seconds_range"] = {"low": low, "high": high}
        out["time_days_range"] = {"low": low / SECONDS_PER_DAY, "high": high / SECONDS_PER_DAY}
    if mfu_given:
        out["what_if_mfu"] = {"mfu": e.request.mfu, **one_gpu_time}
