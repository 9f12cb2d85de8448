"""Collectives counted on real runs (train.observe.comm_count) against the core's for the same plan,
in RUN_DIR/comm.json: 2-rank ddp, zero1, zero2, fsdp, tp2, pp2 and dropless ep2 runs and
4-rank hsdp, dp2 tp2+sp, dp2 pp2, tp2+sp pp2 (rank 0's rows: the first stage; the last
stage's ranks also run the head's and the loss's collectives) and dp4 ep2 runs (gloo on CPU,
launched by hand: tests/trainrun.py's train_run), 3 steps each -- the third is the counted
one -- with 2 micro-batches of one row per step (trainrun.OBSERVED_LAYOUTS: the same runs give
test_rank_memory.py its per-rank peaks); and the counter's byte conventions on a process group
of one, in-process.

What must hold: every model row's measured bytes equal the core's, or the core's plus the named
differences of train.observe.comm_report, to the byte. The padding figure is this model's own: its
257-row token embedding (vocab_size=257, width 32, fp32, tied to the head) is FSDP2's only
parameter whose dim 0 the shard group does not divide -- padded to 258 rows on 2 ranks, one
row of 32 x 4 = 128 bytes per whole-model collective.
"""

from __future__ import annotations

import gc
import json

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

from trainbudget.train.observe.comm_count import COUNTED_STEP, CommCounter, tally  # noqa: E402

pytestmark = pytest.mark.torch

PAD_ROW_BYTES = 32 * 4  # one padded embedding row (module docstring)
ACT_BYTES = 32 * 32 * 4  # one micro-batch's hidden state: 1 x seq 32 x d_model 32, fp32
LOSS_BYTES = 3 * 32 * 4  # loss parallel's 3 all-reduces of one fp32 per token


@pytest.fixture(scope="module")
def comm(observed_run):
    """Each named run's (comm.json, summary.json); the runs are tests/train/conftest.py's."""

    def get(name: str):
        out = observed_run(name)
        return tuple(json.loads((out / f).read_text()) for f in ("comm.json", "summary.json"))

    return get


def rows(doc: dict) -> dict[tuple[str, str], dict]:
    return {(r["axis"], r["op"]): r for r in doc["rows"]}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        *("ddp", "zero1", "zero2", "fsdp", "hsdp", "dp2-tp2-sp", "tp2", "pp2", "tp2-sp-pp2"),
        *("ep2", "dp4-ep2"),
    ],
)
def test_every_model_row_is_the_cores_or_a_named_difference(comm, name):
    doc, summary = comm(name)
    assert doc["counted"]
    if name == "tp2-sp-pp2":  # the last stage's ranks also run the head and loss parallel
        assert not doc["same_on_every_rank"]
        assert doc["notes"] == ["the ranks counted different collectives: rank 0's are shown"]
    else:
        assert doc["same_on_every_rank"] and not doc["notes"]
    for r in doc["rows"]:
        if r["axis"] == "trainer":
            assert r["measured_bytes"] > 0 and r["predicted_bytes"] == 0
            continue
        assert r["explained"], r
        assert r["equal"] or r["difference"], r
    assert summary["comm"]["all_explained"] is True
    assert summary["comm"]["file"] == "comm.json"
    assert set(summary["comm"]["bytes_per_axis"]) == {a for a, _ in rows(doc)}


@pytest.mark.slow
def test_ddp_all_reduces_the_cores_bytes(comm):
    doc, _ = comm("ddp")
    r = rows(doc)
    assert set(r) == {("dp", "all_reduce"), ("trainer", "all_reduce")}
    assert r[("dp", "all_reduce")]["equal"]


@pytest.mark.slow
def test_zero1_all_reduces_and_broadcasts_what_the_core_reduce_scatters_and_gathers(comm):
    r = rows(comm("zero1")[0])
    assert (
        r[("dp", "all_reduce")]["measured_bytes"] == r[("dp", "reduce_scatter")]["predicted_bytes"]
    )
    assert r[("dp", "broadcast")]["measured_bytes"] == r[("dp", "all_gather")]["predicted_bytes"]
    assert r[("dp", "reduce_scatter")]["measured_bytes"] == 0
    assert r[("dp", "all_gather")]["measured_bytes"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("name", "gathers"), [("zero2", 2), ("fsdp", 4)])
def test_fsdp2_moves_the_padded_model(comm, name, gathers):
    # zero2: one gather per micro-batch (FSDP2 reshards after each backward), the core's one;
    # fsdp: forward and backward of each of the 2 micro-batches, the core's 4
    r = rows(comm(name)[0])
    rs, ag = r[("dp", "reduce_scatter")], r[("dp", "all_gather")]
    assert rs["measured_bytes"] - rs["predicted_bytes"] == PAD_ROW_BYTES
    assert ag["measured_bytes"] == gathers * rs["measured_bytes"]
    assert ag["predicted_count"] == (1 if name == "zero2" else 4)


@pytest.mark.slow
def test_hsdp_reduces_in_the_shard_group_and_all_reduces_the_shard_across_replicas(comm):
    r = rows(comm("hsdp")[0])
    rs = r[("dp_shard", "reduce_scatter")]
    assert rs["measured_bytes"] - rs["predicted_bytes"] == PAD_ROW_BYTES
    assert r[("dp_replicate", "all_reduce")]["measured_bytes"] * 2 == rs["measured_bytes"]
    assert r[("dp_shard", "all_gather")]["measured_bytes"] == 4 * rs["measured_bytes"]
    assert {a for a, _ in r} == {"dp_shard", "dp_replicate", "trainer"}


