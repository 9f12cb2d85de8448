"""The planner's grid enumeration against a plain one: nested loops over the axes in the
documented order, each validation rule written as an `if`, then every ZeRO plan again per HSDP
shard size, grouped by (dp, tp, cp). The grid (`plan_grid.enumerate_plan_arrays`, masks
and gathers over numpy arrays) must give the very same plans in the very same order: the order
is the ranking's last tie-break, so it shows in which plan `plan` and `estimate` print."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import STAGE_LAYER_FIELDS
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search.plan_grid import enumerate_plan_arrays, enumerate_plans
from trainbudget.core.parallel.search.plan_space import (
    Policy,
    axis_candidates,
    divisors,
    hsdp_shards,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.presets import get_preset


def _rules_hold(spec: ModelSpec, plan: Plan, per_rank: int, flash: bool) -> bool:
    """The rules the grid applies as masks, one plan at a time."""
    if per_rank % plan.micro_batch:
        return False
    if plan.pp == 1 and plan.vpp != 1:
        return False
    if plan.pp > 1 and (spec.n_layers // plan.pp) % plan.vpp:
        return False
    if plan.vpp > 1 and plan.grad_accum % plan.pp:
        return False
    if (plan.dp * plan.cp) % plan.ep:
        return False
    if plan.zero > 0 and plan.dp * plan.cp == 1:
        return False
    if plan.recompute == "selective" and flash:
        return False
    if plan.sp and plan.tp == 1:
        return False
    return not (plan.offload_optimizer != "none" and plan.zero == 0)


def _reference(spec: ModelSpec, cluster: Cluster, global_batch: int, seq_len: int, policy):
    n = cluster.n_gpus
    tps, pps, cps = axis_candidates(spec, cluster, seq_len=seq_len, policy=policy)
    plans = []
    for tp, pp, cp in itertools.product(tps, pps, cps):
        if n % (tp * pp * cp) or global_batch % (n // (tp * pp * cp)):
            continue
        dp = n // (tp * pp * cp)
        per_rank = global_batch // dp
        for mb, vpp, ep, zero, recompute, sp, offload in itertools.product(
            [d for d in divisors(global_batch) if d <= policy.max_micro_batch],
            [v for v in divisors(spec.n_layers) if v <= policy.max_vpp],
            divisors(spec.n_experts) if spec.is_moe else [1],
            policy.zero_stages,
            policy.recompute,
            (False, True),
            ("none", "cpu") if policy.allow_offload else ("none",),
        ):
            plan = Plan(
                dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, sp=sp, vpp=vpp,
                schedule="interleaved" if vpp > 1 else "1f1b", micro_batch=mb,
                grad_accum=per_rank // mb, recompute=recompute, offload_optimizer=offload,
                flash_attention=policy.flash_attention,
            )  # fmt: skip
            if _rules_hold(spec, plan, per_rank, policy.flash_attention):
                plans.append(plan)
    if not policy.hsdp:
        return plans
    hsdp = []
    for dp, tp, cp in sorted({(p.dp, p.tp, p.cp) for p in plans if p.zero > 0}):
        group = [p for p in plans if p.zero > 0 and (p.dp, p.tp, p.cp) == (dp, tp, cp)]
        for shard in hsdp_shards(dp, tp, cp, cluster.gpus_per_node):
            hsdp += [replace(p, zero_shard=shard) for p in group]
    return plans + hsdp


TINY = ModelSpec(vocab_size=4, d_model=64, n_layers=2, n_heads=8, d_ff=256, max_seq_len=64)

# name -> (model, gpu, n_gpus, global_batch, seq_len, policy)
CASES = {
    "llama-2-7b/64xh100": ("llama-2-7b", "h100-sxm", 64, 512, 4096, Policy()),
    "llama-2-7b/64xh100/offload-unfused": (
        "llama-2-7b",
        "h100-sxm",
        64,
        512,
        4096,
        Policy(allow_offload=True, flash_attention=False),
    ),
    "mixtral-8x7b/64xh100/ep": ("mixtral-8x7b", "h100-sxm", 64, 256, 4096, Policy()),
    "llama-3-8b/32xh100/32k": ("llama-3-8b", "h100-sxm", 32, 32, 32768, Policy()),
    "gpt2-medium/16xh100-pcie/tp-across-nodes": (
        "gpt2-medium",
        "h100-pcie",
        16,
        64,
        1024,
        Policy(max_tp=16, max_vpp=8),
    ),
    "gpt3-175b/512xa100/no-hsdp-no-cp": (
        "gpt3-175b",
        "a100-80gb",
        512,
        1536,
        2048,
        Policy(hsdp=False, allow_cp=False, zero_stages=(1, 3), max_micro_batch=4),
    ),
    "deepseek-v3/256xh800": ("deepseek-v3", "h800", 256, 512, 4096, Policy()),
    "tiny/8xh100/vocab-below-tp": (TINY, "h100-sxm", 8, 8, 64, Policy()),
    # without CP, tp * pp <= 8 * 32 of 1024 GPUs: dp >= 4 cannot divide a batch of 3
    "gpt3-175b/1024xa100/no-layout": (
        "gpt3-175b",
        "a100-80gb",
        1024,
        3,
        2048,
        Policy(allow_cp=False),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_grid_enumerates_the_reference_plans_in_order(case):
    model, gpu, n, gbs, seq, policy = CASES[case]
    spec = get_preset(model) if isinstance(model, str) else model
    cluster = Cluster(hardware=get_hardware(gpu), n_gpus=n)
    want = _reference(spec, cluster, gbs, seq, policy)
    grid = enumerate_plan_arrays(spec, cluster, global_batch=gbs, seq_len=seq, policy=policy)
    assert grid.plans() == want
    assert bool(want) != case.endswith("no-layout")
    if want and n > cluster.gpus_per_node:  # several nodes: HSDP shard sizes among the plans
        assert any(p.zero_shard for p in want) == policy.hsdp
    # one array per field, plan i at element i; a field every plan shares is one number
    shared = {"offload_params", "recompute_every", "flash", *STAGE_LAYER_FIELDS}
    for name, values in vars(grid).items():
        assert np.shape(values) == (() if name in shared else (len(want),)), name
    assert not any(getattr(grid, f) for f in STAGE_LAYER_FIELDS)  # even splits only


def test_enumerate_plans_yields_the_grid_one_plan_at_a_time():
    spec = get_preset("mixtral-8x7b")
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=16)
    grid = enumerate_plan_arrays(spec, cluster, global_batch=64, seq_len=4096)
    assert list(enumerate_plans(spec, cluster, global_batch=64, seq_len=4096)) == grid.plans()


@pytest.mark.parametrize("n", [1, 2, 12, 36, 97, 1024, 1920, 2240])
def test_divisors_ascend_and_divide(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
