"""comm.json's comparison (train.observe.comm_report), pure: the rows, the named differences of each
engine, the summary. Bytes in core.parallel.timing.comm's convention; the engines' behaviour they
name is measured on real runs in test_comm_count.py."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.timing.comm_volume import PlannedCollective
from trainbudget.train.observe.comm_differences import PADDING, ZERO1_ENGINE, RunFacts
from trainbudget.train.observe.comm_report import TRAINER, comm_document, comm_summary, compare

N = 1000 * 4  # bytes of 1,000 fp32 parameters (illustrative)
# a 257-row embedding of width 32 and a 32-wide norm, fp32: 257 rows pad to 258 on 2 ranks
SHAPES = (((257, 32), 4), ((32,), 4))
PLAIN = (257 * 32 + 32) * 4


def pc(category, kind, n_bytes, count=1, group=2) -> PlannedCollective:
    return PlannedCollective(
        category=category, kind=kind, n_bytes=n_bytes, count=count, group_size=group
    )


def facts(strategy, mesh, grad_accum=1, shapes=SHAPES) -> RunFacts:
    return RunFacts(strategy=strategy, mesh=mesh, grad_accum=grad_accum, param_shapes=shapes)


def rows_by_key(rows):
    return {(r.axis, r.op): r for r in rows}


def test_ddp_equal_bytes_in_buckets():
    planned = (pc("dp_grad_reduce", "all_reduce", N),)
    measured = {("dp", "all_reduce"): (N, 3), ("trainer", "all_reduce"): (40, 1)}
    rows = rows_by_key(compare(measured, planned, facts("ddp", {"dp": 2})))
    dp = rows[("dp", "all_reduce")]
    assert dp.equal and dp.explained and dp.count == 3 and dp.predicted_count == 1
    assert "DDP's gradient buckets" in dp.difference
    trainer = rows[("trainer", "all_reduce")]
    assert trainer.predicted_bytes == 0 and trainer.difference == TRAINER
    summary = comm_summary(list(rows.values()))
    assert summary["all_equal"] and summary["all_explained"]  # the trainer row aside
    assert summary["bytes_per_axis"]["dp"] == {"measured": N, "predicted": N}


def test_zero1_is_all_reduce_and_broadcast_of_the_cores_bytes():
    planned = (pc("dp_grad_reduce", "reduce_scatter", N), pc("dp_param_gather", "all_gather", N))
    measured = {("dp", "all_reduce"): (N, 1), ("dp", "broadcast"): (N, 28)}
    rows = rows_by_key(compare(measured, planned, facts("zero1", {"dp": 2})))
    assert set(rows) == {
        ("dp", op) for op in ("all_reduce", "broadcast", "reduce_scatter", "all_gather")
    }
    for r in rows.values():
        assert r.explained and not r.equal and ZERO1_ENGINE in r.difference
    assert rows[("dp", "reduce_scatter")].measured_bytes == 0


def test_a_wrong_byte_is_not_explained():
    planned = (pc("dp_grad_reduce", "all_reduce", N),)
    rows = compare({("dp", "all_reduce"): (N + 4, 1)}, planned, facts("ddp", {"dp": 2}))
    assert not rows[0].equal and not rows[0].explained
    assert comm_summary(rows)["all_explained"] is False


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_fsdp2_pads_and_zero2_gathers_every_micro_batch(grad_accum):
    planned = (
        pc("dp_grad_reduce", "reduce_scatter", PLAIN),
        pc("dp_param_gather", "all_gather", PLAIN),
    )
    padded = (258 * 32 + 32) * 4
    measured = {
        ("dp", "reduce_scatter"): (padded, 2),
        ("dp", "all_gather"): (padded * grad_accum, 2 * grad_accum),
    }
    rows = rows_by_key(compare(measured, planned, facts("zero2", {"dp": 2}, grad_accum)))
    for r in rows.values():
        assert r.explained and not r.equal
        assert PADDING.format(shard=2) in r.difference
    assert ("micro-batches" in rows[("dp", "all_gather")].difference) == (grad_accum > 1)


def test_hsdp_rows_by_axis():
    planned = (
        pc("dp_grad_reduce", "reduce_scatter", PLAIN),
        pc("dp_replica_all_reduce", "all_reduce", PLAIN / 2),
        pc("dp_param_gather", "all_gather", PLAIN, count=2),
    )
    padded = (258 * 32 + 32) * 4
    measured = {
        ("dp_shard", "reduce_scatter"): (padded, 2),
        ("dp_replicate", "all_reduce"): (padded // 2, 2),
        ("dp_shard", "all_gather"): (2 * padded, 4),
    }
    mesh = {"dp_replicate": 2, "dp_shard": 2}
    rows = compare(measured, planned, facts("hsdp", mesh))
    assert all(r.explained for r in rows) and len(rows) == 3


def test_no_counted_step_and_one_process():
    planned = (pc("dp_grad_reduce", "all_reduce", N),)
    doc = comm_document(
        None, planned, facts("ddp", {"dp": 2}), plan="dp2", counted_step=3, same_on_every_rank=True
    )
    assert doc["rows"][0]["measured_bytes"] is None and doc["counted"] is None
    assert doc["summary"]["all_explained"] is False and "not measured" in doc["notes"][0]
    alone = comm_document(
        None, (), facts("ddp", {}), plan="dp1", counted_step=None, same_on_every_rank=True
    )
    assert alone["rows"] == [] and alone["summary"]["all_equal"] is None


# -- tp, pp, ep: the layouts' named differences (measured on real runs in test_comm_count.py) --

A = 32 * 32 * 4  # one micro-batch's hidden state: 32 tokens x d_model 32, fp32 (illustrative)
T = 32  # tokens per micro-batch


def layout_facts(mesh, **extra) -> RunFacts:
    base = facts("ddp", mesh, grad_accum=2)
    return RunFacts(**{**vars(base), "tokens_per_micro_batch": T, **extra})


def test_tp_adds_the_embedding_head_and_loss_collectives():
    planned = (pc("tp", "all_reduce", A, count=16),)
    r = rows_by_key(compare(None, planned, layout_facts({"dp": 1, "tp": 2})))
    # per micro-batch (2): embedding forward + head backward, 3 fp32 statistics per token
    assert r[("tp", "all_reduce")].explained_bytes == 16 * A + 2 * (2 * A + 3 * T * 4)


@pytest.mark.parametrize(("dp", "norm_sums"), [(1, 2), (2, 1)])
def test_sp_moves_the_head_to_gather_and_scatter_and_sums_the_norms(dp, norm_sums):
    """The norms' Partial gradients: summed by their hook at each of the 2 micro-batches'
    backward without a data-parallel wrapper (measured: tp2+sp on 2 gloo ranks, 1 layer,
    d_model 32, grad-accum 2 -- 10,496 all-reduced bytes, 2 x 768 of them the norms), once a
    step under one (dp2 tp2+sp: tests/train/observe/test_comm_count.py)."""
    planned = (pc("tp", "all_gather", A, count=16), pc("tp", "reduce_scatter", A, count=16))
    f = layout_facts({"dp": dp, "tp": 2}, sequence_parallel=True, norm_grad_bytes=768)
    r = rows_by_key(compare(None, planned, f))
    assert r[("tp", "all_gather")].explained_bytes == 16 * A + 2 * 2 * A
    assert r[("tp", "reduce_scatter")].explained_bytes == 16 * A + 2 * A
    assert r[("tp", "all_reduce")].explained_bytes == 2 * (A + 3 * T * 4) + norm_sums * 768


@pytest.mark.parametrize("sp", [False, True])
def test_under_pp_rank_0_has_the_embeddings_collectives_only(sp):
    """Rank 0 holds the first stage: the embedding's forward all-reduce (SP: and backward
    all-gather) per micro-batch; the head's collectives and loss parallel are the last stage's
    (measured: tp2+sp pp2 on 4 gloo ranks, tests/train/observe/test_comm_count.py)."""
    planned = (pc("tp", "all_gather", A, count=16), pc("tp", "reduce_scatter", A, count=16))
    planned += (pc("tp", "all_reduce", A, count=16),)
    mesh = {"pp": 2, "dp": 1, "tp": 2}
    f = layout_facts(mesh, sequence_parallel=sp, norm_grad_bytes=512)
    r = rows_by_key(compare(None, planned, f))
    norms = 2 * 512 if sp else 0  # no wrapper: summed at each micro-batch's backward
    assert r[("tp", "all_reduce")].explained_bytes == 16 * A + 2 * A + norms
    assert r[("tp", "all_gather")].explained_bytes == 16 * A + (2 * A if sp else 0)
    assert r[("tp", "reduce_scatter")].explained_bytes == 16 * A


def test_tp_ddp_reduces_the_row_parallel_biases_whole():
    planned = (pc("dp", "all_reduce", N),)
    r = rows_by_key(compare(None, planned, layout_facts({"dp": 2, "tp": 2}, row_bias_bytes=256)))
    assert r[("dp", "all_reduce")].explained_bytes == N + 128


@pytest.mark.parametrize(("stages", "sent"), [(1, 2), (2, 6)])
def test_pp_rank_0_sends_no_gradients_from_the_first_stage(stages, sent):
    # the core: 2 micro-batches x 2 directions x stages per rank
    planned = (pc("pp", "send_recv", A, count=4 * stages),)
    f = layout_facts({"pp": 2, "dp": 1}, stages_per_rank=stages, tied_grad_bytes=999)
    r = rows_by_key(compare(None, planned, f))
    assert r[("pp", "send_recv")].explained_bytes == sent * A
    assert r[("pp_tie", "all_reduce")].explained_bytes == 999


def test_ep_counts_and_capacity():
    planned = (pc("ep", "all_to_all", A, count=4),)
    f = layout_facts({"dp": 2}, n_experts=4, moe_layers=1)
    r = rows_by_key(compare(None, planned, f))[("ep", "all_to_all")]
    assert r.explained_bytes == 4 * A + 2 * 1 * 4 * 8  # int64 counts per micro-batch and layer
    capped = rows_by_key(compare(None, planned, RunFacts(**{**vars(f), "capacity_factor": 1.25})))
    assert "capacity" in capped[("ep", "all_to_all")].difference