@pytest.mark.slow
def test_tp_adds_the_embedding_head_and_loss_parallel_collectives(comm):
    # 2 micro-batches; per micro-batch the embedding's all-reduce forward, the head's backward
    r = rows(comm("tp2")[0])[("tp", "all_reduce")]
    assert r["measured_bytes"] - r["predicted_bytes"] == 2 * (2 * ACT_BYTES + LOSS_BYTES)


@pytest.mark.slow
def test_sp_gathers_and_scatters_at_the_head_and_sums_the_norms_gradients(comm):
    r = rows(comm("dp2-tp2-sp")[0])
    # head: all-gather forward, reduce-scatter backward; embedding: all-gather backward
    assert (
        r[("tp", "all_gather")]["measured_bytes"] - r[("tp", "all_gather")]["predicted_bytes"]
        == 2 * 2 * ACT_BYTES
    )
    rs = r[("tp", "reduce_scatter")]
    assert rs["measured_bytes"] - rs["predicted_bytes"] == 2 * ACT_BYTES
    norms = 3 * 2 * 32 * 4  # 3 layer norms (2 in the block, the final), weight and bias
    ar = r[("tp", "all_reduce")]
    assert ar["measured_bytes"] == 2 * (ACT_BYTES + LOSS_BYTES) + norms
    # DDP reduces the row-parallel biases whole (attention out, MLP down: 32 fp32 each), the
    # core half of them on each of the 2 tp ranks
    dp = r[("dp", "all_reduce")]
    assert dp["measured_bytes"] - dp["predicted_bytes"] == 2 * 32 * 4 / 2


@pytest.mark.slow
def test_pp_first_stage_sends_forward_and_the_tied_gradient_is_summed(comm):
    r = rows(comm("pp2")[0])
    sends = r[("pp", "send_recv")]
    assert sends["measured_bytes"] * 2 == sends["predicted_bytes"] == 2 * 2 * ACT_BYTES
    assert r[("pp_tie", "all_reduce")]["measured_bytes"] == 257 * 32 * 4  # the embedding


@pytest.mark.slow
def test_dp_pp_reduces_rank_0s_stage_and_its_used_map(comm):
    doc, summary = comm("dp2-pp2")
    # the stages hold different parameters: rank 0's tally is the one written (a note says so)
    assert doc["notes"] == ["the ranks counted different collectives: rank 0's are shown"]
    assert summary["comm"]["all_explained"] is True
    # rank 0's first stage: embedding 257 x 32, positions 64 x 32, one block of d_model 32,
    # d_ff 64 with biases (GPT-2): 3 x 32 x 32 + 96 + 32 x 32 + 32 + 2 x 32 x 64 + 64 + 32
    # + 2 norms x 64; 14 parameter tensors, DDP's used map one int32 each
    block = 3 * 32 * 32 + 96 + 32 * 32 + 32 + 2 * 32 * 64 + 64 + 32 + 2 * 64
    stage = (257 * 32 + 64 * 32 + block) * 4
    assert rows(doc)[("dp", "all_reduce")]["measured_bytes"] == stage + 14 * 4


@pytest.mark.slow
def test_ep_dropless_sends_the_cores_tokens_plus_the_counts(comm):
    r = rows(comm("ep2")[0])[("ep", "all_to_all")]
    counts = 2 * 1 * 4 * 8  # 2 micro-batches x 1 MoE layer x 4 experts' int64 counts
    assert r["measured_bytes"] - r["predicted_bytes"] == counts


@pytest.mark.slow
def test_ep_experts_gradients_are_all_reduced_over_their_replicas(comm):
    # dp4 ep2: each expert on 2 ranks; its gradient reduced over those, the dense ones over 4
    r = rows(comm("dp4-ep2")[0])
    assert r[("ep_replicas", "all_reduce")]["equal"] and r[("dp", "all_reduce")]["equal"]


@pytest.mark.slow
def test_one_process_writes_no_rows(comm):
    doc, summary = comm("single")
    assert doc["rows"] == [] and doc["mesh"] == {}
    assert summary["comm"]["all_equal"] is None


# -- the counter in-process, on a group of one ------------------------------------------------


@pytest.fixture
def mesh():
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    finally:
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore:`torch.distributed.*is deprecated:FutureWarning")
def test_the_counter_counts_one_step_in_the_cores_convention(mesh):
    from torch.distributed._functional_collectives import all_reduce, wait_tensor

    group = mesh.get_group("dp")
    counter = CommCounter(mesh)
    x = torch.zeros(10)  # 40 bytes
    for step in range(1, COUNTED_STEP + 2):
        with counter.step():
            dist.all_reduce(x, group=group)
            dist.broadcast(x, src=0, group=group)
            gathered = torch.zeros(10)
            dist.all_gather_into_tensor(gathered, x, group=group)  # output: 40 bytes
            dist.reduce_scatter_tensor(torch.zeros(10), x, group=group)  # input: 40 bytes
            counter.trainer(True)
            wait_tensor(all_reduce(torch.zeros(3), "sum", group))
            counter.trainer(False)
        assert (counter.calls is None) == (step < COUNTED_STEP)
    assert tally(counter.calls) == {
        ("dp", "all_reduce"): (40, 1),
        ("dp", "broadcast"): (40, 1),
        ("dp", "all_gather"): (40, 1),
        ("dp", "reduce_scatter"): (40, 1),
        ("trainer", "all_reduce"): (12, 1),
    }
