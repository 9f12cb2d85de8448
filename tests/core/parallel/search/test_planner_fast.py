"""The planner's grid against one plan at a time: the grid evaluates every plan through the
same term functions as `evaluate` (numpy arrays instead of numbers), so the two must agree to
rounding (rel 1e-12) on every plan of a dense, a MoE and a long-context search, and on a fixed
sample of larger ones; the search returns the brute-force optimum; HSDP shard sizes are
enumerated as `planner.hsdp_shards` says."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel import layout
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.fits import allocated_limit_bytes, n_communicators, rule_for
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.search import planner_fast
from trainbudget.core.parallel.search.plan_grid import enumerate_plan_arrays, enumerate_plans
from trainbudget.core.parallel.search.plan_space import Policy, hsdp_shards
from trainbudget.core.parallel.search.planner import evaluate
from trainbudget.core.parallel.search.planner_fast import PlanArrays, evaluate_arrays, search_fast
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC
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
    # sliding-window and global layers mixed per stage, QK-norm, post-norms
    "gemma-3-1b/16xh100/32k": (
        "gemma-3-1b",
        "h100-sxm",
        16,
        32,
        32768,
        "bf16-mixed",
        "adamw",
        Policy(),
    ),
    # MLA, dense layers before the MoE ones
    "deepseek-v3/256xh800": (
        "deepseek-v3",
        "h800",
        256,
        512,
        4096,
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


def _agree(spec, cluster, arrays, index, kw, causal=False):
    step, memory, tokens = evaluate_arrays(spec, cluster, arrays, causal=causal, **kw)
    for i in index:
        ref = evaluate(spec, arrays.plan(int(i)), cluster, causal=causal, **kw)
        assert step[i] == pytest.approx(ref.time.step_seconds, rel=1e-12, abs=0)
        assert memory[i] == pytest.approx(ref.memory.total_bytes, rel=1e-12, abs=0)
        assert tokens[i] == ref.time.tokens_per_step


@pytest.mark.parametrize("case", list(CASES))
def test_grid_equals_one_plan_at_a_time_on_a_sample(case):
    spec, cluster, _, _, kw = _setup(case)
    arrays = _arrays(case)
    index = np.arange(len(arrays))
    if len(arrays) > SAMPLE:
        index = np.sort(np.random.default_rng(0).choice(len(arrays), SAMPLE, replace=False))
    _agree(spec, cluster, arrays, index, kw)


def test_grid_equals_one_plan_at_a_time_under_a_causal_mask():
    spec, cluster, _, _, kw = _setup("llama-3-8b/32xh100/cp")
    arrays = _arrays("llama-3-8b/32xh100/cp")
    _agree(spec, cluster, arrays, range(0, len(arrays), 7), kw, causal=True)
    spec, cluster, _, _, kw = _setup("gemma-3-1b/16xh100/32k")  # the band's causal tiles
    arrays = _arrays("gemma-3-1b/16xh100/32k")
    _agree(spec, cluster, arrays, range(0, len(arrays), 7), kw, causal=True)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_grid_equals_one_plan_at_a_time_under_every_framework_row(name):
    """Each row's switches (fp32 reductions, per-micro-batch reduce-scatters, FSDP2's copy-out,
    the legacy pipeline scatter/gather, per-tensor ZeRO-3) in the array path as in the one-plan
    path: ZeRO-3 and pipeline plans without SP are among these."""
    spec, cluster, _, _, kw = _setup("gpt3-175b/512xa100")
    arrays = _arrays("gpt3-175b/512xa100")
    no_sp = (arrays.pp > 1) & (arrays.tp > 1) & ~arrays.sp.astype(bool)
    assert (arrays.zero == 3).any() and no_sp.any()
    kw = dict(kw, framework=FRAMEWORKS[name])
    _agree(spec, cluster, arrays, range(0, len(arrays), max(1, len(arrays) // 300)), kw)


# every plan of three searches (4 nodes or 2: HSDP shard sizes are among them)
EVERY = {
    "dense: llama-2-7b/32xh100": ("llama-2-7b", 32, 128, 4096),
    "moe: mixtral-8x7b/16xh100": ("mixtral-8x7b", 16, 64, 4096),
    "long context: llama-3-8b/16xh100/32k": ("llama-3-8b", 16, 16, 32768),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EVERY))
def test_grid_equals_one_plan_at_a_time_on_every_plan(case):
    model, n, gbs, seq = EVERY[case]
    spec, cluster = get_preset(model), Cluster(hardware=get_hardware("h100-sxm"), n_gpus=n)
    kw = dict(seq_len=seq, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))
    arrays = enumerate_plan_arrays(spec, cluster, global_batch=gbs, seq_len=seq)
    assert (arrays.zero_shard > 0).any()
    _agree(spec, cluster, arrays, range(len(arrays)), kw)


def test_codes_the_search_never_enumerates_agree_too():
    """NVMe offload, parameter offload, GPipe, HSDP, partial recomputation and per-op
    selective recomputation (selective-op) on hand-made plans."""
    spec, cluster, _, _, kw = _setup("llama-2-7b/64xh100/offload")
    plans = [
        Plan(dp=16, tp=4, zero=z, sp=True, micro_batch=2, grad_accum=16, offload_optimizer=off)
        for z in (1, 2, 3)
        for off in ("none", "cpu", "nvme")
    ]
    plans += [
        Plan(dp=16, tp=4, zero=3, micro_batch=2, grad_accum=16, offload_params=off, zero_shard=s)
        for off in ("cpu", "nvme")
        for s in (0, 2, 8)
    ]
    plans += [
        Plan(dp=8, tp=2, pp=4, schedule="gpipe", micro_batch=1, grad_accum=64, zero=z)
        for z in (0, 1)
    ]
    plans += [
        Plan(dp=8, tp=4, pp=2, sp=True, micro_batch=1, grad_accum=64, recompute="full",
             recompute_every=k, flash_attention=flash)
        for k in (1, 3, 16)
        for flash in (False, True)
    ]  # fmt: skip
    plans += [  # uneven pipeline splits of 2 stages (a grid row keeps up to 3 exactly)
        Plan(dp=8, tp=4, pp=2, sp=True, grad_accum=64, pp_layers=(15, 17), zero=z)
        for z in (0, 1, 3)
    ]
    plans += [
        Plan(dp=8, tp=tp, pp=8 // tp, sp=sp, micro_batch=1, grad_accum=64,
             recompute="selective-op", flash_attention=flash)
        for tp, sp in ((1, False), (4, False), (4, True))
        for flash in (False, True)
    ]  # fmt: skip
    arrays = PlanArrays.of_many(plans)
    assert arrays.plans() == plans
    _agree(spec, cluster, arrays, range(len(plans)), kw)


def test_uneven_pipeline_splits_agree_with_one_plan_at_a_time():
    """Uneven splits of 4 and 8 stages (heavy first, middle or last stage), with offload,
    GPipe and partial recomputation: the grid's numbers against `evaluate` of each plan."""
    spec, cluster, _, _, kw = _setup("llama-2-7b/64xh100/offload")
    splits = [(7, 9, 8, 8), (8, 8, 9, 7), (10, 8, 8, 6), (8, 11, 6, 7)]
    plans = [
        Plan(dp=8, tp=2, pp=4, sp=True, grad_accum=16, pp_layers=s, zero=z)
        for s in splits
        for z in (0, 1, 3)
    ]
    plans += [
        Plan(dp=8, tp=2, pp=4, grad_accum=16, pp_layers=(7, 9, 8, 8), schedule="gpipe"),
        Plan(dp=8, tp=2, pp=4, grad_accum=16, pp_layers=(8, 8, 9, 7), zero=1,
             offload_optimizer="cpu"),
        Plan(dp=8, tp=1, pp=8, grad_accum=16, pp_layers=(3, 4, 4, 4, 5, 4, 4, 4),
             recompute="full", recompute_every=3),
    ]  # fmt: skip
    step, memory, _ = evaluate_arrays(spec, cluster, PlanArrays.of_many(plans), **kw)
    for i, plan in enumerate(plans):
        ref = evaluate(spec, plan, cluster, **kw)
        assert step[i] == pytest.approx(ref.time.step_seconds, rel=1e-12, abs=0)
        assert memory[i] == pytest.approx(ref.memory.total_bytes, rel=1e-12, abs=0)


