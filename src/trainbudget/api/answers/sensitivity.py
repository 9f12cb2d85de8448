"""How sure a plan's figures are, as the answers' JSON holds it: the range from the model's error
on similar published runs, and what each unstated assumption (micro-batch, recomputation,
FlashAttention, framework; the values assumed are inputs/assumed.py's) would change. The CLI
prints these blocks as lines (cli/plan/uncertainty_view.py); the API and the planner page return
them as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.plan_space import RankedPlan
from trainbudget.core.spec.frameworks import FRAMEWORKS, Framework, get_framework

RECOMPUTE_POLICIES = ("none", "selective", "full")


def range_json(r: RankedPlan, hardware_name: str, tokens: float | None = None) -> dict:
    """step_seconds_range (and the training time's, with tokens) for a plan's predicted step."""
    from trainbudget.uncertainty import HIGH_PERCENTILE, LOW_PERCENTILE, plan_error_range

    step = r.time.step_seconds
    e = plan_error_range(r.plan, hardware_name, r.time.data_parallel_share)
    out = {
        "step_seconds_range": {
            "low": step * e.low,
            "high": step * e.high,
            "low_factor": e.low,
            "high_factor": e.high,
            "runs": e.n_runs,
            "basis": e.basis,
            "method": f"{LOW_PERCENTILE:g}th-{HIGH_PERCENTILE:g}th percentile of measured / "
            "predicted step time, each run predicted with its source left out of the fit",
        }
    }
    if tokens is not None:
        seconds = tokens / r.time.tokens_per_second
        out["time_seconds_range"] = {"low": seconds * e.low, "high": seconds * e.high}
    return out


def _micro_batches(plan: Plan) -> list[tuple[int, int]]:
    """(micro_batch, grad_accum) halved and doubled, the global batch kept where it divides."""
    out = []
    global_batch = plan.micro_batch * plan.grad_accum
    for mb in (plan.micro_batch // 2, plan.micro_batch * 2):
        if mb < 1 or mb == plan.micro_batch:
            continue
        out.append((mb, global_batch // mb if global_batch % mb == 0 else plan.grad_accum))
    return out


def alternatives(
    plan: Plan, framework: Framework, unstated: tuple[str, ...]
) -> list[tuple[str, str, str, Plan, Framework]]:
    """(assumption, assumed, alternative, plan, framework) for each unstated assumption."""
    alt = []
    if "micro_batch" in unstated:
        for mb, accum in _micro_batches(plan):
            p = dataclasses.replace(plan, micro_batch=mb, grad_accum=accum)
            alt.append(("micro_batch", str(plan.micro_batch), str(mb), p, framework))
    if "recompute" in unstated:
        for policy in RECOMPUTE_POLICIES:
            if policy != plan.recompute:
                p = dataclasses.replace(plan, recompute=policy)
                alt.append(("recompute", plan.recompute, policy, p, framework))
    if "flash_attention" in unstated:
        flip = not plan.flash_attention
        p = dataclasses.replace(plan, flash_attention=flip)
        on_off = ("off", "on") if flip else ("on", "off")
        alt.append(("flash_attention", *on_off, p, framework))
    if "framework" in unstated:
        for name, row in FRAMEWORKS.items():
            if name != framework.name and not row.historical:
                alt.append(("framework", framework.name, name, plan, get_framework(name)))
    return alt


def sensitivity(
    base: RankedPlan,
    framework: Framework,
    unstated: tuple[str, ...],
    evaluate: Callable[[Plan, Framework], RankedPlan],
) -> list[dict]:
    """Each unstated assumption's alternative, evaluated; `time_change` compares time per token
    (a doubled micro-batch that cannot keep the global batch changes the tokens per step),
    `memory_change` the peak memory per GPU. An alternative the layout forbids is left out."""
    out = []
    for name, assumed, alternative, plan, fw in alternatives(base.plan, framework, unstated):
        try:
            r = evaluate(plan, fw)
        except SpecError:
            continue
        out.append(
            {
                "assumption": name,
                "assumed": assumed,
                "alternative": alternative,
                "step_seconds": r.time.step_seconds,
                "memory_bytes": r.memory.total_bytes,
                "fits": r.fits,
                "time_change": r.seconds_per_token / base.seconds_per_token - 1,
                "memory_change": r.memory.total_bytes / base.memory.total_bytes - 1,
            }
        )
    return out
