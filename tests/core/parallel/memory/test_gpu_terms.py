"""The terms gpu_peak composes: each plan's engine row by its ZeRO stage (one number where the
rows agree), the update's largest tensor, the pipeline schedule's buffers."""

from __future__ import annotations

import numpy as np
import pytest

from trainbudget.core.ops import numpy_ops
from trainbudget.core.parallel.memory.gpu_terms import engine_columns
from trainbudget.core.spec.frameworks import GENERIC, TRAINBUDGET


def test_each_plan_reads_the_engine_of_its_zero_stage():
    zero = np.array([0, 1, 2, 3, 3])
    alone = np.array([False, False, False, False, True])
    cols = engine_columns(TRAINBUDGET, zero, alone, numpy_ops())
    # ddp, ddp+zero-redundancy, fsdp2-no-reshard, fsdp2, and single for the lone rank
    assert cols.gradient_buckets.tolist() == [True, True, False, False, False]
    assert cols.whole_tensor_shards.tolist() == [False, True, False, False, False]
    assert cols.gathered_until_backward.tolist() == [False, False, True, False, False]
    assert cols.unit_backward.tolist() == [False, False, True, True, False]


def test_a_column_the_rows_agree_on_stays_one_number():
    zero = np.array([0, 1, 2, 3])
    cols = engine_columns(TRAINBUDGET, zero, np.zeros(4, dtype=bool), numpy_ops())
    assert cols.torch_pipelining is True  # every trainer engine runs torch's pipelining
    # the generic row: ZeRO buckets whatever the stage; the reference step alone differs
    alone = np.array([False, False, True, False])
    generic = engine_columns(GENERIC, zero, alone, numpy_ops())
    assert generic.layer_gather.tolist() == [True, True, False, True]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_one_plan_gets_numbers(zero):
    cols = engine_columns(TRAINBUDGET, zero, False)
    assert isinstance(cols.gradient_buckets, bool) and isinstance(cols.buckets_in_flight, int)
