"""What the page offers per ranked plan: the command line that asks for that one plan, and the
plan as a training engine's config file (the emitters of `trainbudget plan --emit`)."""

from __future__ import annotations

import shlex
from dataclasses import fields

from trainbudget.api.inputs.model_input import model_input, resolve
from trainbudget.api.returned.engine_config import engine_job
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.defaults import DEFAULT_OPTIMIZER, DEFAULT_PRECISION
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.emit.engines import emit
from trainbudget.emit.job import Emitted
from trainbudget.serve.answer import answer
from trainbudget.serve.question import Question

PASTED_NAME = "config.json"
"""The file a plan's command line names for a pasted config: the user saves it there."""

# plan field -> the estimate flag that fixes it; flags left at the plan's default are omitted
_FLAGS = (
    ("dp", "--dp"),
    ("tp", "--tp"),
    ("pp", "--pp"),
    ("vpp", "--vpp"),
    ("cp", "--cp"),
    ("ep", "--ep"),
    ("zero", "--zero"),
    ("zero_shard", "--zero-shard"),
    ("schedule", "--schedule"),
    ("micro_batch", "--micro-batch"),
    ("recompute", "--recompute"),
    ("recompute_every", "--recompute-every"),
    ("offload_optimizer", "--offload-optimizer"),
    ("offload_params", "--offload-params"),
)


def plan_of(document: dict, rank: int) -> dict:
    """The `plan` object of the rank-th ranked plan (0 = the best) of an estimate document."""
    plans = document.get("plans") or []
    if not 0 <= rank < len(plans):
        raise SpecError(
            "rank", rank, f"must be 0-{len(plans) - 1}: the answer has {len(plans)} ranked plans"
        )
    return plans[rank]["plan"]


def cli_command(question: Question, plan: dict) -> str:
    """`trainbudget estimate ...` with the page's inputs and every layout choice of `plan`
    fixed, so that the command evaluates that one layout rather than searching again."""
    model = PASTED_NAME if question.config.strip() else question.model
    argv = ["trainbudget", "estimate", "--model", model]
    for name, text in question.given().items():
        if name != "recompute":  # the plan's own recompute is fixed below
            argv += ["--" + name.replace("_", "-"), text]
    defaults = Plan()
    for field, flag in _FLAGS:
        if field in ("dp", "tp", "pp", "cp") or plan[field] != getattr(defaults, field):
            argv += [flag, str(plan[field])]
    argv += ["--global-batch", str(plan["global_batch"])]
    if plan["pp_layers"]:
        argv += ["--pp-layers", ",".join(str(n) for n in plan["pp_layers"])]
    if plan["sp"]:
        argv.append("--sp")
    if plan["embedding_in_pp_split"]:
        argv.append("--account-for-embedding")
    if plan["loss_in_pp_split"]:
        argv.append("--account-for-loss")
    if not plan["flash_attention"]:
        argv.append("--no-flash-attention")
    return shlex.join(argv)


def commands(question: Question) -> list[str]:
    """One command line per ranked plan of the question's answer, best first."""
    document = answer(question)
    return [cli_command(question, p["plan"]) for p in document.get("plans") or []]


def _plan(fields_json: dict) -> Plan:
    names = {f.name for f in fields(Plan)}
    values = {k: v for k, v in fields_json.items() if k in names}
    values["pp_layers"] = tuple(values.get("pp_layers") or ())
    return Plan(**values)


def _model(question: Question) -> ModelSpec:
    """The question's model as the API reads it (a pasted config named as the API names it)."""
    model = resolve(model_input(question.config_mapping() or question.model), ())
    if not isinstance(model, ModelSpec):
        raise SpecError(
            "model",
            question.model,
            "a bare parameter count has no architecture "
            "to write into an engine's config; choose a preset or paste a config",
        )
    return model


def engine_file(question: Question, rank: int, engine: str) -> Emitted:
    """The rank-th plan of the question's answer as `engine`'s config, or a SpecError naming
    what that engine cannot carry (as `trainbudget plan --emit` refuses it)."""
    document = answer(question)
    plan = plan_of(document, rank)
    if not document["plans"][rank]["fits"]:
        raise SpecError("rank", rank, "that plan does not fit in memory: nothing to emit")
    job = engine_job(  # the job `plan --emit` and trainbudget.emit build
        _model(question),
        _plan(plan),
        seq_len=int(document["seq_len"]),
        tokens=document.get("tokens"),
        precision=question.precision or DEFAULT_PRECISION,
        optimizer=DEFAULT_OPTIMIZER,
    )
    return emit(engine, job)
