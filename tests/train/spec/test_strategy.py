"""train/spec/strategy.py: the table of strategies (each ZeRO stage on its PyTorch engine), the
strategy a plan's ZeRO stage and shard group run as, and the one device mesh each needs; every
refusal names the field, the value and the rule. Pure: no torch."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.train.spec.strategy import (
    STRATEGIES,
    alone_note,
    check_strategy,
    get_strategy,
    mesh_shape,
    strategy_for_plan,
)


def test_every_zero_stage_has_its_own_strategy():
    # issue 14: a ZeRO-1/2 plan never runs as plain DDP
    assert [strategy_for_plan(zero, 0) for zero in range(4)] == ["ddp", "zero1", "zero2", "fsdp"]
    assert strategy_for_plan(3, 2) == "hsdp"
    assert [get_strategy(name).zero for name in STRATEGIES] == [0, 1, 2, 3, 3]


def test_only_fsdp2_strategies_shard_parameters_and_zero2_keeps_them_gathered():
    assert [name for name in STRATEGIES if get_strategy(name).fsdp2] == ["zero2", "fsdp", "hsdp"]
    assert not get_strategy("zero2").reshard_after_forward
    assert get_strategy("fsdp").reshard_after_forward
    assert "ZeroRedundancyOptimizer" in get_strategy("zero1").engine
    assert "reshard_after_forward=False" in get_strategy("zero2").engine


def test_a_shard_group_below_zero3_is_refused():
    with pytest.raises(SpecError, match=r"zero_shard = 2.*ZeRO-3 only.*zero=2"):
        strategy_for_plan(2, 2)


@pytest.mark.parametrize(
    ("strategy", "world", "shard", "axes", "sizes"),
    [
        ("ddp", 4, 0, ("dp",), (4,)),
        ("zero1", 2, 0, ("dp",), (2,)),
        ("zero2", 4, 0, ("dp",), (4,)),
        ("fsdp", 8, 0, ("dp",), (8,)),
        ("hsdp", 4, 2, ("dp_replicate", "dp_shard"), (2, 2)),
        ("hsdp", 8, 2, ("dp_replicate", "dp_shard"), (4, 2)),
        ("hsdp", 4, 4, ("dp_replicate", "dp_shard"), (1, 4)),
    ],
)
def test_one_mesh_with_named_axes(strategy, world, shard, axes, sizes):
    shape = mesh_shape(strategy, world_size=world, zero_shard=shard)
    assert (shape.axes, shape.sizes) == (axes, sizes)


@pytest.mark.parametrize(
    ("strategy", "world", "shard", "field", "needle"),
    [
        ("hsdp", 4, 3, "zero_shard", "divide the processes (4)"),
        ("hsdp", 4, 0, "zero_shard", "must be >= 1"),
        ("fsdp", 4, 2, "zero_shard", "hsdp only (this run: fsdp)"),
        ("zero3", 4, 0, "strategy", "ddp, zero1, zero2, fsdp, hsdp"),
    ],
)
def test_a_mesh_that_does_not_fit_names_the_field(strategy, world, shard, field, needle):
    with pytest.raises(SpecError) as err:
        mesh_shape(strategy, world_size=world, zero_shard=shard)
    assert err.value.field == field and needle in err.value.rule


def test_zero1_refuses_master_weights_under_torchrun_only():
    with pytest.raises(SpecError, match=r"precision = 'bf16-mixed'.*zero2, fsdp"):
        check_strategy("zero1", zero_shard=0, world_size=2, precision="bf16-mixed")
    check_strategy("zero1", zero_shard=0, world_size=1, precision="bf16-mixed")  # alone: no wrapper
    check_strategy("zero2", zero_shard=0, world_size=2, precision="bf16-mixed")


def test_a_sharding_strategy_in_one_process_is_said_not_silent():
    # `train --strategy fsdp` without torchrun ran unwrapped and said nothing
    assert alone_note("ddp", world_size=1) is None
    assert alone_note("fsdp", world_size=4) is None
    assert alone_note("fsdp", world_size=1) == (
        "strategy fsdp shards over several processes and this run has one: it runs unwrapped "
        "(single); launch it with torchrun --nproc-per-node N to run fsdp"
    )