def test_a_grid_in_chunks_gives_the_numbers_of_the_whole(monkeypatch):
    """evaluate_arrays takes layout.GRID_CHUNK plans at a time; chunks of 4 over a mix of even and
    uneven splits (the middle stage's term computed for some chunks only) give the very
    numbers one pass over the whole grid gives."""
    spec, cluster, _, _, kw = _setup("llama-2-7b/64xh100/offload")
    plans = [
        Plan(dp=8, tp=2, pp=4, grad_accum=16, pp_layers=layers, zero=z)
        for layers in ((), (7, 9, 8, 8), (), (10, 8, 8, 6))
        for z in (0, 1, 3)
    ] + [Plan(dp=16, tp=2, pp=2, grad_accum=8, zero=1, offload_optimizer="cpu")]
    grid = PlanArrays.of_many(plans)
    whole = evaluate_arrays(spec, cluster, grid, **kw)
    monkeypatch.setattr(layout, "GRID_CHUNK", 4)
    chunked = evaluate_arrays(spec, cluster, grid, **kw)
    for a, b in zip(whole, chunked, strict=True):
        assert np.array_equal(a, b)


def test_hsdp_shard_sizes_are_enumerated_for_zero_plans():
    spec, cluster, gbs, policy, kw = _setup("llama-2-7b/64xh100/offload")
    arrays = _arrays("llama-2-7b/64xh100/offload")
    plans = arrays.plans()
    hsdp = [p for p in plans if p.zero_shard]
    assert hsdp and all(p.zero >= 1 for p in hsdp)
    shards_of = Counter()  # full-sharding twin -> its HSDP shard sizes
    for q in hsdp:
        shards_of[replace(q, zero_shard=0), q.zero_shard] += 1
    for p in plans:
        if p.zero and not p.zero_shard:
            want = hsdp_shards(p.dp, p.tp, p.cp, cluster.gpus_per_node)
            assert [s for s in want if shards_of[p, s] == 1] == want
    assert sum(shards_of.values()) == len(hsdp)
    for p in hsdp[:: max(1, len(hsdp) // 200)]:
        validate_plan(p, spec, n_gpus=cluster.n_gpus, seq_len=kw["seq_len"], global_batch=gbs)
    off = enumerate_plan_arrays(
        spec, cluster, global_batch=gbs, seq_len=kw["seq_len"], policy=replace(policy, hsdp=False)
    )
    assert not off.zero_shard.any()
    assert len(off) == len(plans) - len(hsdp)


@pytest.mark.parametrize(
    "dp, tp, cp, want",
    [
        (64, 1, 1, [8, 16, 32]),  # the node's 8 dp ranks and their multiples, short of 64
        (16, 2, 1, [4, 8]),
        (8, 8, 1, [2, 4]),  # a node holds one dp rank: every divisor but a group of 1
        (8, 1, 1, []),  # dp fits in a node: full sharding is the only choice
        (4, 8, 2, [1, 2]),  # with cp, one dp rank still shards over the cp ranks
    ],
)
def test_hsdp_shards(dp, tp, cp, want):
    assert hsdp_shards(dp, tp, cp, 8) == want


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
def _search(case: str):
    spec, cluster, kw = _small(case)
    return search_fast(spec, cluster, **kw)


@pytest.mark.parametrize("case", list(SMALL))
def test_best_plan_is_the_brute_force_optimum(case):
    spec, cluster, kw = _small(case)
    fast = _search(case)
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
        p, rule = best.plan, rule_for(Policy().memory_headroom, GENERIC.name)
        comms = n_communicators(p.dp, p.tp, p.pp, p.cp)
        limit = allocated_limit_bytes(cluster.hardware.usable_memory_bytes, rule, comms)
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
    with pytest.raises(SpecError, match=r"^gpus = 1024: no valid layout of gpt3-175b"):
        search_fast(spec, cluster, **kw)


TINY = ModelSpec(vocab_size=4, d_model=64, n_layers=2, n_heads=8, d_ff=256, max_seq_len=64)


@pytest.mark.parametrize(
    "spec, seq_len, gbs",
    [(get_preset("llama-2-7b"), 4097, 8), (TINY, 64, 8)],
    ids=["odd-seq-len-cp", "vocab-below-tp"],
)
def test_search_only_builds_valid_plans(spec, seq_len, gbs):
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8)
    result = search_fast(
        spec,
        cluster,
        global_batch=gbs,
        seq_len=seq_len,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )
    assert result.evaluated > 0


def test_ranking_the_top_plans_is_ranking_them_all_then_cutting():
    """The ranking sorts only the plans that can be among the `top`; its answer is the rule
    applied to every plan: the plans tied with the fastest (TIE_TOLERANCE) first, by parallel
    axes, model-parallel degree, memory, time; then the rest by time, then memory; full ties in
    enumeration order. Times and memories drawn from a few values, so ties abound."""
    from trainbudget.core.parallel.search.plan_space import (
        TIE_TOLERANCE,
        model_parallel_degree,
        parallel_axes,
    )

    spec, cluster = get_preset("llama-2-7b"), Cluster(hardware=get_hardware("h100-sxm"), n_gpus=64)
    grid = enumerate_plan_arrays(spec, cluster, global_batch=512, seq_len=4096)
    rng = np.random.default_rng(0)
    # a handful tie with the fastest, so that the slower plans fill most of a top 40
    spt = rng.choice(
        [1.0, 1.0005, 1.002, 1.5, 2.0], size=len(grid), p=[1e-3, 1e-3, 0.1, 0.4, 0.498]
    )
    mem = rng.choice([4e9, 5e9, 6e9], size=len(grid))
    ax, deg = parallel_axes(grid), model_parallel_degree(grid)
    fastest = spt.min()

    def key(i):
        if spt[i] <= fastest * (1 + TIE_TOLERANCE):
            return (0, ax[i], deg[i], mem[i], spt[i], i)
        return (1, spt[i], mem[i], i)

    every = sorted(range(len(grid)), key=key)
    fitting = np.arange(len(grid)) + 7  # grid indices need not be row numbers
    assert 0 < sum(spt <= fastest * (1 + TIE_TOLERANCE)) < 40
    for top in (1, 5, 40, 3000, len(grid)):
        got = planner_fast._rank_fitting(fitting, grid, spt, mem, top)
        assert got.tolist() == [i + 7 for i in every[:top]], top
