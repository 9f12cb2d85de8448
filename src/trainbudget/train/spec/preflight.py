"""Everything about a run that can be checked before torch is imported and before anything is
written: the model, the data folder, the probes file and the parallel plan, against the config.

Pure: reads the few small files the config names (meta.json, the plan JSON, the probes TSV),
imports no torch and no numpy. The CLI calls `preflight` first; the training loop calls it
again and uses `Preflight.config` (the plan applied) and `Preflight.spec`."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan, layout_problems
from trainbudget.core.parallel.reliability import mtbf_seconds
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.data.files import SPLITS, read_meta, split_file
from trainbudget.data.tokenizers import BYTE_VOCAB_SIZE
from trainbudget.train.spec.config import TrainConfig, config_fields
from trainbudget.train.spec.pipeline_split import CORE_SCHEDULES, stage_layer_counts
from trainbudget.train.spec.strategy import (
    check_strategy,
    check_tensor_parallel,
    strategy_for_plan,
)

TOKEN_BYTES = {"uint16": 2, "uint32": 4}  # the dtypes of data.files.token_dtype_name
PLAN_DECIDES = (
    "strategy",
    "zero_shard",
    "micro_batch",
    "grad_accum",
    "recompute",
    "tp",
    "sequence_parallel",
    "cp",
    "ep",
)
PLAN_DECIDES_PP = ("pp", "pp_schedule", "vpp", "pp_layers")  # pp's, when the plan has pp > 1
_PLAN_INTS = ("dp", "tp", "pp", "vpp", "cp", "ep", "zero", "micro_batch", "grad_accum")


@dataclass(frozen=True, kw_only=True)
class Preflight:
    config: TrainConfig
    """The run's config with the plan applied (micro_batch, grad_accum, strategy)."""
    spec: ModelSpec
    """The model, overrides applied."""
    data_meta: dict | None
    """meta.json of the prepared data folder; None for the embedded corpus (prepared later)."""
    vocab_size: int
    """Token ids in the data (the embedded corpus: the byte tokenizer's)."""
    plan: Plan | None
    """The layout from `config.plan` (its first plan); None without one."""
    probes: tuple[tuple[str, str], ...]
    """(prompt, target) pairs from `config.probes`."""
    world_size: int
    """Processes in the run."""


