"""`trainbudget estimate`: one training run, as JSON, a summary, or the full derivation."""

from __future__ import annotations

import argparse
import dataclasses
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
    fits_text,
    plan_from_args,
    plan_json,
    plan_lines,
    wants_plan,
)
from trainbudget.cli.question import (
    add_policy_args,
    best_json,
    best_lines,
    inputs_json,
    inputs_lines,
    search_from_args,
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
from trainbudget.core.parallel.parallel_memory import zero_model_state
from trainbudget.core.parallel.plan import Plan, validate_layout, validate_plan
from trainbudget.core.parallel.plan_explain import plan_steps
from trainbudget.core.parallel.planner import RankedPlan, evaluate, why_best
from trainbudget.core.single.estimate import (
    BARE_MODEL_SEQ_LEN,
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
from trainbudget.core.spec.defaults import DEFAULT_MEMORY_HEADROOM
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
    p.add_argument(
        "--gpus",
        default="1",
        help="number of GPUs (default 1); more than one and no layout: the planner picks the "
        "fastest layout that fits, as `trainbudget plan` does",
    )
    p.add_argument("--gpu", default="h100-sxm", help="accelerator (see `trainbudget hardware`)")
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


def request_from_args(args: argparse.Namespace, seq_len: int | None = None) -> EstimateRequest:
    take_assumptions(args)
    if seq_len is None and args.seq_len:
        seq_len = positive_int("seq_len", args.seq_len)
    price = None
    if args.price_per_gpu_hour is not None:
        price = money("price_per_gpu_hour", args.price_per_gpu_hour)
    return EstimateRequest(
        model=resolve_model(args.model, args.overrides),
        hardware=get_hardware(args.gpu),
        tokens=_tokens(args),
        n_gpus=positive_int("gpus", args.gpus),
        mfu=fraction("mfu", args.mfu) if args.mfu is not None else DEFAULT_MFU,
        precision=get_precision(args.precision).name,
        optimizer=args.optimizer,
        seq_len=seq_len,
        micro_batch=positive_int("micro_batch", args.micro_batch),
        grad_accum=positive_int("grad_accum", args.grad_accum),
        recompute=args.recompute,
        flash_attention=args.flash_attention,
        causal=args.causal,
        flops_formula=args.flops_formula,
        price_per_gpu_hour=price,
    )


def to_json(e: Estimate, headroom: float = DEFAULT_MEMORY_HEADROOM) -> dict:
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
        "fits_in_gpu_memory": m.total_bytes <= headroom * req.hardware.memory_bytes,
        "gpu_memory_bytes": req.hardware.memory_bytes,
        "memory_headroom": headroom,
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


def _summary(e: Estimate, seq, headroom: float) -> str:
    req, m = e.request, e.memory
    lines = _head_lines(e, seq)
    if e.time is not None:
        t = e.time
        lines.append(
            f"time         {t.days:.2f} days ({t.seconds:.5g} s) on {t.n_gpus} x "
            f"{req.hardware.name} at MFU {t.mfu} (assumed); {t.gpu_hours:,.0f} GPU-hours"
            + (f"; cost {t.cost:,.0f}" if t.cost is not None else "")
        )
    temporaries = f"+ temporaries {format_bytes(m.temporaries_bytes)} " if m.peak_phase else ""
    how = f"peak at {m.peak_phase}" if m.peak_phase else "sum of parts"
    fits = fits_text(
        m.total_bytes <= headroom * req.hardware.memory_bytes, req.hardware.memory_bytes, headroom
    )
    label = (
        "memory/GPU  " if req.n_gpus == 1 else "memory (1 GPU holding the whole model)\n" + " " * 12
    )
    lines.append(
        f"{label} weights {format_bytes(m.params_bytes)} + grads "
        f"{format_bytes(m.grads_bytes)} + optimizer {format_bytes(m.optimizer_bytes)} "
        f"+ activations {format_bytes(m.activations_bytes)} {temporaries}= "
        f"{format_bytes(m.total_bytes)} ({how}; {fits})"
    )
    lines.append(f"checkpoint   {format_bytes(e.checkpoint_bytes)}")
    return "\n".join(lines)


def _explain(e: Estimate, assumptions: list[str], plan: RankedPlan | None = None) -> str:
    """The derivation: the one-GPU estimate's, or with a plan the model's counts then the plan's
    step, MFU, communication and memory (no one-GPU figure the answer does not use)."""
    steps = derivation(e, plan)
    width = max(len(s.quantity) for s in steps)
    out = ["Derivation:" if plan is None else f"Derivation (plan {plan.plan.describe()}):"]
    out += [f"  {s.quantity:<{width}} = {s.formula}\n  {'':<{width}} = {s.value}" for s in steps]
    if plan is None:
        rule = rule_of_thumb_6gb(e.memory, e.n_params)
        out.append(
            f"\nRule of thumb '6 GB per 1B parameters at 16-bit' (seed 004): "
            f"{format_bytes(rule.rule_bytes)} vs {format_bytes(rule.ours_bytes)} here.\n"
            f"  It covers {rule.covers};\n  it leaves out {rule.leaves_out}."
        )
    out.append("\nAssumptions:")
    out += [f"  - {a}" for a in assumptions]
    return "\n".join(out)


def derivation(e: Estimate, plan: RankedPlan | None = None) -> list:
    """The steps --explain prints (and --explain --json carries): the one-GPU estimate's, or
    the model's counts then the plan's."""
    if plan is None:
        return list(e.steps)
    return [*_model_steps(e), *plan_steps(plan, e.seq_len, e.request.tokens)]


def _derivation_json(e: Estimate, plan: RankedPlan | None = None) -> list[dict]:
    return [dataclasses.asdict(s) for s in derivation(e, plan)]


MODEL_STEPS = ("params N", "active params", "forward FLOPs", "training FLOPs", "PaLM", "6N")
"""The one-GPU derivation's lines that hold for any layout (a plan's replace the rest)."""


def _model_steps(e: Estimate) -> list:
    return [s for s in e.steps if s.quantity.startswith(MODEL_STEPS)]


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
            headroom=_headroom(args),
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


ANSWERS = {
    "planner": "the planner's fastest layout that fits, as `trainbudget plan` ranks it (a layout "
    "flag such as --tp evaluates one layout; --mfu gives the 6ND back-of-envelope)",
    "layout": "the layout given, timed by the step model (its MFU predicted, not assumed)",
    "mfu": "back-of-envelope: training FLOPs / (GPUs x peak x the --mfu given); memory for one "
    "GPU holding the whole model (no layout: --gpus N without --mfu plans one)",
    "one-gpu": f"one GPU at an assumed MFU of {DEFAULT_MFU} (--mfu to change; --gpus N plans a "
    "layout)",
    "bare": f"dense:N has no architecture, so no layout can be planned: time at MFU "
    f"{DEFAULT_MFU} (--mfu), memory for one GPU holding the whole model (a layout flag gives "
    "its sharded model state)",
}
"""How estimate answers, by what it was given; printed on its `answer` line."""


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


def _explicit(args: argparse.Namespace) -> dict:
    """The options the user gave, read before take_assumptions fills the unstated ones."""
    return {k: getattr(args, k) for k in ("recompute", "micro_batch")}


def _useful_seconds(e: Estimate, planned: tuple[RankedPlan, Cluster] | None) -> float | None:
    """Failure-free training time: from the plan's predicted step when there is one."""
    if e.request.tokens is None:
        return None
    if planned is not None:
        return e.request.tokens / planned[0].time.tokens_per_second
    return e.time.seconds if e.time else None


def run(args: argparse.Namespace) -> int:
    explicit = _explicit(args)
    model = resolve_model(args.model, args.overrides)
    kind = answer_kind(args, model, positive_int("gpus", args.gpus))
    if kind == "planner":
        return _run_planner(args, explicit)
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
    fw_line = _framework_assumption(fw, planned is not None or bare is not None)
    reliability = reliability_json(
        args,
        n_gpus=e.request.n_gpus,
        checkpoint_bytes=e.checkpoint_bytes,
        useful_seconds=_useful_seconds(e, planned),
    )
    if args.json:
        out = to_json(e, _headroom(args))
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
            out["assumptions"] = _layout_assumptions(e, _headroom(args), fw_line)
        else:
            out["assumptions"] = [*out["assumptions"], fw_line]
        if args.explain:
            out["derivation"] = _derivation_json(e, planned[0] if planned is not None else None)
        print(dumps_json(out))
        return 0
    print(f"answer       {ANSWERS[kind]}")
    if planned is not None:
        print("\n".join(_layout_lines(e, planned, rng, sens, seq, args)))
    else:
        print(_summary(e, seq, _headroom(args)))
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
    if reliability is not None:
        print(reliability_line(reliability))
    if args.explain:
        print()
        if planned is None:
            print(_explain(e, [*e.assumptions, fw_line]))
        else:
            print(_explain(e, _layout_assumptions(e, _headroom(args), fw_line), planned[0]))
    return 0


def _layout_json(out: dict, e: Estimate, ranked, cluster, rng: dict, args) -> None:
    """A layout's answer replaces the one-GPU time, memory and MFU; the MFU figure stays only
    as a labelled what-if when --mfu was given."""
    one_gpu_time = {k: out.pop(k) for k in ("time_seconds", "time_days", "gpu_hours", "cost")}
    out.update(plan_json(ranked, cluster, _headroom(args)))
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


def _headroom(args: argparse.Namespace) -> float:
    return fraction("memory_headroom", args.memory_headroom)


def _layout_lines(e: Estimate, planned, rng: dict, sens, seq, args) -> list[str]:
    ranked, cluster, _ = planned
    out = _head_lines(e, seq)
    out += plan_lines(ranked, cluster, _headroom(args))
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


def _head_lines(e: Estimate, seq) -> list[str]:
    """model, seq len, FLOPs/token and training FLOPs: what every answer starts with."""
    req = e.request
    lines = [
        f"model        {req.model.name}: {e.n_params:,} parameters "
        f"({format_count(e.n_params)})"
        + (f", {format_count(e.active_params)} active" if e.active_params != e.n_params else "")
    ]
    source = seq.source if seq is not None else f"dense:N: GPT-3's {BARE_MODEL_SEQ_LEN}"
    lines.append(f"seq len      {e.seq_len:,} tokens ({source})")
    lines.append(
        f"FLOPs/token  {e.flops_per_token:,.0f} ({flops_formula_used(req)}; 6N = "
        f"{e.flops.approx_6n_per_token:,.0f})"
    )
    if req.tokens is not None:
        lines.append(
            f"train FLOPs  {e.train_flops:.4g} ({format_flops(e.train_flops)}) for "
            f"{req.tokens:.4g} tokens"
        )
    return lines


def _run_planner(args: argparse.Namespace, explicit: dict) -> int:
    """--gpus > 1 and no layout: `plan`'s search for the same question; its best plan is the
    answer (days, layout, per-GPU memory equal to `plan`'s)."""
    for name in ("micro_batch",):
        if explicit[name] is not None:
            raise SpecError(
                f"--{name.replace('_', '-')}",
                explicit[name],
                "fixes part of a layout: give the layout too (--dp, --tp, ...), or leave the "
                "planner to choose it (--max-micro-batch bounds it)",
            )
    if args.grad_accum != "1":
        raise SpecError(
            "--grad-accum",
            args.grad_accum,
            "fixes part of a layout: give the layout too, or --global-batch for the planner",
        )
    unstated = take_assumptions(args)
    search_args = argparse.Namespace(**vars(args))
    search_args.recompute = explicit["recompute"]  # stated: the search tries only it
    model = resolve_model(args.model, args.overrides)
    fw = framework_from_args(args)
    req = request_from_args(args)
    found = search_from_args(search_args, model, req.hardware, req.n_gpus, fw, top=5)
    if not found.result.plans[0].fits:
        raise SpecError(
            "--gpus",
            req.n_gpus,
            f"no layout of {model.name} fits in {found.headroom_text()}: the least memory is "
            f"{format_bytes(found.result.plans[0].memory.total_bytes)} per GPU "
            f"({found.result.plans[0].plan.describe()}); add GPUs, allow offload "
            "(--allow-offload) or shorten --seq-len",
        )
    best = found.result.plans[0]
    e = estimate(
        dataclasses.replace(
            req,
            seq_len=found.seq_len.value,
            micro_batch=best.plan.micro_batch,
            grad_accum=best.plan.grad_accum,
            recompute=best.plan.recompute,
            flash_attention=best.plan.flash_attention,
        )
    )
    fw_line = fw.assumption()
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
            causal=req.causal,
            framework=framework,
            headroom=found.policy.memory_headroom,
        )

    sens = sensitivity(best, fw, tuple(u for u in unstated if u != "micro_batch"), run_plan)
    if args.json:
        out = _planner_json(e, found, tokens)
        out["sensitivity"] = sens
        if reliability is not None:
            out["reliability"] = reliability
        out["framework"] = fw.name
        out["assumptions"] = _planner_assumptions(found, e, fw_line)
        if args.explain:
            out["derivation"] = _derivation_json(e, best)
        print(dumps_json(out))
        return 0
    print(f"answer       {ANSWERS['planner']}")
    print("\n".join(_head_lines(e, found.seq_len)[:1]))
    print("\n".join(inputs_lines(found)))
    print("\n".join(_head_lines(e, found.seq_len)[2:]))
    result = found.result
    print(
        f"searched     {result.evaluated:,} layouts evaluated in {result.search_seconds:.2f} s; "
        f"{result.n_fitting:,} fit ({found.headroom_text()})"
    )
    print("\n".join(best_lines(found, tokens)))
    line = sensitivity_line(sens)
    if line is not None:
        print(line)
    print(f"checkpoint   {format_bytes(e.checkpoint_bytes)}")
    print(f"framework    {fw.assumption().removeprefix('framework: ')}")
    if reliability is not None:
        print(reliability_line(reliability))
    if args.explain:
        print()
        print(_explain(e, _planner_assumptions(found, e, fw_line), best))
    return 0


def _planner_assumptions(found, e: Estimate, fw_line: str) -> list[str]:
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
        *_layout_assumptions(e, policy.memory_headroom, fw_line),
    ]


def _layout_assumptions(e: Estimate, headroom: float, fw_line: str) -> list[str]:
    """What a plan's answer assumes: the FLOPs conventions, precision, kernels, the fits rule."""
    req = e.request
    return [
        *e.assumptions[:2],  # the FLOPs conventions of the model's counts
        f"precision {req.precision}, optimizer {req.optimizer} (--precision, --optimizer)",
        "FlashAttention "
        + ("on (--no-flash-attention stores the s x s matrix)" if req.flash_attention else "off"),
        ("causal" if req.causal else "non-causal")
        + " attention in the step time (--causal skips the masked tiles)",
        f"a plan fits when its peak is at most {100 * headroom:g} % of "
        f"{format_bytes(req.hardware.memory_bytes)} (--memory-headroom)",
        "step time and memory per GPU from core.parallel (step_time, parallel_memory): "
        "its error on published runs is the range line's",
        fw_line,
    ]


def _planner_json(e: Estimate, found, tokens: float | None) -> dict:
    """The model's counts, then `plan --json`'s best plan at the top level (equal fields); the
    one-GPU figures the answer does not use are left out."""
    plans = best_json(found, tokens)
    out = {k: v for k, v in to_json(e).items() if k not in ONE_GPU_KEYS}
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
