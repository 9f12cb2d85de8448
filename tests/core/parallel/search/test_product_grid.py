"""The product grid (`search.product_grid`): each plan of a search sits in one cell of the
product, holding its own fields; evaluated on the product, memory and step time are, bit for
bit, what the same term functions give on the list of plans (no formula is rewritten, only the
shapes of the arrays change); a set of plans that is no near-product, or whose grad_accum is not
one number per (micro-batch, row), is left to the list."""

from __future__ import annotations

import numpy as np
import pytest

from trainbudget.core.ops import numpy_ops
from trainbudget.core.parallel import layout
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.search import product_grid as grids
from trainbudget.core.parallel.search.plan_grid import enumerate_plan_arrays
from trainbudget.core.parallel.search.plan_space import Policy
from trainbudget.core.parallel.search.planner_fast import memory_arrays, step_arrays
from trainbudget.core.parallel.search.product_grid import per_distinct_rows, product_grid
from trainbudget.core.parallel.timing.compute_time import COMPUTE_FIELDS, micro_batch_terms
from trainbudget.core.spec.frameworks import FRAMEWORKS
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

# name -> (model, gpu, n_gpus, global_batch, seq_len, policy, framework)
SEARCHES = {
    "dense, HSDP": ("llama-3-70b", "h100-sxm", 256, 512, 8192, Policy(), "generic"),
    "MoE, ep": ("mixtral-8x7b", "h100-sxm", 64, 256, 4096, Policy(), "megatron"),
    "offload, unfused": (
        "llama-2-7b",
        "h100-sxm",
        64,
        512,
        4096,
        Policy(allow_offload=True, flash_attention=False),
        "deepspeed",
    ),
    # whole-tensor optimizer sharding: the optimizer share is an array over the rows
    "trainbudget engines": ("llama-3-8b", "h100-sxm", 32, 64, 8192, Policy(), "trainbudget"),
}


def _search(name):
    model, gpu, n, gbs, seq, policy, framework = SEARCHES[name]
    spec, cluster = get_preset(model), Cluster(hardware=get_hardware(gpu), n_gpus=n)
    plans = enumerate_plan_arrays(spec, cluster, global_batch=gbs, seq_len=seq, policy=policy)
    kw = dict(
        seq_len=seq,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
        framework=FRAMEWORKS[framework],
    )
    return spec, cluster, plans, kw


@pytest.mark.parametrize("name", SEARCHES)
def test_every_plan_sits_in_a_cell_holding_its_fields(name):
    _, _, plans, _ = _search(name)
    grid = product_grid(plans)
    assert grid is not None
    assert len(np.unique(grid.at)) == len(plans)  # one plan per cell
    for field, values in vars(plans).items():
        got = grid.gather(getattr(grid.numbers, field))
        assert np.array_equal(got, np.broadcast_to(values, len(plans))), field


@pytest.mark.parametrize("name", SEARCHES)
def test_the_product_gives_the_list_s_numbers_exactly(name, monkeypatch):
    spec, cluster, plans, kw = _search(name)
    on_product = memory_arrays(spec, plans, **kw), step_arrays(spec, cluster, plans, **kw)
    monkeypatch.setattr(grids, "MAX_CELLS_PER_PLAN", 0.0)  # every set left to the list
    monkeypatch.setattr(layout, "GRID_CHUNK", 1000)
    on_list = memory_arrays(spec, plans, **kw), step_arrays(spec, cluster, plans, **kw)
    for product, listed in zip(on_product, on_list, strict=True):
        assert np.array_equal(product, listed)


def test_a_subset_keeps_its_plans_cells():
    spec, cluster, plans, kw = _search("dense, HSDP")
    grid = product_grid(plans)
    index = np.flatnonzero(plans.zero_shard > 0)[::7]
    sub = grid.subset(index)
    assert sub.shape[-1] < grid.shape[-1]  # only the rows holding the subset
    for field in ("dp", "tp", "zero_shard", "micro_batch", "grad_accum", "zero"):
        got = sub.gather(getattr(sub.numbers, field))
        assert np.array_equal(got, getattr(plans, field)[index]), field
    step = step_arrays(spec, cluster, plans.take(index), grid=sub, **kw)
    assert np.array_equal(step, step_arrays(spec, cluster, plans, **kw)[index])


def test_a_search_s_product_holds_under_2_cells_per_plan():
    """The module docstring's figure (1.82 here), on the benchmark's issue case (53,202
    plans)."""
    spec = get_preset("llama-3-70b")
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=1024)
    plans = enumerate_plan_arrays(spec, cluster, global_batch=512, seq_len=8192)
    grid = product_grid(plans)
    assert np.prod(grid.shape) / len(plans) < 2


def test_scattered_plans_are_left_to_the_list():
    plans = PlanNumbers.of_many(
        [
            Plan(dp=8, tp=1, pp=1, zero=0, micro_batch=1, grad_accum=8),
            Plan(dp=1, tp=8, pp=1, zero=1, micro_batch=2, grad_accum=4, recompute="full"),
            Plan(dp=2, tp=2, pp=2, zero=2, micro_batch=4, grad_accum=2, sp=True),
            Plan(dp=4, tp=1, pp=2, zero=3, micro_batch=8, grad_accum=1, ep=2),
        ]
    )
    assert product_grid(plans) is None  # 4 rows x 4 micro-batches x 4 stages x ... cells


def test_plans_disagreeing_on_grad_accum_in_one_cell_are_left_to_the_list():
    plans = PlanNumbers.of_many(
        [
            Plan(dp=8, tp=1, pp=1, zero=0, micro_batch=1, grad_accum=8),
            Plan(dp=8, tp=1, pp=1, zero=1, micro_batch=1, grad_accum=4),
        ]
    )
    assert product_grid(plans) is None


def _micro_batch_kw(kw):
    return {k: v for k, v in kw.items() if k != "optimizer"} | {"xp": numpy_ops()}


def test_one_micro_batch_s_compute_once_per_layout_is_the_one_of_every_row():
    """The step's micro-batch compute, computed once per distinct model-parallel layout of the
    product's rows (COMPUTE_FIELDS) and laid back on every row, is the one computed on every
    row: bit for bit."""
    spec, cluster, plans, kw = _search("dense, HSDP")
    numbers = product_grid(plans).numbers
    kw = _micro_batch_kw(kw)
    whole = micro_batch_terms(spec, numbers, cluster, **kw)

    def once(seen):
        return micro_batch_terms(spec, seen, cluster, **kw)

    per_layout = per_distinct_rows(once, numbers, COMPUTE_FIELDS)
    for name, value in vars(whole).items():
        assert np.array_equal(np.broadcast_arrays(getattr(per_layout, name), value)[0], value)


def test_a_term_reading_a_field_it_did_not_declare_fails():
    spec, cluster, plans, kw = _search("dense, HSDP")
    numbers = product_grid(plans).numbers
    kw = _micro_batch_kw(kw)
    fields = tuple(f for f in COMPUTE_FIELDS if f != "cp")  # cp is read

    def once(seen):
        return micro_batch_terms(spec, seen, cluster, **kw)

    with pytest.raises(AttributeError, match="outside its declared fields"):
        per_distinct_rows(once, numbers, fields)
