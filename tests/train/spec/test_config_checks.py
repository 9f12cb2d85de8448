"""A run config's rules (train.spec.config_checks): each field's range and choices, the rules
across fields, each refusal naming the field."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.precision import TRAINABLE_OPTIMIZERS
from trainbudget.train.spec.config import TrainConfig

# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": -3}, "steps"),
        ({"steps": True}, "steps"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"grad_accum": 0}, "grad_accum"),
        ({"seq_len": 0}, "seq_len"),
        ({"log_interval": 0}, "log_interval"),
        ({"steps": 10, "warmup_steps": 11}, "warmup_steps"),
        ({"warmup_steps": -2}, "warmup_steps"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"schedule": "step"}, "schedule"),
        ({"precision": "fp8"}, "precision"),
        ({"precision": "fp16-mixed"}, "precision"),
        ({"device": "tpu"}, "device"),
        ({"strategy": "zero3"}, "strategy"),
        ({"recompute": "selective"}, "recompute"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"out": " "}, "out"),
        ({"log_interval": 10, "eval_interval": 15}, "eval_interval"),
        ({"keep": 1}, "keep"),
        ({"spike_window": 3}, "spike_window"),
        ({"max_rollbacks": -1}, "max_rollbacks"),
        ({"checkpoint_every": -1}, "checkpoint_every"),
        ({"checkpoint_minutes": "sometimes"}, "checkpoint_minutes"),
        ({"checkpoint_minutes": -1.0}, "checkpoint_minutes"),
        ({"gpu_failure_rate_per_day": 1.0}, "gpu_failure_rate_per_day"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite"),
        ({"spike_sigmas": 0.0}, "spike_sigmas"),
        ({"spike_min_excess": -0.1}, "spike_min_excess"),
        ({"max_consecutive_skips": 0}, "max_consecutive_skips"),
        ({"resume": True, "overwrite": True}, "overwrite"),
    ],
)
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        TrainConfig(**kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field} = ")


def test_eval_interval_is_a_multiple_of_log_interval():
    # the loop evaluates on logged steps only: 15 with logs every 10 would evaluate at 30, 60, ...
    with pytest.raises(SpecError, match="multiple of log_interval") as err:
        TrainConfig(log_interval=10, eval_interval=15, steps=100)
    assert err.value.field == "eval_interval"
    assert TrainConfig(log_interval=10, eval_interval=30).eval_interval == 30
    # at or past the end: only the final evaluation, which every run does
    assert TrainConfig(steps=25, log_interval=10, eval_interval=25).eval_interval == 25


def test_valid_edges_are_accepted():
    assert TrainConfig(steps=10, warmup_steps=10).warmup_steps == 10  # warmup == steps
    assert TrainConfig(steps=10, warmup_steps=0).warmup_steps == 0
    assert TrainConfig(steps=5).warmup_steps == 0  # 5 // 10
    assert TrainConfig(grad_clip=0.0, weight_decay=0.0, min_lr_ratio=0.0).grad_clip == 0.0
    assert TrainConfig(seed=0).seed == 0 and TrainConfig(seed=2**32 - 1).seed == 2**32 - 1
    assert TrainConfig(spike_window=0, checkpoint_every=0, max_rollbacks=0).spike_window == 0
    assert TrainConfig(checkpoint_minutes=5).checkpoint_minutes == 5.0


def test_unknown_optimizer_is_refused_by_the_config():
    with pytest.raises(SpecError) as err:
        TrainConfig(optimizer="adamww")
    assert err.value.field == "optimizer"
    assert "must be one of" in err.value.rule and "adafactor" not in err.value.rule


def test_estimate_only_optimizer_is_refused_with_its_reason():
    """adafactor is a row of the core's table but the trainer has no factory for it."""
    with pytest.raises(SpecError, match="estimate-only") as err:
        TrainConfig(optimizer="adafactor")
    assert err.value.field == "optimizer"


def test_trainable_optimizers_are_accepted():
    for name in TRAINABLE_OPTIMIZERS:
        assert TrainConfig(optimizer=name).optimizer == name


@pytest.mark.parametrize(
    ("field", "value"),
    [("grad_clip", math.nan), ("weight_decay", math.nan), ("lr", math.inf)],
)
def test_non_finite_numbers_are_refused(field, value):
    with pytest.raises(SpecError) as err:
        TrainConfig(**{field: value})
    assert err.value.field == field
