"""One memory model from plan to run: over random plans of every layout, engine, schedule,
recompute policy and model family (dense, GQA, MLA, MoE; even and uneven splits), the planner's
per-GPU memory (the grid, numpy), `estimate`'s and `plan`'s (`planner.evaluate`, one plan) and
the trainer's predicted peak (`rank_peak` on every rank, under the trainer's own framework row)
are the same number to rel 1e-9: they are one function (`gpu_peak`) called three ways."""

from __future__ import annotations

import dataclasses
import random

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.memory.rank_peak import rank_peak
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.search.planner import evaluate
from trainbudget.core.parallel.search.planner_fast import memory_arrays
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.frameworks import FRAMEWORKS, TRAINBUDGET
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

N_PLANS = 520
SEQ = 1024


def _models():
    """Small members of each family, so that every layout below divides them."""
    dense = dataclasses.replace(get_preset("gpt2"), n_layers=8, max_seq_len=SEQ)  # MHA, tied
    gqa = dataclasses.replace(get_preset("llama-3-8b"), n_layers=8)  # GQA, untied, RoPE
    mla = dataclasses.replace(get_preset("deepseek-v3"), n_layers=8, n_dense_layers=1)
    moe = dataclasses.replace(get_preset("mixtral-8x7b"), n_layers=8)
    return {"dense": dense, "gqa": gqa, "mla": mla, "moe": moe}


