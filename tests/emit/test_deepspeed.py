"""The DeepSpeed 0.19.8 config: JSON whose keys are rows of the option table (written from
deepspeed/runtime's config modules), round-tripped to the plan."""

from __future__ import annotations

import json

import pytest

from emit_jobs import job
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.emit import deepspeed

# `plan --model llama-3-70b --gpus 1024 --seq-len 8192 --recompute-options full --no-cp
# --max-tp 1` (no cp, no tp + sp: what DeepSpeed's config can carry) picks PLAN_70B at
# --global-batch 512 (pipeline stages: refused) and DS_70B at --global-batch 1024
PLAN_70B = Plan(dp=512, pp=2, zero=3, micro_batch=1, grad_accum=1, recompute="full")
DS_70B = Plan(dp=1024, zero=3, micro_batch=1, grad_accum=1, recompute="full")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def test_the_70b_plan_round_trips() -> None:
    emitted = deepspeed.emit(job(DS_70B))
    cfg = json.loads(emitted.text)
    world = 1024  # DeepSpeed's rule (runtime/config.py _batch_assertion), tp = pp = 1
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * world
    )
    assert cfg["zero_optimization"] == {"stage": 3}
    assert cfg["bf16"] == {"enabled": True} and cfg["optimizer"] == {"type": "AdamW"}
    assert "checkpoint every block" in " ".join(emitted.notes)
    for key, value in _flat(cfg).items():
        row = deepspeed.OPTIONS[key]
        assert isinstance(value, row.kind) and (not row.choices or value in row.choices)


def test_tp_offload_and_plain_adam() -> None:
    plan = Plan(
        dp=128,
        tp=8,
        zero=3,
        offload_optimizer="cpu",
        offload_params="cpu",
        micro_batch=2,
        grad_accum=2,
    )
    cfg = json.loads(deepspeed.emit(job(plan, optimizer="adam", precision="amp-bf16")).text)
    assert cfg["tensor_parallel"] == {"autotp_size": 8}
    assert cfg["train_batch_size"] == 2 * 2 * 128  # the data-parallel ranks, 1024 / tp
    assert cfg["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert cfg["optimizer"] == {"type": "Adam", "params": {"adam_w_mode": False}}
    assert cfg["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}


@pytest.mark.parametrize(
    ("plan", "kw", "named"),
    [
        (PLAN_70B, {}, "pp = 2"),
        (Plan(dp=512, cp=2, zero=3), {}, "cp = 2"),
        (Plan(dp=128, tp=8, sp=True, zero=3), {}, "sp = True"),
        (Plan(dp=1024, zero=3, zero_shard=8), {}, "zero_shard = 8"),
        (Plan(dp=1024, zero=3), {"precision": "fp8"}, "precision = 'fp8'"),
    ],
)
def test_a_feature_without_an_equivalent_is_refused_in_one_line(plan, kw, named) -> None:
    with pytest.raises(SpecError) as err:
        deepspeed.emit(job(plan, **kw))
    assert named in str(err.value) and "cannot be emitted for deepspeed" in str(err.value)
