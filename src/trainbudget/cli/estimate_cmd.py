"""`trainbudget estimate`: one training run, as JSON, a summary, or the full derivation."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from trainbudget.cli.args import (
    add_framework_arg,
    add_model_args,
    add_training_args,
    dumps_json,
    fraction,
    framework_from_args,
    money,
    nonnegative_float,
    positive_int,
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
from trainbudget.core.parallel.parallel_memory import zero_model_state
from trainbudget.core.parallel.plan import Plan, validate_layout, validate_plan
from trainbudget.core.parallel.planner import RankedPlan, evaluate
from trainbudget.core.single.estimate import (
    DEFAULT_MFU,
    FLOPS_FORMULAS,
    Estimate,
    EstimateRequest,
    estimate,
    flops_formula_used,
)
from trainbudget.core.single.flops import (
    hidden_state_bytes,
    inference_flops_per_token,
    kv_cache_bytes,
)
from trainbudget.core.single.memory import rule_of_thumb_6gb
from trainbudget.core.single.training_time import tokens_from_epochs
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.units import SECONDS_PER_DAY, format_bytes, format_count, format_flops


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--tokens", help="training tokens, e.g. 15T or 300e9 (or use --epochs)")
    p.add_argument("--epochs", help="with --samples and --mean-length: tokens = E x S x L")
    p.add_argument("--samples", help="number of training samples (documents)")
    p.add_argument("--mean-length", help="mean tokens per sample")
    p.add_argument("--gpus", default="1", help="number of GPUs (default 1)")
    p.add_argument("--gpu", default="h100-sxm", help="accelerator (see `trainbudget hardware`)")
    p.add_argument(
        "--mfu",
        default=str(DEFAULT_MFU),
        help=f"model FLOPs utilisation, 0-1 (default {DEFAULT_MFU}: Llama 3 405B "
        "reached 0.38-0.43)",
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
    add_reliability_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--explain", action="store_true", help="print each formula, inputs and result")
    leave_unstated(p)


def _tokens(args: argparse.Namespace) -> float | None:
    epoch_args = (args.epochs, args.samples, args.mean_length)
    if args.tokens is not None:
        if any(a is not None for a in epoch_args):
            raise SpecError(
                "--tokens",
                args.tokens,
                "give either --tokens or --epochs/--samples/--mean-length, not both",
            )
        return nonnegative_float("tokens", args.tokens)
    if all(a is None for a in epoch_args):
        return None
    if any(a is None for a in epoch_args):
        raise SpecError(
            "--epochs", args.epochs, "--epochs, --samples and --mean-length must be given together"
        )
    return tokens_from_epochs(
        epochs=nonnegative_float("epochs", args.epochs),
        n_samples=nonnegative_float("samples", args.samples),
        mean_tokens_per_sample=nonnegative_float("mean_length", args.mean_length),
    )


def request_from_args(args: argparse.Namespace) -> EstimateRequest:
    take_assumptions(args)
    price = None
    if args.price_per_gpu_hour is not None:
        price = money("price_per_gpu_hour", args.price_per_gpu_hour)
    return EstimateRequest(
        model=resolve_model(args.model, args.overrides),
        hardware=get_hardware(args.gpu),
        tokens=_tokens(args),
        n_gpus=positive_int("gpus", args.gpus),
        mfu=fraction("mfu", args.mfu),
        precision=get_precision(args.precision).name,
        optimizer=args.optimizer,
        seq_len=positive_int("seq_len", args.seq_len) if args.seq_len else None,
        micro_batch=positive_int("micro_batch", args.micro_batch),
        grad_accum=positive_int("grad_accum", args.grad_accum),
        recompute=args.recompute,
        flash_attention=args.flash_attention,
        causal=args.causal,
        flops_formula=args.flops_formula,
        price_per_gpu_hour=price,
    )


def to_json(e: Estimate) -> dict:
    req, f, m = e.request, e.flops, e.memory
    fwd = f.forward_per_sequence
    out: dict = {
        "model": req.model.name,
        "params": e.n_params,
        "params_breakdown": e.params.as_dict() if e.params else {},
        "active_params": e.active_params,
        "seq_len": e.seq_len,
        "flops_formula": flops_formula_used(req),
        "flops_per_token": e.flops_per_token,
        "flops_per_token_detail": {
            "exact_model": f.model_flops_per_token,
            "hardware": f.hardware_flops_per_token,
            "recompute": f.recompute_flops_per_token,
            "approx_6n": f.approx_6n_per_token,
            "palm": f.palm_per_token,
            "causal": f.causal,
        },
        "forward_flops_breakdown": ({**fwd.as_dict(), "total": fwd.total} if fwd else {}),
        "train_flops": e.train_flops,
        "tokens_per_step": e.tokens_per_step,
        "flops_per_step": e.flops_per_step,
        "tokens": req.tokens,
        "gpus": req.n_gpus,
        "gpu": req.hardware.name,
        "mfu": req.mfu,
        "time_seconds": e.time.seconds if e.time else None,
        "time_days": e.time.days if e.time else None,
        "gpu_hours": e.time.gpu_hours if e.time else None,
        "cost": e.time.cost if e.time else None,
        "memory_bytes": {
            "params": m.params_bytes,
            "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes,
            "master_weights": m.master_bytes,
            "optimizer_state": m.optimizer_state_bytes,
            "activations": m.activations_bytes,
            "temporaries": m.temporaries_bytes,
            "total": m.total_bytes,
        },
        "memory_model": _memory_model_json(e),
        "activations_breakdown": _activations_json(e),
        "fits_in_gpu_memory": m.total_bytes <= req.hardware.memory_bytes,
        "gpu_memory_bytes": req.hardware.memory_bytes,
        "checkpoint_bytes": e.checkpoint_bytes,
        "inference": _inference_json(e),
        "assumptions": list(e.assumptions),
    }
    return out


def _memory_model_json(e: Estimate) -> dict:
    """Which model gave memory_bytes: the phase model's peak (its parts those alive at
    peak_phase) or the sum of parts (peak_phase null); the one-GPU figure, whatever a plan
    puts in memory_bytes."""
    m = e.memory
    return {
        "kind": "phase-peak" if m.peak_phase else "sum-of-parts",
        "peak_phase": m.peak_phase,
        "phases_bytes": dict(m.phases_bytes),
    }


def _activations_json(e: Estimate) -> dict:
    a = e.memory.activations
    if a is None:
        return {}
    return {
        "per_layer": a.per_layer.total_bytes,
        "layers": a.layers_bytes,
        "head": a.head_bytes,
        "logits_and_loss": a.logits_bytes,
        "recompute": a.recompute,
    }


def _inference_json(e: Estimate) -> dict:
    model = e.request.model
    out = {
        "flops_per_token_2n": 2 * e.active_params,
        "flops_per_token": inference_flops_per_token(model, e.seq_len - 1),
    }
    if isinstance(model, ModelSpec):
        weight_bytes = get_precision(e.request.precision).weight_bytes
        tokens = e.request.micro_batch * e.seq_len
        out["kv_cache_bytes_per_token"] = kv_cache_bytes(model, 1, weight_bytes)
        out["kv_cache_bytes"] = kv_cache_bytes(model, tokens, weight_bytes)
        out["hidden_state_bytes"] = hidden_state_bytes(model, tokens, weight_bytes)
    return out


def _summary(e: Estimate) -> str:
    req, m = e.request, e.memory
    lines = [
        f"model        {req.model.name}: {e.n_params:,} parameters "
        f"({format_count(e.n_params)})"
        + (f", {format_count(e.active_params)} active" if e.active_params != e.n_params else "")
    ]
    lines.append(
        f"FLOPs/token  {e.flops_per_token:,.0f} ({flops_formula_used(req)}; 6N = "
        f"{e.flops.approx_6n_per_token:,.0f})"
    )
    if e.time is not None:
        t = e.time
        lines.append(
            f"train FLOPs  {e.train_flops:.4g} ({format_flops(e.train_flops)}) for "
            f"{req.tokens:.4g} tokens"
        )
        lines.append(
            f"time         {t.days:.2f} days ({t.seconds:.5g} s) on {t.n_gpus} x "
            f"{req.hardware.name} at MFU {t.mfu}; {t.gpu_hours:,.0f} GPU-hours"
            + (f"; cost {t.cost:,.0f}" if t.cost is not None else "")
        )
    temporaries = f"+ temporaries {format_bytes(m.temporaries_bytes)} " if m.peak_phase else ""
    how = f"peak at {m.peak_phase}" if m.peak_phase else "sum of parts"
    fits = "fits" if m.total_bytes <= req.hardware.memory_bytes else "does NOT fit"
    fits += f" in {format_bytes(req.hardware.memory_bytes)}"
    lines.append(
        f"memory/GPU   weights {format_bytes(m.params_bytes)} + grads "
        f"{format_bytes(m.grads_bytes)} + optimizer {format_bytes(m.optimizer_bytes)} "
        f"+ activations {format_bytes(m.activations_bytes)} {temporaries}= "
        f"{format_bytes(m.total_bytes)} ({how}; {fits})"
    )
    lines.append(f"checkpoint   {format_bytes(e.checkpoint_bytes)}")
    return "\n".join(lines)


def _explain(e: Estimate, fw_line: str) -> str:
    width = max(len(s.quantity) for s in e.steps)
    out = ["Derivation:"]
    out += [f"  {s.quantity:<{width}} = {s.formula}\n  {'':<{width}} = {s.value}" for s in e.steps]
    rule = rule_of_thumb_6gb(e.memory, e.n_params)
    out.append(
        f"\nRule of thumb '6 GB per 1B parameters at 16-bit' (seed 004): "
        f"{format_bytes(rule.rule_bytes)} vs {format_bytes(rule.ours_bytes)} here.\n"
        f"  It covers {rule.covers};\n  it leaves out {rule.leaves_out}."
    )
    out.append("\nAssumptions:")
    out += [f"  - {a}" for a in (*e.assumptions, fw_line)]
    return "\n".join(out)


def _framework_assumption(fw: Framework, planned: bool) -> str:
    """The framework changes the plan-aware memory and step time only: the one-GPU estimate has
    no data-parallel reduction and keeps the precision's gradient bytes."""
    if planned:
        return fw.assumption()
    return fw.assumption() + "; used by the plan-aware memory and step time (a plan option)"


