"""The phase model on one rank of a plan the trainer runs (`rank_peak`: `gpu_peak` under the
trainer's own framework row, its engine named by the plan's ZeRO stage): the single-device
phases with the state sharded and each engine's buffers; ZeroRedundancyOptimizer's whole-tensor
shares; tensor and expert parallel ranks. The measured side (MemTracker on each rank of a
torchrun run) is tests/train/observe/test_rank_memory.py."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.memory.gpu_peak import BACKWARD_STARTS
from trainbudget.core.parallel.memory.rank_peak import (
    expert_parallel_params,
    expert_rows_bytes,
    rank_peak,
    tensor_shard,
    whole_tensor_shares,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.params import count_params
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.engines import ENGINES, get_engine
from trainbudget.core.spec.frameworks import TRAINBUDGET
from trainbudget.core.spec.presets import get_preset

# the trainer's distributed tests' model (tests/train/parallel/test_parallelize.py: MODEL): 18,880
# parameters, the 257 x 32 tied embedding the largest tensor
TINY = dataclasses.replace(
    get_preset("gpt2"),
    n_layers=1,
    d_model=32,
    n_heads=2,
    n_kv_heads=2,
    d_ff=64,
    vocab_size=257,
    max_seq_len=64,
)
N = 18_880
KW = dict(precision="fp32", optimizer="adamw", seq_len=32)
START = BACKWARD_STARTS[0]  # the last micro-batch's backward start


def peak(plan: Plan, **kw):
    return rank_peak(TINY, plan, **KW, **kw)


def phases(result) -> dict:
    """The phases that occur (a phase of zero bytes does not), by name."""
    return {p.phase: p for p in result.phases if p.total_bytes}


def test_the_trainers_engines_follow_its_strategies():
    # train.spec.strategy: ddp, zero1, zero2, fsdp (hsdp: fsdp over a shard group)
    assert TRAINBUDGET.engines == (
        "single",
        "ddp",
        "ddp+zero-redundancy",
        "fsdp2-no-reshard",
        "fsdp2",
    )


def test_one_rank_without_an_engine_is_the_single_device_phase_model():
    single = training_peak(TINY, micro_batch=4, fused_update=True, **KW)
    got = phases(peak(Plan(dp=1, micro_batch=4)))
    want = {p.phase: p.total_bytes for p in single.phases}
    assert got[START].total_bytes == want["backward start"]
    assert got["backward end"].total_bytes == want["backward end"]
    assert got["optimizer step"].total_bytes == want["optimizer step"]


def test_ddp_adds_a_copy_of_every_gradient_to_every_phase():
    assert count_params(TINY).total == N
    ddp = phases(peak(Plan(dp=2, micro_batch=4)))
    single = phases(peak(Plan(dp=1, micro_batch=4)))
    for name in (START, "backward end", "optimizer step"):
        assert ddp[name].buffers_bytes == N * 4  # fp32 gradients
        assert ddp[name].total_bytes == single[name].total_bytes + N * 4


def test_memory_never_grows_with_the_zero_stage():
    totals = [peak(Plan(dp=4, zero=zero, micro_batch=2)).total_bytes for zero in (0, 1, 3)]
    assert totals == sorted(totals, reverse=True)


def test_fsdp2_shards_the_state_and_gathers_as_it_runs():
    plan = Plan(dp=2, zero=3, micro_batch=4)
    got = phases(peak(plan))
    assert {"last block backward", "first block backward", START} <= set(got)
    assert got[START].params_bytes == N * 4 / 2
    assert got[START].optimizer_bytes == N * 8 / 2
    assert got[START].buffers_bytes == 0  # every unit resharded after forward
    # the first block's backward: every other block's gradients in their shards already
    root = 257 * 32 + 64 * 32 + 2 * 32  # tied embedding, positions, final norm
    block = N - root
    assert got["first block backward"].grads_bytes == 0  # one block: none reduced before it
    assert got["first block backward"].buffers_bytes == (root + block) * 4 + block * 4
    # without resharding (zero2's engine): the whole model gathered beside the shard
    kept = phases(peak(Plan(dp=2, zero=2, micro_batch=4)))
    assert kept[START].params_bytes == N * 4 / 2
    assert kept[START].buffers_bytes == N * 4
    assert kept["optimizer step"].buffers_bytes == 0


def test_whole_tensor_shares_deal_the_largest_first():
    # the 257 x 32 embedding alone on rank 0; the other matrices (3 x 2048, 3072, 1024) dealt
    # to the others; the 416 elements of vectors fill the least loaded
    shares = whole_tensor_shares(TINY, 4)
    assert sum(shares) == N
    assert shares[0] == 257 * 32
    assert shares[1] == shares[3] < shares[2]
    assert whole_tensor_shares(TINY, 1) == [N]
    # measured on 4 ranks of zero1 (MemTracker, tests/train/observe/test_rank_memory.py's model):
    # rank 0's peak 39,404 bytes above rank 1's, rank 2's 6,384 -- AdamW's 8 bytes a parameter
    assert (shares[0] - shares[1]) * 8 == pytest.approx(39_404, rel=0.01)
    assert (shares[2] - shares[1]) * 8 == pytest.approx(6_384, rel=0.03)


def test_zero1_ranks_differ_by_their_whole_tensor_shares():
    plan = Plan(dp=4, zero=1, micro_batch=2)
    ranks = [peak(plan, rank=r).total_bytes for r in range(4)]
    even = rank_peak(
        TINY,
        plan,
        framework=dataclasses.replace(
            TRAINBUDGET, engines=("single", "ddp", "ddp", "fsdp2", "fsdp2")
        ),
        **KW,
    ).total_bytes
    assert ranks[0] > even > ranks[1] == ranks[3]
    assert sum(ranks) == pytest.approx(4 * even)


def test_a_fused_update_has_no_scratch():
    assert get_engine("ddp").fused_update and not get_engine("reference").fused_update
    step = phases(peak(Plan(dp=2, micro_batch=4)))["optimizer step"]
    assert step.temporaries_bytes == 0


# tests/train/observe/test_rank_memory.py's ep2 model: 2 MoE layers of 4 experts, top-2
MOE_TINY = dataclasses.replace(
    TINY, n_layers=2, vocab_size=257, n_experts=4, experts_per_token=2, d_ff_expert=64
)


def test_an_expert_parallel_rank_holds_its_experts_and_ddp_buckets_the_rest():
    p = count_params(MOE_TINY)
    local, bucketed = expert_parallel_params(MOE_TINY, 2)
    assert local == p.total - p.moe_experts / 2
    assert bucketed == p.total - p.moe_experts  # DDP ignores the experts
    plan = Plan(dp=2, ep=2, micro_batch=4)
    ep = rank_peak(MOE_TINY, plan, **KW).peak
    dp = rank_peak(MOE_TINY, dataclasses.replace(plan, ep=1), **KW).peak
    # weights, gradients and both Adam moments of half the experts fewer; buckets without any
    assert dp.params_bytes - ep.params_bytes == p.moe_experts / 2 * 4
    assert dp.optimizer_bytes - ep.optimizer_bytes == p.moe_experts / 2 * 8
    assert dp.buffers_bytes - ep.buffers_bytes == p.moe_experts * 4
    # balanced routing: the same activations as one device
    assert ep.activations_bytes == dp.activations_bytes


def test_received_rows_beyond_the_balanced_share_add_their_expert_tensors():
    plan = Plan(dp=2, ep=2, micro_batch=4)
    balanced = 2 * 4 * 32 * 2  # layers x micro-batch x tokens x top-2
    kw = dict(seq_len=32, activation_bytes=4)
    assert expert_rows_bytes(MOE_TINY, plan, rows_received=balanced, **kw) == 0
    # a row: its expert's input (d 32) and hidden tensors (2 x 64), fp32
    assert expert_rows_bytes(MOE_TINY, plan, rows_received=balanced + 10, **kw) == 10 * 160 * 4


# TINY with a vocabulary tp=2 divides (the trainer's tp tests use 258)
TP_TINY = dataclasses.replace(TINY, vocab_size=258)


def test_a_tensor_parallel_rank_holds_its_shard_and_the_replicated_rest():
    # per layer, on one of 2 ranks (d 32, d_ff 64, V 258, 64 learned positions, tied head):
    # tok 129x32, pos 64x32 whole, ln1/ln2/final 2x32 each whole, qkv 32x48 + 48,
    # proj 16x32 + 32 (row parallel: bias whole), up 32x32 + 32, down 32x32 + 32
    shard = tensor_shard(TP_TINY, 2)
    assert count_params(TP_TINY).total == 18_912
    assert count_params(shard).total == 4128 + 2048 + 3 * 64 + 1584 + 544 + 1056 + 1056
    assert tensor_shard(TP_TINY, 1) is TP_TINY


def test_loss_parallel_adds_one_vocabulary_sized_fp32_tensor_at_backward_start():
    plan = Plan(tp=2, micro_batch=4)
    got = phases(rank_peak(TP_TINY, plan, **KW))
    want = {
        p.phase: p
        for p in training_peak(
            tensor_shard(TP_TINY, 2), micro_batch=4, fused_update=True, **KW
        ).phases
    }
    extra = got[START].temporaries_bytes - want["backward start"].temporaries_bytes
    assert extra == 32 * 4 * 129 * 4  # tokens x V/tp, fp32
    assert got["optimizer step"].temporaries_bytes == want["optimizer step"].temporaries_bytes


def test_memory_never_grows_with_tensor_or_sequence_parallelism():
    totals = [
        rank_peak(TP_TINY, plan, **KW).total_bytes
        for plan in (
            Plan(dp=2, zero=3, micro_batch=4),
            Plan(dp=2, tp=2, zero=3, micro_batch=4),
            Plan(dp=2, tp=2, sp=True, zero=3, micro_batch=4),
        )
    ]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[2]


def test_accumulation_adds_the_unsynchronised_gradients_before_backward():
    one = phases(peak(Plan(dp=2, zero=3, micro_batch=2)))
    two = phases(peak(Plan(dp=2, zero=3, micro_batch=2, grad_accum=2)))
    assert two[START].grads_bytes - one[START].grads_bytes == N * 4
    assert two["optimizer step"] == one["optimizer step"]


def test_an_unknown_engine_names_the_known_ones():
    with pytest.raises(SpecError, match="engine") as err:
        get_engine("deepspeed")
    assert all(name in str(err.value) for name in ENGINES)
    with pytest.raises(SpecError, match="engines"):
        dataclasses.replace(TRAINBUDGET, engines=("single", "ddp"))
