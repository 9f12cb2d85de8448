"""The rules a run config must meet, field by field and across fields, checked when a
`TrainConfig` is made (its __post_init__), before anything is read or imported: the choices each
field takes, the ranges, and what the parallel layouts do not run together. Each check takes the
config as it is being made (typed Any: this module may not import `config`, which calls it)."""

from __future__ import annotations

from typing import Any

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


def check_ranges(cfg: Any) -> None:
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


def check_together(cfg: Any) -> None:
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


def _check_context(cfg: Any) -> None:
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


def _check_pipeline(cfg: Any) -> None:
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
