"""`trainbudget estimate`: one training run, as JSON, a summary, or the full derivation."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from trainbudget.cli.args import (
    add_framework_arg,
    add_model_args,
    add_training_args,
    dumps_json,
    framework_from_args,
    positive_int,
)
from trainbudget.cli.estimate_request import (
    explicit_options,
    headroom_from_args,
    request_from_args,
)
from trainbudget.cli.estimate_views import (
    ANSWERS,
    derivation_json,
    explain,
    framework_assumption,
    head_lines,
    layout_assumptions,
    summary,
    to_json,
)
from trainbudget.cli.plan_view import (
    add_plan_args,
    cluster_from_args,
    efficiency_from_args,
    plan_from_args,
    plan_json,
    plan_lines,
    wants_plan,
)
from trainbudget.cli.question import (
    add_policy_args,
    search_options_given,
    seq_len_from_args,
)
from trainbudget.cli.reliability_view import (
    add_reliability_options,
    reliability_json,
    reliability_line,
)
from trainbudget.cli.uncertainty_view import (
    leave_unstated,
    range_json,
    range_line,
    sensitivity,
    sensitivity_line,
    take_assumptions,
)
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan, validate_layout, validate_plan
from trainbudget.core.parallel.plan_space import RankedPlan
from trainbudget.core.single.estimate import (
    DEFAULT_MFU,
    FLOPS_FORMULAS,
    Estimate,
    estimate,
)
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
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
        choices=FLOPS_FORMULAS,
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


PlanRun = Callable[[Plan, Framework], RankedPlan]
"""A layout and framework -> its validated, evaluated plan (the other inputs fixed)."""


def _plan_result(
    args: argparse.Namespace, e: Estimate, fw: Framework
) -> tuple[RankedPlan, Cluster, PlanRun] | None:
    """The plan-aware evaluation when any plan option was given, else None."""
    if not wants_plan(args):
        return None
    from trainbudget.core.parallel.planner import evaluate  # a layout's models, on demand

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
    from trainbudget.core.parallel.parallel_memory import zero_model_state

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


def run(args: argparse.Namespace) -> int:
    explicit = explicit_options(args)
    model = resolve_model(args.model, args.overrides)
    kind = answer_kind(args, model, positive_int("gpus", args.gpus))
    refuse_unused(args, kind)
    if kind == "planner":
        from trainbudget.cli.estimate_planned import run_planner  # numpy and the search

        return run_planner(args, explicit)
    unstated = take_assumptions(args)
    seq = seq_len_from_args(args, model) if isinstance(model, ModelSpec) else None
    e = estimate(request_from_args(args, seq.value if seq else None))
    fw = framework_from_args(args)
    planned = _plan_result(args, e, fw)
    if planned is not None:
        ranked, _, run_plan = planned
        rng = range_json(ranked, e.request.hardware.name, e.request.tokens)
        sens = sensitivity(ranked, fw, unstated, run_plan)
    bare = _bare_plan_json(args, e, fw) if wants_plan(args) and planned is None else None
    fw_line = framework_assumption(fw, planned is not None or bare is not None)
    reliability = reliability_json(
        args,
        n_gpus=e.request.n_gpus,
        checkpoint_bytes=e.checkpoint_bytes,
        useful_seconds=_useful_seconds(e, planned),
    )
    if args.json:
        out = to_json(e, headroom_from_args(args))
        out["answer"] = {"kind": kind, "how": ANSWERS[kind]}
        if seq is not None:
            out["seq_len_source"] = seq.source
        if bare is not None:
            out.update(bare)
        if planned is not None:
            ranked, cluster, _ = planned
            _layout_json(out, e, ranked, cluster, rng, args)
            out["sensitivity"] = sens
        if reliability is not None:
            out["reliability"] = reliability
        out["framework"] = fw.name
        if planned is not None:
            headroom = headroom_from_args(args)
            out["assumptions"] = layout_assumptions(e, headroom, fw_line, args.causal)
        else:
            out["assumptions"] = [*out["assumptions"], fw_line]
        if args.explain:
            out["derivation"] = derivation_json(e, planned[0] if planned is not None else None)
        print(dumps_json(out))
        return 0
    print(f"answer       {ANSWERS[kind]}")
    if planned is not None:
        print("\n".join(_layout_lines(e, planned, rng, sens, seq, args)))
    else:
        print(summary(e, seq, headroom_from_args(args)))
    print(f"framework    {fw.assumption().removeprefix('framework: ')}")
    if bare is not None:
        mem = bare["memory_bytes"]
        print(
            f"\nplan         {bare['plan']['description']} (model state only: dense:N has no "
            "architecture)"
        )
        print(
            f"memory/GPU   weights {format_bytes(mem['params'])} + grads "
            f"{format_bytes(mem['grads'])} + optimizer {format_bytes(mem['optimizer'])} = "
            f"{format_bytes(mem['total'])}"
        )
    if reliability is not None:
        print(reliability_line(reliability))
    if args.explain:
        print()
        if planned is None:
            print(explain(e, [*e.assumptions, fw_line]))
        else:
            assumed = layout_assumptions(e, headroom_from_args(args), fw_line, args.causal)
            print(explain(e, assumed, planned[0]))
    return 0


def _layout_json(out: dict, e: Estimate, ranked, cluster, rng: dict, args) -> None:
    """A layout's answer replaces the one-GPU time, memory and MFU; the MFU figure stays only
    as a labelled what-if when --mfu was given."""
    one_gpu_time = {k: out.pop(k) for k in ("time_seconds", "time_days", "gpu_hours", "cost")}
    # the one-GPU memory figures give way to the plan's (one answer: core.parallel.gpu_peak)
    out.pop("activations_breakdown", None)
    out.update(plan_json(ranked, cluster, headroom_from_args(args)))
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
    if args.mfu is not None:
        out["what_if_mfu"] = {"mfu": e.request.mfu, **one_gpu_time}


def _layout_lines(e: Estimate, planned, rng: dict, sens, seq, args) -> list[str]:
    ranked, cluster, _ = planned
    out = head_lines(e, seq)
    out += plan_lines(ranked, cluster, headroom_from_args(args))
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
