"""Engines and loss kernels as data: every row sourced, every framework naming five engines
(no data parallelism, ZeRO 0-3) and a loss kernel that exist, bad names refused in one line."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.engines import (
    ENGINE_COLUMNS,
    ENGINES,
    LOSS_KERNELS,
    get_engine,
    get_loss_kernel,
)
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC


def test_every_row_has_its_source_and_every_column():
    for name, engine in ENGINES.items():
        assert engine.name == name and engine.source
        for column in ENGINE_COLUMNS:
            assert isinstance(getattr(engine, column), bool | int)
    for name, kernel in LOSS_KERNELS.items():
        assert kernel.name == name and kernel.source


def test_every_framework_names_engines_and_a_loss_kernel_that_exist():
    for fw in FRAMEWORKS.values():
        assert len(fw.engines) == 5
        assert all(name in ENGINES for name in fw.engines)
        assert fw.loss_kernel in LOSS_KERNELS


def test_megatron_keeps_no_logits_and_backs_up_in_place():
    # Megatron-Core cross_entropy.py: the fp32 softmax saved and turned into the gradient
    megatron = get_loss_kernel(FRAMEWORKS["megatron"].loss_kernel)
    torch_ce = get_loss_kernel(GENERIC.loss_kernel)
    assert not megatron.keeps_logits and megatron.backward_fp32_tensors == 0
    assert torch_ce.keeps_logits and torch_ce.backward_fp32_tensors == 2


def test_unknown_names_are_refused_naming_the_known_ones():
    with pytest.raises(SpecError, match="engine") as err:
        get_engine("ddp2")
    assert "ddp+zero-redundancy" in str(err.value)
    with pytest.raises(SpecError, match="loss kernel"):
        get_loss_kernel("fused")
    with pytest.raises(SpecError, match=r"generic\.engines"):
        dataclasses.replace(GENERIC, engines=("reference", "ddp", "ddp", "ddp", "nccl"))
    with pytest.raises(SpecError, match="loss kernel"):
        dataclasses.replace(GENERIC, loss_kernel="liger")