PlanRun = Callable[[Plan, Framework], RankedPlan]
"""A layout and framework -> its validated, evaluated plan (the other inputs fixed)."""


def _plan_result(
    args: argparse.Namespace, e: Estimate, fw: Framework
) -> tuple[RankedPlan, Cluster, PlanRun] | None:
    """The plan-aware evaluation when any plan option was given, else None."""
    if not wants_plan(args):
        return None
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
            causal=req.causal,
            framework=framework,
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


def _useful_seconds(e: Estimate, planned: tuple[RankedPlan, Cluster] | None) -> float | None:
    """Failure-free training time: from the plan's predicted step when there is one."""
    if e.request.tokens is None:
        return None
    if planned is not None:
        return e.request.tokens / planned[0].time.tokens_per_second
    return e.time.seconds if e.time else None


def run(args: argparse.Namespace) -> int:
    if args.json and args.explain:  # refused, not silently dropped: the derivation is text only
        raise SpecError("--explain", None, "prints text; it cannot go with --json (drop one)")
    unstated = take_assumptions(args)
    e = estimate(request_from_args(args))
    fw = framework_from_args(args)
    planned = _plan_result(args, e, fw)
    if planned is not None:
        ranked, _, run_plan = planned
        rng = range_json(ranked, e.request.hardware.name, e.request.tokens)
        sens = sensitivity(ranked, fw, unstated, run_plan)
    bare = _bare_plan_json(args, e, fw) if wants_plan(args) and planned is None else None
    fw_line = _framework_assumption(fw, planned is not None or bare is not None)
    reliability = reliability_json(
        args,
        n_gpus=e.request.n_gpus,
        checkpoint_bytes=e.checkpoint_bytes,
        useful_seconds=_useful_seconds(e, planned),
    )
    if args.json:
        out = to_json(e)
        if bare is not None:
            out.update(bare)
        if planned is not None:
            ranked, cluster, _ = planned
            out.update(plan_json(ranked, cluster))
            out["step_seconds_range"] = rng["step_seconds_range"]
            if e.request.tokens is not None:
                steps = e.request.tokens / ranked.time.tokens_per_step
                out["plan_time_seconds"] = steps * ranked.time.step_seconds
                out["plan_time_days"] = out["plan_time_seconds"] / SECONDS_PER_DAY
                low, high = rng["time_seconds_range"].values()
                out["plan_time_seconds_range"] = {"low": low, "high": high}
                out["plan_time_days_range"] = {
                    "low": low / SECONDS_PER_DAY,
                    "high": high / SECONDS_PER_DAY,
                }
            out["sensitivity"] = sens
        if reliability is not None:
            out["reliability"] = reliability
        out["framework"] = fw.name
        out["assumptions"] = [*out["assumptions"], fw_line]
        print(dumps_json(out))
        return 0
    summary = _summary(e)
    if planned is not None:
        summary = summary.replace("memory/GPU  ", "memory (1 GPU, no parallelism)\n            ")
    print(summary)
    print(f"framework    {fw.name}")
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
    if planned is not None:
        ranked, cluster, _ = planned
        print()
        print("\n".join(plan_lines(ranked, cluster)))
        print(range_line(rng))
        if e.request.tokens is not None:
            days = e.request.tokens / ranked.time.tokens_per_second / SECONDS_PER_DAY
            low, high = (t / SECONDS_PER_DAY for t in rng["time_seconds_range"].values())
            print(
                f"plan time    {days:.2f} days ({low:.2f}-{high:.2f}) for "
                f"{e.request.tokens:.4g} tokens at the predicted step time"
            )
        line = sensitivity_line(sens)
        if line is not None:
            print(line)
    if reliability is not None:
        print(reliability_line(reliability))
    if args.explain:
        print()
        print(_explain(e, fw_line))
    return 0
