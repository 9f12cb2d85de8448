"""What a training run is: one frozen dataclass, from a settings file (TOML or JSON, read as data,
never executed) and/or command-line flags, validated in one place. Defaults train a small model
on the embedded corpus on a CPU in a few minutes.

Rules that need a file (the model, the data folder, a plan, probes) are `preflight.preflight`'s."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.precision import (
    OPTIMIZERS,
    TRAINABLE_OPTIMIZERS,
    get_trainable_optimizer,
)
from trainbudget.train.spec.pipeline_split import PP_SCHEDULES, check_schedule, parse_pp_layers
from trainbudget.train.spec.strategy import STRATEGIES

SCHEDULES = ("cosine", "linear", "constant", "wsd")
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "amp-bf16", "amp-fp16")
DEVICES = ("auto", "cpu", "cuda")
CHOICES = {
    "optimizer": TRAINABLE_OPTIMIZERS,  # the core's table: the rows the trainer has a factory for
    "schedule": SCHEDULES,
    "precision": PRECISIONS,
    "device": DEVICES,
    "strategy": STRATEGIES,
    "recompute": ("none", "full"),
    "on_nonfinite": ("skip", "halt"),
    "pp_schedule": PP_SCHEDULES,
}
MOE_WEIGHTS = ("moe_capacity_factor", "moe_balance_loss_coef", "moe_z_loss_coef")
EP_REFUSED = {
    "zero1": "ZeroRedundancyOptimizer would shard the experts as if every rank held them all",
    "hsdp": "the expert groups are laid out on the one data-parallel axis, not HSDP's two",
}
SEED_LIMIT = 2**32  # numpy's generators take seeds in [0, 2**32)
CONFIG_SUFFIXES = (".toml", ".json")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: str = "gpt2"
    """A preset (`trainbudget models`) or a Hugging Face config.json; changed by overrides."""
    overrides: tuple[str, ...] = (
        "n_layers=4",
        "d_model=128",
        "n_heads=4",
        "d_ff=512",
        "vocab_size=257",
        "max_seq_len=256",
    )
    """`field=value` changes to the model. The default makes gpt2 a 1M-parameter byte-level GPT;
    a settings file or flags that name a model and no overrides get none. On the command line,
    each --set changes one field of those (the default's, the file's, or --model's)."""
    data: str = ""
    """A directory from `trainbudget data prepare`; empty: the embedded corpus, prepared once
    into <out>/data with the byte tokenizer."""
    out: str = "runs/default"
    """The run's folder: config, metrics, checkpoints, summary."""
    steps: int = 300
    """Optimizer steps in the whole run."""
    micro_batch: int = 16
    """Sequences per forward/backward pass on each process."""
    grad_accum: int = 1
    """Micro-batches whose gradients are summed before each optimizer step."""
    seq_len: int = 128
    """Tokens per training sequence."""
    lr: float = 3e-3
    """Peak learning rate (after warmup)."""
    min_lr_ratio: float = 0.1
    """The final learning rate as a fraction of lr, in [0, 1]."""
    warmup_steps: int = -1
    """Steps of linear warmup, 0 to steps (-1: a tenth of the steps)."""
    schedule: str = "cosine"
    """The learning-rate decay after warmup."""
    optimizer: str = "adamw"
    """The update rule."""
    weight_decay: float = 0.1
    """Decoupled weight decay (AdamW) or L2 penalty, >= 0."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""
    precision: str = "fp32"
    """Weights and compute: fp32; bf16-mixed (bf16 weights, fp32 master copy); bf16; amp-*
    (fp32 weights, 16-bit matmuls under autocast)."""
    device: str = "auto"
    """auto: a GPU when one is usable, else the CPU."""
    recompute: str = "none"
    """Activation recomputation: none, or full (each block's forward again in backward)."""
    compile: bool = False
    """torch.compile the model."""
    memory_check: bool = True
    """Before building the model, refuse a run whose predicted peak memory per process exceeds
    what the device has free (CPU: MemAvailable, shared by the run's processes; GPU: free
    memory), naming a setting that fits; --no-memory-check starts anyway."""
    seed: int = 1337
    """Seeds Python, numpy and torch and the data order, in [0, 2**32)."""
    log_interval: int = 10
    """Log (and measure) every N steps, and the last step."""
    eval_interval: int = 100
    """Evaluate on the held-out split every N steps (a multiple of log_interval), and at the
    end."""
    eval_batches: int = 8
    """Held-out batches per evaluation."""
    probes: str = ""
    """A TSV file of `prompt<TAB>target` pairs whose probability is tracked (empty: none)."""
    strategy: str = "ddp"
    """Under torchrun: ddp (replicated, ZeRO-0), zero1 (DDP + ZeroRedundancyOptimizer: optimizer
    state sharded), zero2 (FSDP2 without resharding after forward, the closest exact ZeRO-2:
    gradients and optimizer state sharded, parameters gathered from forward to backward), fsdp
    (FSDP2, ZeRO-3) or hsdp (FSDP2 on a 2-D mesh: ZeRO-3 in groups of zero_shard ranks)."""
    zero_shard: int = 0
    """hsdp: ranks per shard group (it must divide the processes); 0 for the other strategies."""
    tp: int = 1
    """Under torchrun: tensor-parallel degree, ranks that split every layer's weights (DTensor,
    train.parallel.tensor_parallel); it must divide the processes, the heads, the kv heads, d_ff and
    the vocabulary. The strategy runs over the processes / tp data-parallel ranks."""
    sequence_parallel: bool = False
    """With tp > 1: split the norms' and the residual stream's activations along the sequence
    over the tp ranks (Korthikanti et al. 2022, arXiv:2205.05198)."""
    cp: int = 1
    """Under torchrun: context-parallel degree, ranks that split every sequence between them
    (each holds 2 of its 2 cp chunks; attention all-gathers the keys and values,
    train.parallel.context); it must divide the processes, and 2 cp must divide seq_len.
    Gradients are averaged over the dp x cp ranks."""
    ep: int = 1
    """MoE models, under torchrun: expert-parallel degree -- each MoE layer's routed experts split
    over groups of ep data-parallel ranks, tokens sent to their experts' ranks by all-to-all
    (train.parallel.expert_parallel); it must divide n_experts and the processes. Strategies ddp,
    zero2 and fsdp."""
    pp: int = 1
    """Pipeline stages across ranks (torch.distributed.pipelining): it must divide the
    processes; the data-parallel strategy runs over the processes / pp ranks of each stage."""
    pp_schedule: str = "1f1b"
    """pp > 1: the pipeline schedule, gpipe, 1f1b or interleaved-1f1b (vpp stages per rank);
    its micro-batches are the grad_accum micro-batches of each step."""
    vpp: int = 1
    """pp > 1: virtual stages per pipeline rank (>= 2 for interleaved-1f1b, else 1)."""
    pp_layers: str = ""
    """pp > 1: layers of each stage, first to last, comma-separated (pp * vpp entries summing
    to n_layers); empty: an even split."""
    collective_timeout_seconds: float = 600.0
    """Under torchrun: how long a rank waits for the others -- at rendezvous and in every
    collective -- before it exits with code 3, naming the ranks that did not arrive."""
    plan: str = ""
    """A JSON file from `trainbudget plan --json`: its best layout is used (empty: none). Data,
    tensor, pipeline, context and expert parallel (expert parallel for MoE, its groups carved out
    of the data-parallel ranks) with dp x tp x pp x cp = the number of processes; it decides
    strategy (ZeRO 0, 1, 2, 3 -> ddp, zero1, zero2, fsdp; a zero_shard -> hsdp), zero_shard,
    micro_batch, grad_accum, tp, sequence_parallel, cp and ep, and with pp > 1 pp, pp_schedule,
    vpp and pp_layers (giving others is an error)."""
    resume: bool = False
    """Continue from the newest verified checkpoint in <out>/checkpoints (start afresh if none)."""
    overwrite: bool = False
    """Start afresh in an --out that holds an earlier run, deleting its checkpoints, metrics,
    summary and TensorBoard files (its prepared data stays); without it such an --out is
    refused unless resume is set."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    checkpoint_every: int = 100
    """Save a checkpoint every N steps (0: only at the end and on SIGTERM/SIGINT)."""
    checkpoint_minutes: float | str = 0.0
    """Also save when this many minutes passed since the last save (0: off); "auto": the
    Young-Daly interval sqrt(2 x write time x job MTBF) from the measured write time."""
    gpu_failure_rate_per_day: float = 0.0027
    """Per-device failure probability per day, for checkpoint_minutes = "auto" (seed 004:
    8 % of GPUs per month = 0.27 % per day)."""
    keep: int = 3
    """How many checkpoints to keep (>= 2; the newest valid one is never deleted)."""
    on_nonfinite: str = "skip"
    """A NaN/inf loss or gradient norm: 'skip' the step (counted) or 'halt' the run."""
    max_consecutive_skips: int = 20
    """Halt when this many steps in a row were skipped (the run cannot recover by itself)."""
    spike_window: int = 50
    """Loss-spike detection over the last N step losses (0: off; else >= 8)."""
    spike_sigmas: float = 6.0
    """A spike: loss above the window's median by more than this many robust standard
    deviations (1.4826 x median absolute deviation) and by spike_min_excess of the median."""
    spike_min_excess: float = 0.1
    """The least excess over the window's median that counts as a spike, as a fraction of it."""
    max_rollbacks: int = 3
    """Spike remedy (roll back to the last checkpoint, skip the offending batches) at most this
    many times; then the run halts."""
    moe_capacity_factor: float = 1.25
    """MoE models: each expert takes at most this times its even share of a micro-batch's
    token-expert assignments and drops the rest, which pass on through the residual (Switch
    Transformer, arXiv:2101.03961, Sec. 2.2; its Table 1 compares 1.0, 1.25 and 2.0); 0:
    dropless. It becomes the model's capacity_factor, which the predictions read too; the
    count dropped is logged."""
    moe_balance_loss_coef: float = 0.01
    """MoE models: the weight of the load-balancing loss E x sum_i f_i x P_i, per MoE layer
    (Switch Transformer eq. 4; its alpha = 0.01)."""
    moe_z_loss_coef: float = 0.001
    """MoE models: the weight of the router z-loss, per MoE layer (ST-MoE, arXiv:2202.08906,
    eq. 5; its c_z = 0.001)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, checked_value(f.name, getattr(self, f.name)))
        if self.warmup_steps == -1:
            object.__setattr__(self, "warmup_steps", self.steps // 10)
        _check_ranges(self)
        _check_together(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.out)


def _check_ranges(cfg: TrainConfig) -> None:
    """One field at a time: signs, bounds, choices."""
    for name in (
        "steps",
        "micro_batch",
        "grad_accum",
        "seq_len",
        "log_interval",
        "eval_interval",
        "eval_batches",
        "max_consecutive_skips",
    ):
        if getattr(cfg, name) <= 0:
            raise SpecError(name, getattr(cfg, name), "must be a positive integer")
    for name in ("pp", "vpp"):
        if getattr(cfg, name) <= 0:
            raise SpecError(name, getattr(cfg, name), "must be a positive integer")
    for name in ("checkpoint_every", "spike_window", "max_rollbacks", "zero_shard"):
        if getattr(cfg, name) < 0:
            raise SpecError(name, getattr(cfg, name), "must be an integer >= 0")
    if cfg.ep < 1:
        raise SpecError("ep", cfg.ep, "must be a positive integer (1: no expert parallelism)")
    if cfg.keep < 2:
        raise SpecError(
            "keep", cfg.keep, "must be >= 2 (the newest valid checkpoint and one to fall back to)"
        )
    if 0 < cfg.spike_window < 8:
        raise SpecError(
            "spike_window", cfg.spike_window, "must be 0 (off) or >= 8 (a median needs samples)"
        )
    if not 0 <= cfg.seed < SEED_LIMIT:
        raise SpecError("seed", cfg.seed, "must be in [0, 2**32) (numpy's seed range)")
    for name in ("lr", "spike_sigmas", "collective_timeout_seconds"):
        if getattr(cfg, name) <= 0:
            raise SpecError(name, getattr(cfg, name), "must be a positive number")
    for name in ("weight_decay", "spike_min_excess", *MOE_WEIGHTS):
        if getattr(cfg, name) < 0:
            raise SpecError(name, getattr(cfg, name), "must not be negative")
    if cfg.grad_clip < 0:
        raise SpecError("grad_clip", cfg.grad_clip, "must be >= 0 (0 turns clipping off)")
    if not 0 <= cfg.min_lr_ratio <= 1:
        raise SpecError("min_lr_ratio", cfg.min_lr_ratio, "must be in [0, 1]")
    if not 0 < cfg.gpu_failure_rate_per_day < 1:
        raise SpecError(
            "gpu_failure_rate_per_day",
            cfg.gpu_failure_rate_per_day,
            "must be a probability in (0, 1)",
        )
    if cfg.checkpoint_minutes != "auto" and cfg.checkpoint_minutes < 0:
        raise SpecError(
            "checkpoint_minutes", cfg.checkpoint_minutes, 'must be minutes >= 0 or "auto"'
        )
    if not cfg.out.strip():
        raise SpecError("out", cfg.out, "must name a folder for the run")
    if cfg.optimizer in OPTIMIZERS:
        get_trainable_optimizer(cfg.optimizer)  # an estimate-only row says why it is refused
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise SpecError(name, getattr(cfg, name), "must be one of " + ", ".join(allowed))


def _check_together(cfg: TrainConfig) -> None:
    """Rules across fields."""
    if not 0 <= cfg.warmup_steps <= cfg.steps:
        raise SpecError(
            "warmup_steps",
            cfg.warmup_steps,
            f"must be between 0 and steps ({cfg.steps}); -1 means a tenth of the steps",
        )
    if cfg.resume and cfg.overwrite:
        raise SpecError(
            "overwrite", True, "cannot be combined with resume (continue the run or start afresh)"
        )
    if cfg.tp < 1:
        raise SpecError("tp", cfg.tp, "must be a positive integer (1: no tensor parallelism)")
    if cfg.sequence_parallel and cfg.tp == 1:
        raise SpecError(
            "sequence_parallel", True, "needs tp > 1 (it splits activations over the tp ranks)"
        )
    _check_context(cfg)
    if (cfg.strategy == "hsdp") != (cfg.zero_shard > 0):
        raise SpecError(
            "zero_shard",
            cfg.zero_shard,
            f"must be >= 1 with strategy hsdp and 0 otherwise (strategy {cfg.strategy})",
        )
    if cfg.ep > 1 and cfg.strategy in EP_REFUSED:
        raise SpecError(
            "ep",
            cfg.ep,
            f"runs with strategies ddp, zero2 and fsdp, not {cfg.strategy}: "
            + EP_REFUSED[cfg.strategy],
        )
    if cfg.ep > 1 and cfg.precision == "amp-fp16":
        raise SpecError(
            "ep",
            cfg.ep,
            "does not run with amp-fp16: each rank holds other experts, so GradScaler's "
            "per-rank overflow check could skip the step on one rank and not another",
        )
    _check_pipeline(cfg)
    # the loop evaluates only on logged steps (and the last): an eval_interval that is not a
    # multiple of log_interval would evaluate only every lcm of the two, silently
    if cfg.eval_interval % cfg.log_interval and cfg.eval_interval < cfg.steps:
        raise SpecError(
            "eval_interval",
            cfg.eval_interval,
            f"must be a multiple of log_interval ({cfg.log_interval}): evaluation runs on "
            "logged steps only",
        )


CP_CHUNKS_PER_RANK = 2
"""Chunks of each sequence per context-parallel rank: an early and a late one, so that under a
causal mask every rank holds as many query-key pairs (train.parallel.context)."""


def check_context_parallel(seq_len: int, cp: int) -> None:
    """The sequence must cut into 2 cp equal chunks (the core's rule, core.parallel.plan)."""
    if cp > 1 and seq_len % (CP_CHUNKS_PER_RANK * cp):
        raise SpecError(
            "seq_len",
            seq_len,
            f"must be divisible by 2 * cp ({CP_CHUNKS_PER_RANK * cp}): context parallelism "
            "gives each rank 2 equal chunks of the sequence (an early and a late one)",
        )


def _check_context(cfg: TrainConfig) -> None:
    """cp > 1: a sequence that cuts into 2 cp chunks, and none of what context parallelism does
    not run yet."""
    if cfg.cp < 1:
        raise SpecError("cp", cfg.cp, "must be a positive integer (1: no context parallelism)")
    if cfg.cp == 1:
        return
    check_context_parallel(cfg.seq_len, cfg.cp)
    refused = {
        "ep": (cfg.ep > 1, "ep > 1 with cp > 1 (experts over the dp ranks only)"),
        "compile": (cfg.compile, "with cp > 1 (the cp attention runs uncompiled)"),
    }
    for name, (bad, what) in refused.items():
        if bad:
            raise SpecError(name, getattr(cfg, name), f"is not supported: {what}")


def _check_pipeline(cfg: TrainConfig) -> None:
    """pp > 1: a schedule torch runs with grad_accum micro-batches, a well-formed split, and
    none of what the pipeline does not run (train.parallel.pipeline's docstring says why)."""
    check_schedule(cfg.pp_schedule, pp=cfg.pp, vpp=cfg.vpp, n_microbatches=cfg.grad_accum)
    parse_pp_layers(cfg.pp_layers)
    if cfg.pp == 1:
        for name, idle in (("vpp", 1), ("pp_layers", "")):
            if getattr(cfg, name) != idle:
                raise SpecError(name, getattr(cfg, name), "needs pp > 1 (a pipeline to split)")
        return
    refused = {
        "strategy": (cfg.strategy == "zero1", "zero1 with pp > 1 (use ddp, zero2, fsdp or hsdp)"),
        "precision": (
            cfg.precision in ("bf16-mixed", "amp-fp16"),
            "bf16-mixed and amp-fp16 with pp > 1 (use fp32, bf16 or amp-bf16)",
        ),
        "compile": (cfg.compile, "with pp > 1 (the pipeline's stages run uncompiled)"),
        "probes": (bool(cfg.probes), "with pp > 1 (no stage holds the whole model)"),
    }
    for name, (bad, what) in refused.items():
        if bad:
            raise SpecError(name, getattr(cfg, name), f"is not supported: {what}")


# ---- types ----------------------------------------------------------------------------------

_KIND_RULES = {
    "int": "must be an integer",
    "float": "must be a number",
    "str": "must be a string",
    "bool": "must be true or false",
    "tuple[str, ...]": 'must be a list of "field=value" strings',
    "float | str": 'must be a number of minutes or "auto"',
}


def checked_value(name: str, value: object) -> object:
    """`value` as field `name`'s type (an int for a float field becomes a float, a list of
    strings for `overrides` a tuple), or a SpecError naming the field: no bool for a number,
    no float for an integer, no number for a string."""
    kind = config_fields()[name].type
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and number and isinstance(value, int):
        return value
    if kind == "str" and isinstance(value, str):
        return value
    if kind in ("float", "float | str") and number:
        if not math.isfinite(value):
            raise SpecError(name, value, "must be a finite number")
        return float(value)
    if kind == "float | str" and value == "auto":
        return value
    if (
        kind == "tuple[str, ...]"
        and isinstance(value, (list, tuple))
        and all(isinstance(v, str) for v in value)
    ):
        return tuple(value)
    raise SpecError(name, value, _KIND_RULES[kind])


@functools.cache
def config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


@functools.cache
def field_docs() -> dict[str, str]:
    """Each field's docstring (the string literal under it in TrainConfig), read from this
    file's source with `ast`: the CLI's help text, written once, beside the field."""
    try:
        tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    except OSError:  # installed without sources (bytecode only): help without the docstrings
        return {}
    body = next(n.body for n in tree.body if getattr(n, "name", "") == "TrainConfig")
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


# ---- files and flags ------------------------------------------------------------------------


def load_config_file(path: str) -> dict:
    """A settings file's keys and values: TOML or JSON (by suffix), parsed as data only.

    Unknown keys and wrong types are errors naming `FILE:key`; ranges are TrainConfig's."""
    suffix = Path(path).suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise SpecError("--config", path, "must be a .toml or .json file")
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise SpecError("--config", path, f"cannot be read ({err.strerror})") from None
    doc = _parse_toml(path, raw) if suffix == ".toml" else _parse_json(path, raw)
    known = config_fields()
    values = {}
    for key, value in doc.items():
        if key not in known:
            raise SpecError(f"{path}:{key}", value, unknown_key_rule(key, list(known)))
        try:
            values[key] = checked_value(key, value)
        except SpecError as err:
            raise SpecError(f"{path}:{key}", value, err.rule) from None
    return values


def _parse_toml(path: str, raw: bytes) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise SpecError("--config", path, "TOML needs Python 3.11+ (tomllib)") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except ValueError as err:  # TOMLDecodeError and UnicodeDecodeError
        raise SpecError("--config", path, f"is not valid TOML ({err})") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise SpecError("--config", path, "is nested too deeply (settings are flat)") from None


def _parse_json(path: str, raw: bytes) -> dict:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for key, value in pairs:
            if key in seen:
                raise SpecError(f"{path}:{key}", value, "is given twice")
            seen[key] = value
        return seen

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except SpecError:
        raise
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise SpecError("--config", path, f"is not valid JSON ({err})") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise SpecError("--config", path, "is nested too deeply (settings are flat)") from None
    if not isinstance(doc, dict):
        raise SpecError(
            "--config", path, f"must hold a JSON object of settings, not a {type(doc).__name__}"
        )
    return doc


def unknown_key_rule(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), known, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return "unknown key; known: " + ", ".join(known)


def make_config(file_values: dict, flag_values: dict, *, source: str = "") -> TrainConfig:
    """Defaults, then the settings file's values, then command-line flags (None: not given).

    The flags' overrides (`--set`) change the file's or the default's field by field
    (`merge_overrides`); a settings file's overrides replace the default's.

    An error about a value that came from the file (`source`) names `FILE:key`."""
    flags = {k: v for k, v in flag_values.items() if v is not None}
    for name in flags:
        if name not in config_fields():
            raise SpecError(name, flags[name], unknown_key_rule(name, list(config_fields())))
    values = {**file_values, **flags}
    if "overrides" in flags:
        # --set changes fields of the model the run would otherwise train (the tiny default,
        # the file's, or --model's as it is), one by one: `--set n_layers=2` keeps the
        # default's width and its byte vocabulary
        named_alone = "model" in values and "overrides" not in file_values
        base = file_values.get("overrides", config_fields()["overrides"].default)
        values["overrides"] = merge_overrides(() if named_alone else base, flags["overrides"])
    elif "model" in values and "overrides" not in values:
        values["overrides"] = ()  # a model named alone is trained as it is, not shrunk
    try:
        return TrainConfig(**values)
    except SpecError as err:
        if source and err.field in file_values and err.field not in flags:
            raise SpecError(f"{source}:{err.field}", err.value, err.rule) from None
        raise


def merge_overrides(base: tuple[str, ...], changes: tuple[str, ...]) -> tuple[str, ...]:
    """`base` with `changes` applied field by field: a field set in both keeps its place in
    `base` and takes the value from `changes`; new fields follow in order. An item without
    "=" is kept as it is, for `resolve_model` to refuse with its own message."""
    merged: dict[str, str] = {}
    for item in (*base, *changes):
        key = item.split("=", 1)[0].strip() if "=" in item else item
        merged[key] = item
    return tuple(merged.values())
