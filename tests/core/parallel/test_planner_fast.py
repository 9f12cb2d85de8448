"""The vectorised planner against the scalar reference: the same plan sets, the same step time
and memory for every plan (or a fixed sample of large sets), the same search result."""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.planner import Policy, enumerate_plans, evaluate, search
from trainbudget.core.parallel.planner_fast import (
    PlanArrays,
    enumerate_plan_arrays,
    evaluate_arrays,
    search_fast,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

MT_NLG = ModelSpec(
    name="mt-nlg-530b",
    vocab_size=50257,
    d_model=20480,
    n_layers=105,
    n_heads=128,
    d_ff=4 * 20480,
    max_seq_len=2048,
    mlp="gelu",
    position="learned",
    tied_embeddings=True,
    bias=True,
)

# name -> (model, gpu, n_gpus, global_batch, seq_len, precision, optimizer, policy)
CASES = {
    "llama-2-7b/8xh100": ("llama-2-7b", "h100-sxm", 8, 64, 4096, "bf16-mixed", "adamw", Policy()),
    # unfused attention (selective recompute is then searched), CPU offload, 8-bit Adam
    "llama-2-7b/64xh100/offload": (
        "llama-2-7b",
        "h100-sxm",
        64,
        512,
        4096,
        "fp16-mixed",
        "adamw-8bit",
        Policy(allow_offload=True, flash_attention=False),
    ),
    "gpt3-175b/512xa100": (
        "gpt3-175b",
        "a100-80gb",
        512,
        1536,
        2048,
        "bf16-mixed",
        "adam",
        Policy(),
    ),
    "mixtral-8x7b/64xh100/ep": (
        "mixtral-8x7b",
        "h100-sxm",
        64,
        256,
        4096,
        "bf16-mixed",
        "adamw",
        Policy(),
    ),
    "llama-3-8b/32xh100/cp": ("llama-3-8b", "h100-sxm", 32, 32, 32768, "bf16", "adamw", Policy()),
    # TP across nodes on PCIe cards, fp32 with momentum SGD
    "gpt2-medium/16xh100-pcie": (
        "gpt2-medium",
        "h100-pcie",
        16,
        64,
        1024,
        "fp32",
        "momentum",
        Policy(max_tp=16, max_vpp=8),
    ),
    "mt-nlg-530b/2240xa100": (
        MT_NLG,
        "a100-80gb",
        2240,
        1920,
        2048,
        "bf16-mixed",
        "adamw",
        Policy(),
    ),
}
SAMPLE = 2000  # scalar evaluations per case when the set is larger


def _setup(case: str):
    model, gpu, n, gbs, seq, prec, opt, policy = CASES[case]
    spec = get_preset(model) if isinstance(model, str) else model
    cluster = Cluster(hardware=get_hardware(gpu), n_gpus=n)
    kw = dict(seq_len=seq, precision=get_precision(prec), optimizer=get_optimizer(opt))
    return spec, cluster, gbs, policy, kw


@functools.cache
def _arrays(case: str) -> PlanArrays:
    spec, cluster, gbs, policy, kw = _setup(case)
    return enumerate_plan_arrays(
        spec, cluster, global_batch=gbs, seq_len=kw["seq_len"], policy=policy
    )


@pytest.mark.parametrize("case", list(CASES))
def test_plan_sets_are_identical(case):
    spec, cluster, gbs, policy, kw = _setup(case)
    scalar = Counter(
        enumerate_plans(spec, cluster, global_batch=gbs, seq_len=kw["seq_len"], policy=policy)
    )
    fast = Counter(_arrays(case).plans())
    assert len(scalar) > 100
    assert fast == scalar


@pytest.mark.parametrize("case", list(CASES))
def test_vectorised_time_and_memory_equal_the_scalar_ones(case):
    spec, cluster, _, _, kw = _setup(case)
    arrays = _arrays(case)
    step, memory, tokens = evaluate_arrays(spec, cluster, arrays, **kw)
    index = np.arange(len(arrays))
    if len(arrays) > SAMPLE:
        index = np.sort(np.random.default_rng(0).choice(len(arrays), SAMPLE, replace=False))
    for i in index:
        ref = evaluate(spec, arrays.plan(int(i)), cluster, **kw)
        assert step[i] == pytest.approx(ref.time.step_seconds, rel=1e-9, abs=0)
        assert memory[i] == pytest.approx(ref.memory.total_bytes, rel=1e-9, abs=0)
        assert tokens[i] == ref.time.tokens_per_step


def test_nvme_offload_code_matches_the_scalar():
    """enumerate_plans never offloads to NVMe; evaluate_arrays still handles the code."""
    spec, cluster, _, _, kw = _setup("llama-2-7b/64xh100/offload")
    plans = [
        Plan(dp=16, tp=4, zero=z, sp=True, micro_batch=2, grad_accum=16, offload_optimizer=off)
        for z in (1, 2, 3)
        for off in ("none", "cpu", "nvme")
    ]
    codes = {"none": 0, "cpu": 1, "nvme": 2}
    arrays = PlanArrays(
        *(np.array([getattr(p, f) for p in plans]) for f in ("dp", "tp", "pp", "cp", "ep")),
        zero=np.array([p.zero for p in plans]),
        sp=np.array([p.sp for p in plans]),
        vpp=np.array([p.vpp for p in plans]),
        micro_batch=np.array([p.micro_batch for p in plans]),
        grad_accum=np.array([p.grad_accum for p in plans]),
        recompute=np.zeros(len(plans), dtype=int),
        offload=np.array([codes[p.offload_optimizer] for p in plans]),
        flash=np.ones(len(plans), dtype=bool),
    )
    assert arrays.plans() == plans
    step, memory, _ = evaluate_arrays(spec, cluster, arrays, **kw)
    for i, plan in enumerate(plans):
        ref = evaluate(spec, plan, cluster, **kw)
        assert step[i] == pytest.approx(ref.time.step_seconds, rel=1e-9, abs=0)
        assert memory[i] == pytest.approx(ref.memory.total_bytes, rel=1e-9, abs=0)


# small enough for the scalar search: model, gpu, n_gpus, global_batch, seq_len
SMALL = {
    "llama-2-7b/8xh100": ("llama-2-7b", "h100-sxm", 8, 64, 4096),
    "gpt2/4xa100-40gb": ("gpt2", "a100-40gb", 4, 32, 1024),
    "mixtral-8x7b/8xh100": ("mixtral-8x7b", "h100-sxm", 8, 16, 4096),
    "llama-3-8b/16xh100/cp": ("llama-3-8b", "h100-sxm", 16, 16, 32768),
    "gpt3-175b/8xa100/none-fits": ("gpt3-175b", "a100-80gb", 8, 16, 2048),
}


def _small(case: str):
    model, gpu, n, gbs, seq = SMALL[case]
    spec, cluster = get_preset(model), Cluster(hardware=get_hardware(gpu), n_gpus=n)
    kw = dict(
        global_batch=gbs,
        seq_len=seq,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )
    return spec, cluster, kw


@functools.cache
def _searches(case: str):
    spec, cluster, kw = _small(case)
    return search(spec, cluster, **kw), search_fast(spec, cluster, **kw)


@pytest.mark.parametrize("case", list(SMALL))
def test_search_fast_returns_what_search_returns(case):
    ref, fast = _searches(case)
    assert fast.evaluated == ref.evaluated
    assert fast.n_fitting == ref.n_fitting
    assert len(fast.plans) == len(ref.plans) == 5
    assert fast.plans[0].plan == ref.plans[0].plan
    assert fast.plans == ref.plans  # the same top 5, in order, with the scalar breakdowns


@pytest.mark.parametrize("case", list(SMALL))
def test_best_plan_is_the_brute_force_optimum(case):
    spec, cluster, kw = _small(case)
    _, fast = _searches(case)
    best = fast.plans[0]
    validate_plan(
        best.plan,
        spec,
        n_gpus=cluster.n_gpus,
        seq_len=kw["seq_len"],
        global_batch=kw["global_batch"],
    )
    every = [
        evaluate(
            spec,
            plan,
            cluster,
            seq_len=kw["seq_len"],
            precision=kw["precision"],
            optimizer=kw["optimizer"],
        )
        for plan in enumerate_plans(
            spec, cluster, global_batch=kw["global_batch"], seq_len=kw["seq_len"]
        )
    ]
    fitting = [r for r in every if r.fits]
    assert best.fits == bool(fitting)
    if fitting:
        assert best.seconds_per_token <= min(r.seconds_per_token for r in fitting)
        limit = Policy().memory_headroom * cluster.hardware.memory_bytes
        assert best.memory.total_bytes <= limit
    else:  # nothing fits: the smallest footprint comes first
        assert best.memory.total_bytes <= min(r.memory.total_bytes for r in every)


def test_no_valid_layout_is_the_same_error():
    # tp * pp <= 8 * 32 of 1024 GPUs: dp >= 4 cannot divide a batch of 3
    spec = get_preset("gpt3-175b")
    cluster = Cluster(hardware=get_hardware("a100-80gb"), n_gpus=1024)
    kw = dict(
        global_batch=3,
        seq_len=2048,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
        policy=Policy(allow_cp=False),
    )
    with pytest.raises(SpecError) as scalar:
        search(spec, cluster, **kw)
    with pytest.raises(SpecError) as fast:
        search_fast(spec, cluster, **kw)
    assert str(fast.value) == str(scalar.value)


TINY = ModelSpec(vocab_size=4, d_model=64, n_layers=2, n_heads=8, d_ff=256, max_seq_len=64)


@pytest.mark.parametrize("fn", [search, search_fast], ids=["scalar", "fast"])
@pytest.mark.parametrize(
    "spec, seq_len, gbs",
    [(get_preset("llama-2-7b"), 4097, 8), (TINY, 64, 8)],
    ids=["odd-seq-len-cp", "vocab-below-tp"],
)
def test_search_only_builds_valid_plans(fn, spec, seq_len, gbs):
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8)
    result = fn(
        spec,
        cluster,
        global_batch=gbs,
        seq_len=seq_len,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )
    assert result.evaluated > 0