def preflight(
    cfg: TrainConfig, *, world_size: int | None = None, explicit: Collection[str] | None = None
) -> Preflight:
    """Check `cfg` against the files it names; SpecError naming the field on the first problem.

    world_size: processes (default: $WORLD_SIZE as torchrun sets it, else 1). explicit: the
    fields the user gave (file or flag), so that a plan conflicts only with values they chose;
    default: the fields that differ from TrainConfig's defaults."""
    world = world_size if world_size is not None else _env_world_size()
    _check_out(cfg.out)
    _check_auto_interval(cfg, world)
    plan = None
    if cfg.plan:
        plan = read_plan(cfg.plan, seq_len=cfg.seq_len)
        cfg = apply_plan(cfg, plan, world_size=world, explicit=explicit)
    check_strategy(
        cfg.strategy,
        zero_shard=cfg.zero_shard,
        world_size=world,
        precision=cfg.precision,
        tp=cfg.tp,
        pp=cfg.pp,
        cp=cfg.cp,
    )
    meta = read_data_meta(cfg.data) if cfg.data else None
    vocab_size = meta["vocab_size"] if meta else BYTE_VOCAB_SIZE
    spec = model_spec(cfg, vocab_size)
    check_tensor_parallel(spec, tp=cfg.tp)
    _check_expert_parallel(cfg, spec, world // (cfg.tp * cfg.pp))
    if cfg.pp > 1:
        _check_pipeline_model(cfg, spec)
    if meta:
        _check_windows(meta, cfg.seq_len)
    probes = read_probes(cfg.probes) if cfg.probes else ()
    return Preflight(
        config=cfg,
        spec=spec,
        data_meta=meta,
        vocab_size=vocab_size,
        plan=plan,
        probes=probes,
        world_size=world,
    )


def _check_out(out: str) -> None:
    """The run folder, or the nearest of its parents that exists, must be a folder: a file
    there would fail the first write (train.checkpointing.space probes the writing itself)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise SpecError("out", out, "is a file; the run needs a folder")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise SpecError("out", out, f"lies under {parent}, which is a file, not a folder")
            return


def _check_auto_interval(cfg: TrainConfig, world_size: int) -> None:
    """--checkpoint-minutes auto needs a finite MTBF: a failure rate so small that the job's
    MTBF overflows (1e-320 per day) would stop the run at its first timed save."""
    if cfg.checkpoint_minutes != "auto":
        return
    if not math.isfinite(mtbf_seconds(world_size, cfg.gpu_failure_rate_per_day)):
        raise SpecError(
            "gpu_failure_rate_per_day",
            cfg.gpu_failure_rate_per_day,
            f"gives an infinite MTBF for {world_size} process(es), so --checkpoint-minutes auto "
            "has no interval; give a larger rate or --checkpoint-minutes in minutes",
        )


def check_pipeline_processes(pp: object, world_size: int | None = None) -> None:
    """A pipeline runs one stage per process, so pp must divide the processes (default:
    $WORLD_SIZE). Checked before the config's pipeline rules, which would otherwise blame
    grad_accum for a run started without torchrun."""
    world = world_size if world_size is not None else _env_world_size()
    if isinstance(pp, int) and pp > 1 and world % pp:
        raise SpecError(
            "pp",
            pp,
            f"runs one pipeline stage per process and this run has {world} process(es); "
            f"launch it with torchrun --nproc-per-node {pp} -m trainbudget train ...",
        )


def _env_world_size() -> int:
    text = os.environ.get("WORLD_SIZE", "1")
    if not text.isdigit() or int(text) < 1:
        raise SpecError("WORLD_SIZE", text, "must be a positive integer (torchrun sets it)")
    return int(text)


def model_spec(cfg: TrainConfig, vocab_size: int) -> ModelSpec:
    """The model to train: an architecture (not dense:N) that covers the data's vocabulary and,
    with learned positions, the sequence length."""
    spec = resolve_model(cfg.model, cfg.overrides)
    if not isinstance(spec, ModelSpec):
        raise SpecError("model", cfg.model, "training needs an architecture, not dense:N")
    if any(item.split("=", 1)[0].strip() == "capacity_factor" for item in cfg.overrides):
        raise SpecError(
            "--set", "capacity_factor", "the trainer sets it from moe_capacity_factor; give that"
        )
    if spec.is_moe:  # the model and the predictions route with the run's capacity
        spec = spec.replace(capacity_factor=cfg.moe_capacity_factor)
    if spec.vocab_size < vocab_size:
        raise SpecError(
            "vocab_size",
            spec.vocab_size,
            f"is smaller than the data's tokenizer ({vocab_size} tokens)",
        )
    if spec.position == "learned" and cfg.seq_len > spec.max_seq_len:
        raise SpecError(
            "seq_len",
            cfg.seq_len,
            f"exceeds the model's max_seq_len ({spec.max_seq_len}, learned positions)",
        )
    return spec


def _check_expert_parallel(cfg: TrainConfig, spec: ModelSpec, world_size: int) -> None:
    """ep > 1 needs experts to split and data-parallel ranks to split them over (the core's
    rule, core/parallel/plan.py: ep divides n_experts and dp)."""
    if cfg.ep == 1:
        return
    if not spec.is_moe:
        raise SpecError("ep", cfg.ep, f"needs an MoE model; {spec.name} has no routed experts")
    if spec.n_experts % cfg.ep:
        raise SpecError("ep", cfg.ep, f"must divide n_experts ({spec.n_experts})")
    if world_size % cfg.ep:
        raise SpecError(
            "ep",
            cfg.ep,
            f"must divide the data-parallel processes ({world_size}); run it with torchrun "
            f"--nproc-per-node a multiple of {cfg.ep}",
        )


# ---- data -----------------------------------------------------------------------------------


def read_data_meta(data: str) -> dict:
    """meta.json of a prepared folder -- its keys and source ranges checked by `read_meta` --
    and its token files of the sizes it states."""
    meta = read_meta(data)  # a folder, a readable meta.json, its format, keys and ranges
    for split in SPLITS:
        path = Path(data) / split_file(split)
        count, dtype = meta["tokens"][split], meta["dtype"]
        if split == "val" and count == 0:
            continue  # an empty held-out split may have no file (val_fraction 0)
        if not path.is_file() or path.stat().st_size != count * TOKEN_BYTES[dtype]:
            raise SpecError("data", str(path), f"should hold {count} {dtype} tokens (re-prepare)")
    return meta


def _check_windows(meta: dict, seq_len: int) -> None:
    """Every source that is sampled (weight > 0) must hold one window of seq_len + 1 tokens
    (the input and its next-token targets), as the loader requires; and a source's held-out
    split, unless empty, one too: a shorter one would be scored on nothing, without a word
    (data.loader.eval_batches skips it)."""
    for s in meta["sources"]:
        start, end = s["ranges"]["train"]
        if s["weight"] > 0 and end - start < seq_len + 1:
            raise SpecError(
                "seq_len",
                seq_len,
                f"source {s.get('name')!r} has {end - start} train tokens; a window needs "
                "seq_len + 1 (lower seq_len or give it weight 0)",
            )
        start, end = s["ranges"]["val"]
        if 0 < end - start < seq_len + 1:
            raise SpecError(
                "seq_len",
                seq_len,
                f"the held-out split (val) of source {s.get('name')!r} has {end - start} "
                "tokens, shorter than one window of seq_len + 1, so it would evaluate to "
                "nothing; lower seq_len or prepare the data with a larger --val-fraction",
            )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_probes(path: str) -> tuple[tuple[str, str], ...]:
    """`prompt<TAB>target` lines (blank lines and '#' comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise SpecError("probes", path, f"cannot be read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError("probes", path, "is not UTF-8 text") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        if "\t" not in line:
            raise SpecError(f"probes:{number}", line, "expected prompt<TAB>target")
        prompt, target = line.split("\t", 1)
        pairs.append((prompt, target))
    return tuple(pairs)


# ---- plan -----------------------------------------------------------------------------------


def read_plan(path: str, *, seq_len: int | None = None) -> Plan:
    """The first (best) plan of a `trainbudget plan --json` file, checked by the core's layout
    rules; with `seq_len`, against the plan's own when the file records one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise SpecError("plan", path, f"cannot be read ({err.strerror})") from None
    except ValueError as err:
        raise SpecError("plan", path, f"is not valid JSON ({err})") from None
    except RecursionError:
        raise SpecError("plan", path, "is not a plan: JSON nested too deeply") from None
    hint = "; expected the output of `trainbudget plan --json`"
    if not isinstance(doc, dict) or not isinstance(doc.get("plans"), list):
        raise SpecError("plan", path, 'has no "plans" list' + hint)
    if not doc["plans"]:
        raise SpecError("plan", path, "has no plans (no layout fit the GPUs)")
    first = doc["plans"][0]
    layout = first.get("plan") if isinstance(first, dict) else None
    if not isinstance(layout, dict):
        raise SpecError("plan", path, 'plans[0] has no "plan" object' + hint)
    for key in (*_PLAN_INTS, "global_batch"):
        if key not in layout:
            raise SpecError("plan", path, f'plans[0].plan has no "{key}"' + hint)
        if not _is_count(layout[key]):
            raise SpecError(
                "plan", path, f"plans[0].plan.{key} ({layout[key]!r}) must be an integer >= 0"
            )
    if first.get("fits") is False:
        raise SpecError("plan", path, "its best plan does not fit in GPU memory (fits: false)")
    fields = {f.name for f in dataclasses.fields(Plan)}
    plan = Plan(**{k: v for k, v in layout.items() if k in fields})
    inputs = doc.get("inputs")
    planned = inputs.get("seq_len") if isinstance(inputs, dict) else None
    # the core's layout rules; the plan's own seq_len (unknown: one that cp divides) for cp's
    problems = layout_problems(
        plan,
        n_gpus=plan.n_gpus,
        seq_len=planned if _is_count(planned) else 2 * plan.cp,
        global_batch=layout["global_batch"],
    )
    if problems:
        raise SpecError("plan", path, "plans[0].plan: " + problems[0])
    if seq_len is not None and planned is not None and planned != seq_len:
        raise SpecError(
            "seq_len", seq_len, f"the plan {path} is for seq_len {planned}; use the same"
        )
    return plan


def apply_plan(
    cfg: TrainConfig, plan: Plan, *, world_size: int, explicit: Collection[str] | None = None
) -> TrainConfig:
    """`cfg` with the plan's micro-batching and strategy, after checking the trainer can run
    it: data, tensor, pipeline, context and expert parallel (the plan's tp and sp become tp and
    sequence_parallel, its cp cp), one process per GPU of the plan, no offload
    (train.spec.strategy: which strategy runs which ZeRO stage)."""
    for name in ("offload_optimizer", "offload_params"):
        if getattr(plan, name) != "none":
            raise SpecError(
                "plan",
                cfg.plan,
                f"the trainer does not offload; this plan has {name}={getattr(plan, name)}",
            )
    if plan.n_gpus != world_size:
        raise SpecError(
            "plan",
            cfg.plan,
            f"the plan is for dp({plan.dp}) * tp({plan.tp}) * pp({plan.pp}) * cp({plan.cp}) = "
            f"{plan.n_gpus} processes and this run has {world_size}; run it with "
            f"torchrun --nproc-per-node {plan.n_gpus}",
        )
    if plan.recompute_every != 1:
        raise SpecError(
            "plan",
            plan.describe(),
            "the trainer recomputes every layer or none; this plan recomputes one layer in "
            f"{plan.recompute_every} (recompute_every={plan.recompute_every})",
        )
    if plan.recompute not in ("none", "full"):
        raise SpecError(
            "plan",
            cfg.plan,
            f"the trainer recomputes none or full; this plan has recompute={plan.recompute} "
            "(plan with --recompute-options none,full)",
        )
    decided = {
        "strategy": _plan_strategy(cfg, plan),
        "zero_shard": plan.zero_shard,
        "micro_batch": plan.micro_batch,
        "grad_accum": plan.grad_accum,
        "recompute": plan.recompute,
        "tp": plan.tp,
        "sequence_parallel": plan.sp,
        "cp": plan.cp,
        "ep": plan.ep,
    }
    if plan.pp > 1:
        decided.update(
            pp=plan.pp,
            pp_schedule=CORE_SCHEDULES[plan.schedule],
            vpp=plan.vpp,
            pp_layers=",".join(map(str, plan.pp_layers)),
        )
    defaults = config_fields()
    for name, value in decided.items():
        given = (
            name in explicit
            if explicit is not None
            else (getattr(cfg, name) != defaults[name].default)
        )
        if given and getattr(cfg, name) != value:
            raise SpecError(
                name,
                getattr(cfg, name),
                f"conflicts with the plan ({plan.describe()}: {name} {value}); the plan decides "
                f"{', '.join(PLAN_DECIDES + PLAN_DECIDES_PP)}: leave {name} out or drop the "
                "plan",
            )
    return dataclasses.replace(cfg, **decided)


def _check_pipeline_model(cfg: TrainConfig, spec: ModelSpec) -> None:
    """pp > 1: the model splits into the stages asked for, and is one the stages can run."""
    stage_layer_counts(spec.n_layers, pp=cfg.pp, vpp=cfg.vpp, pp_layers=cfg.pp_layers)
    if spec.is_moe:
        raise SpecError(
            "pp",
            cfg.pp,
            f"the pipeline does not run MoE models yet ({spec.name}: its auxiliary losses are "
            "added outside the stages); use pp 1",
        )


def _plan_strategy(cfg: TrainConfig, plan: Plan) -> str:
    try:
        return strategy_for_plan(plan.zero, plan.zero_shard)
    except SpecError as err:
        raise SpecError("plan", cfg.plan, err.rule) from None
