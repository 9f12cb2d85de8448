"""The collectives the step model charges per step (core.parallel.timing.comm_volume): read off the
step time's own Communication, so their bytes are the ones the step time is computed from.

Figures: Llama 2 7B has 6,738,415,616 parameters (tests/core/spec/test_presets.py); the
bytes per collective follow core.parallel.timing.comm's convention (all-reduce and reduce-scatter
the per-rank input, all-gather the gathered output)."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.comm_volume import planned_collectives
from trainbudget.core.parallel.timing.step_time import step_terms, step_time
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

FP32, BF16 = get_precision("fp32"), get_precision("bf16-mixed")
ADAMW = get_optimizer("adamw")
H100 = get_hardware("h100-sxm")
L2_7B = get_preset("llama-2-7b")
L2_7B_PARAMS = 6_738_415_616
SEQ = 4096


def planned(plan: Plan, precision=FP32):
    cluster = Cluster(hardware=H100, n_gpus=plan.n_gpus)
    kw = dict(seq_len=SEQ, precision=precision, optimizer=ADAMW)
    return planned_collectives(step_terms(L2_7B, plan, cluster, **kw).comm)


def by_kind(rows) -> dict[tuple[str, str], tuple[float, float, int]]:
    return {(r.category, r.kind): (r.n_bytes, r.count, r.group_size) for r in rows}


def test_one_gpu_has_no_collectives():
    assert planned(Plan()) == ()


def test_ddp_all_reduces_the_gradients_once_per_step():
    rows = by_kind(planned(Plan(dp=4, grad_accum=3)))
    assert rows == {("dp_grad_reduce", "all_reduce"): (L2_7B_PARAMS * 4, 1, 4)}


@pytest.mark.parametrize("zero", [1, 2])
def test_zero12_reduce_scatter_and_gather_once(zero):
    rows = by_kind(planned(Plan(dp=4, zero=zero, grad_accum=2)))
    assert rows == {
        ("dp_grad_reduce", "reduce_scatter"): (L2_7B_PARAMS * 4, 1, 4),
        ("dp_param_gather", "all_gather"): (L2_7B_PARAMS * 4, 1, 4),
    }


def totals(rows) -> dict[tuple[str, str], tuple[float, float, int]]:
    """(category, kind) -> (bytes over the step, calls, group size)."""
    return {(r.category, r.kind): (r.n_bytes * r.count, r.count, r.group_size) for r in rows}


# ZeRO-3 is timed layer by layer (core.parallel.timing.comm_time): one gather and one reduce-scatter
# per layer, each a layer's share of the model's bytes -- Llama 2 7B's 32 layers
L2_7B_LAYERS = 32


def test_zero3_gathers_for_forward_and_backward_of_every_micro_batch():
    rows = totals(planned(Plan(dp=4, zero=3, grad_accum=2), BF16))
    gathers = 4  # forward and backward of each of the 2 micro-batches
    assert rows[("dp_param_gather", "all_gather")] == pytest.approx(
        (L2_7B_PARAMS * 2 * gathers, L2_7B_LAYERS * gathers, 4)
    )
    assert rows[("dp_grad_reduce", "reduce_scatter")] == pytest.approx(
        (L2_7B_PARAMS * 2, L2_7B_LAYERS, 4)
    )


def test_hsdp_all_reduces_the_shards_across_the_replicas():
    rows = totals(planned(Plan(dp=4, zero=3, zero_shard=2)))
    assert rows[("dp_replica_all_reduce", "all_reduce")] == pytest.approx(
        (L2_7B_PARAMS * 4 / 2, L2_7B_LAYERS, 2)
    )
    assert rows[("dp_grad_reduce", "reduce_scatter")] == pytest.approx(
        (L2_7B_PARAMS * 4, L2_7B_LAYERS, 2)
    )
    assert rows[("dp_param_gather", "all_gather")] == pytest.approx(
        (L2_7B_PARAMS * 4 * 2, L2_7B_LAYERS * 2, 2)
    )


@pytest.mark.parametrize(
    "plan",
    [Plan(dp=4, zero=3, zero_shard=2), Plan(dp=2, tp=4, sp=True, grad_accum=2), Plan(dp=2, pp=4)],
)
def test_the_rows_are_the_step_times_collectives(plan):
    # one formula: the categories the step time charges time to are the rows' categories
    cluster = Cluster(hardware=H100, n_gpus=plan.n_gpus)
    t = step_time(L2_7B, plan, cluster, seq_len=SEQ, precision=FP32, optimizer=ADAMW)
    names = {
        "zero3_gather" if r.category == "dp_param_gather" and plan.zero == 3 else r.category
        for r in planned(plan)
    }
    assert names == set(t.comm_seconds)