def _random_plan(rng: random.Random, spec) -> Plan | None:
    tp = rng.choice([1, 2, 4])
    pp = rng.choice([1, 2, 4])
    cp = rng.choice([1, 1, 2])
    dp = rng.choice([1, 2, 4])
    ep = rng.choice([1, 2]) if spec.is_moe and dp * cp >= 2 else 1
    zero = rng.choice([0, 1, 2, 3]) if dp * cp > 1 else 0
    shard = rng.choice([0, 2]) if zero and dp == 4 else 0
    schedule = rng.choice(["1f1b", "gpipe", "interleaved"]) if pp > 1 else "1f1b"
    vpp = 2 if schedule == "interleaved" else 1
    m = rng.choice([1, 2, 4, 8])
    if schedule == "interleaved":
        m = max(pp, m - m % pp)
    split = ()
    if pp > 1 and schedule != "interleaved" and rng.random() < 0.3:
        split = (1, *([8 // pp] * (pp - 2)), 8 - 1 - (8 // pp) * (pp - 2)) if pp > 2 else (3, 5)
    recompute = rng.choice(["none", "selective", "full", "selective-op"])
    plan = Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        zero=zero,
        zero_shard=shard,
        sp=tp > 1 and rng.random() < 0.5,
        vpp=vpp,
        schedule=schedule,
        pp_layers=split,
        micro_batch=rng.choice([1, 2]),
        grad_accum=m,
        recompute=recompute,
        recompute_every=rng.choice([1, 1, 2]) if recompute == "full" else 1,
        offload_optimizer=rng.choice(["none", "none", "cpu"]) if zero else "none",
        flash_attention=rng.random() < 0.8,
    )
    try:
        validate_plan(plan, spec, n_gpus=plan.n_gpus, seq_len=SEQ)
    except SpecError:
        return None
    return plan


def _cases():
    rng = random.Random(20261128)
    models = _models()
    frameworks = [f for f in FRAMEWORKS.values() if not f.historical]
    out = []
    while len(out) < N_PLANS:
        family = rng.choice(list(models))
        plan = _random_plan(rng, models[family])
        if plan is not None:
            # every framework in turn, each chunk of four (the test below) seeing all of them,
            # so the trainer's row keeps its share however many rows the catalog has
            framework = frameworks[len(out) // 4 % len(frameworks)]
            out.append((family, plan, framework, rng.choice(["bf16-mixed", "fp32"])))
    return out


CASES = _cases()


def test_the_cases_cover_every_layout_and_policy():
    plans = [c[1] for c in CASES]
    assert len(plans) >= 500
    for field, values in (
        ("schedule", {"1f1b", "gpipe", "interleaved"}),
        ("recompute", {"none", "selective", "full", "selective-op"}),
        ("zero", {0, 1, 2, 3}),
    ):
        assert {getattr(p, field) for p in plans} >= values
    assert any(p.cp > 1 for p in plans) and any(p.ep > 1 for p in plans)
    assert any(p.pp_layers for p in plans) and any(p.zero_shard for p in plans)
    assert any(p.offload_optimizer != "none" for p in plans) and any(p.sp for p in plans)
    assert {c[0] for c in CASES} == {"dense", "gqa", "mla", "moe"}
    assert len({c[2].name for c in CASES}) >= 5


def _trainer_heaviest(spec, plan, precision) -> float | None:
    """The trainer's most loaded rank, where one rank stands for each stage the planner tells
    apart (an even split, or a largest middle stage that is the second one)."""
    counts = plan.stage_layer_counts(spec.n_layers)
    if plan.pp > 2 and max(counts[1:-1]) != counts[1]:
        return None
    step = plan.n_gpus // plan.pp
    shard = (plan.zero_shard or plan.dp) * plan.cp
    ranks = [s * step + r for s in range(plan.pp) for r in range(min(step, shard))]
    kw = dict(precision=precision, optimizer="adamw", seq_len=SEQ)
    return max(rank_peak(spec, plan, rank=r, **kw).total_bytes for r in ranks)


@pytest.mark.parametrize("chunk", range(4))
def test_planner_estimate_and_trainer_give_one_peak(chunk):
    models = _models()
    hw = get_hardware("h100-sxm")
    compared_with_trainer = 0
    for family, plan, fw, precision in CASES[chunk::4]:
        spec = models[family]
        prec, opt = get_precision(precision), get_optimizer("adamw")
        kw = dict(seq_len=SEQ, precision=prec, optimizer=opt, framework=fw)
        one = plan_memory(spec, plan, **kw).total_bytes
        grid = memory_arrays(spec, PlanNumbers.of_many([plan, plan]), **kw)
        cluster = Cluster(hardware=hw, n_gpus=plan.n_gpus)
        estimated = evaluate(spec, plan, cluster, **kw).memory.total_bytes
        assert grid[0] == pytest.approx(one, rel=1e-9), (family, plan.describe(), fw.name)
        assert estimated == pytest.approx(one, rel=1e-9)
        if fw is TRAINBUDGET:
            trainer = _trainer_heaviest(spec, plan, precision)
            if trainer is not None:
                assert trainer == pytest.approx(one, rel=1e-9), (family, plan.describe())
                compared_with_trainer += 1
    assert compared_with_trainer >= 10


@pytest.mark.parametrize("family", ["dense", "gqa", "mla", "moe"])
@pytest.mark.parametrize(
    "precision", ["fp32", "bf16-mixed", "fp16-mixed", "amp-bf16", "amp-fp16", "bf16"]
)
def test_one_gpu_is_the_reference_step_the_profile_measures(family, precision):
    """One GPU under the generic row: the reference step (core.single.peak_memory, held to
    MemTracker by the profile matrix), every precision, with and without recomputation."""
    spec = _models()[family]
    for recompute in ("none", "full"):
        plan = Plan(micro_batch=2, recompute=recompute)
        kw = dict(precision=precision, optimizer="adamw", seq_len=256, micro_batch=2)
        want = training_peak(spec, recompute=recompute, **kw).total_bytes
        got = plan_memory(
            spec,
            plan,
            seq_len=256,
            precision=get_precision(precision),
            optimizer=get_optimizer("adamw"),
        ).total_bytes
        assert got == pytest.approx(want, rel=1e-12), recompute


def test_bucket_views_drop_ddps_gradient_copy():
    spec = _models()["gqa"]
    kw = dict(seq_len=SEQ, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))
    engines = ("single", "ddp-bucket-view", "ddp-bucket-view", "fsdp2", "fsdp2")
    views = dataclasses.replace(TRAINBUDGET, name="views", engines=engines)
    copy = plan_memory(spec, Plan(dp=2), framework=TRAINBUDGET, **kw)
    view = plan_memory(spec, Plan(dp=2), framework=views, **kw)
    assert copy.total_bytes - view.total_bytes == pytest.approx(copy.state.grads_bytes)
