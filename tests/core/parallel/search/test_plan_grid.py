"""The enumeration laid straight onto the product (`plan_grid.enumerate_plan_grid`) is the
product `product_grid.product_grid` derives from the flat plans, array for array: the same
axes and values, the same rows in the same order, every plan in the same cell, grad_accum 1
in the cells no plan holds. The flat plans read back from it (`ProductGrid.take`) are the
enumeration's, in its order (test_plan_enumeration.py checks that order against a plain
loop); a value over the product's last axes alone is gathered as if spread over all of it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.search.plan_grid import enumerate_plan_grid
from trainbudget.core.parallel.search.plan_space import Policy
from trainbudget.core.parallel.search.product_grid import product_grid
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.presets import get_preset

# name -> (model, gpu, n_gpus, global_batch, seq_len, policy)
SEARCHES = {
    "dense, HSDP": ("llama-3-70b", "h100-sxm", 1024, 512, 8192, Policy()),
    "MoE, ep": ("mixtral-8x7b", "h100-sxm", 64, 256, 4096, Policy()),
    "offload, unfused, vpp 8": (
        "llama-2-7b",
        "h100-sxm",
        64,
        512,
        4096,
        Policy(allow_offload=True, flash_attention=False, max_vpp=8, max_micro_batch=64),
    ),
    "no HSDP, some stages": (
        "gpt3-175b",
        "a100-80gb",
        512,
        1536,
        2048,
        Policy(hsdp=False, zero_stages=(0, 3), recompute=("full",)),
    ),
    "one node": ("llama-3-8b", "h100-sxm", 8, 8, 8192, Policy()),
}


def _grid(name):
    model, gpu, n, gbs, seq, policy = SEARCHES[name]
    cluster = Cluster(hardware=get_hardware(gpu), n_gpus=n)
    return enumerate_plan_grid(
        get_preset(model), cluster, global_batch=gbs, seq_len=seq, policy=policy
    )


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("name", SEARCHES)
def test_the_enumerated_product_is_the_one_derived_from_the_flat_plans(name):
    grid = _grid(name)
    flat = grid.take(np.arange(len(grid)))
    derived = product_grid(flat)
    assert derived is not None
    assert grid.shape == derived.shape
    assert _same(grid.at, derived.at)
    assert _same(grid.row, derived.row)
    assert np.array_equal(grid.row, grid.at % grid.shape[-1])
    for field, value in vars(derived.numbers).items():
        assert _same(getattr(grid.numbers, field), value), field


@pytest.mark.parametrize("name", SEARCHES)
def test_every_plan_is_in_its_own_cell_and_the_rows_run_in_pipeline_order(name):
    grid = _grid(name)
    assert len(np.unique(grid.at)) == len(grid)
    pp = np.ravel(grid.numbers.pp)
    assert np.all(np.diff(pp) >= 0)  # gpu_memory takes the rows in slices by pipeline degree


def test_a_subset_takes_the_same_plans_as_the_whole():
    grid = _grid("dense, HSDP")
    flat = grid.take(np.arange(len(grid)))
    index = np.arange(3, len(grid), 11)
    sub = grid.subset(index)
    assert np.array_equal(sub.row, sub.at % sub.shape[-1])
    for field, value in vars(sub.take(np.arange(len(index)))).items():
        whole = getattr(flat, field)
        assert _same(value, whole[index] if np.ndim(whole) else whole), field


def test_gathering_a_value_over_the_last_axes_is_gathering_it_spread():
    grid = _grid("MoE, ep")
    rng = np.random.default_rng(0)
    for k in range(len(grid.shape) + 1):
        value = rng.random((1,) * k + grid.shape[k:])  # over the last axes only
        spread = np.ravel(np.broadcast_to(value, grid.shape))[grid.at]
        assert np.array_equal(grid.gather(value), spread)
        assert np.array_equal(grid.gather(value[(0,) * k]), spread)  # without the leading 1s
    value = rng.random((*grid.shape[:-1], 1))  # not over the last axes: spread first
    assert np.array_equal(grid.gather(value), np.ravel(np.broadcast_to(value, grid.shape))[grid.at])


def test_no_layout_gives_an_empty_grid():
    """Without CP, tp * pp <= 8 * 32 of 1024 GPUs: dp >= 4 cannot divide a batch of 3."""
    model, gpu, _, _, seq, policy = SEARCHES["no HSDP, some stages"]
    cluster = Cluster(hardware=get_hardware(gpu), n_gpus=1024)
    grid = enumerate_plan_grid(
        get_preset(model),
        cluster,
        global_batch=3,
        seq_len=seq,
        policy=replace(policy, hsdp=True, allow_cp=False),
    )
    assert len(grid) == 0
    assert len(grid.take(np.arange(0))) == 0
