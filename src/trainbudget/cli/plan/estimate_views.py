"""`trainbudget estimate`'s text views of an answer: its summary lines and its derivation
(--explain). The JSON, the derivation's steps and the assumptions are trainbudget.api's."""

from __future__ import annotations

from trainbudget.api.answers.estimate_json import derivation
from trainbudget.core.parallel.fits import FitsRule, verdict_text
from trainbudget.core.parallel.fits import fits as fits_rule
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.single.estimate import BARE_MODEL_SEQ_LEN, Estimate, flops_formula_used
from trainbudget.core.single.memory import rule_of_thumb_6gb
from trainbudget.core.units import format_bytes, format_count, format_flops


def summary(e: Estimate, seq, rule: FitsRule) -> str:
    req, m = e.request, e.memory
    lines = head_lines(e, seq)
    if e.time is not None:
        t = e.time
        lines.append(
            f"time         {t.days:.2f} days ({t.seconds:.5g} s) on {t.n_gpus} x "
            f"{req.hardware.name} at MFU {t.mfu} (assumed); {t.gpu_hours:,.0f} GPU-hours"
            + (f"; cost {t.cost:,.0f}" if t.cost is not None else "")
        )
    temporaries = f"+ temporaries {format_bytes(m.temporaries_bytes)} " if m.peak_phase else ""
    how = f"peak at {m.peak_phase}" if m.peak_phase else "sum of parts"
    capacity = req.hardware.usable_memory_bytes
    verdict = bool(fits_rule(m.total_bytes, capacity, rule))
    fits = verdict_text(verdict, capacity, rule, 0)
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


def explain(e: Estimate, assumptions: list[str], plan: RankedPlan | None = None) -> str:
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


def head_lines(e: Estimate, seq) -> list[str]:
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
