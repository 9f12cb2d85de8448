"""Uneven pipeline splits under the interleaved schedule (core.parallel.pipeline_split).

The case is Llama 3.1 405B's: 126 layers on pp 8 x vpp 8. With the embedding and the loss
counted as layer slots (Megatron-Core's --account-for-embedding-in-pipeline-split and
--account-for-loss-in-pipeline-split) there are 126 + 2 = 128 = 8 x 8 x 2 slots: two a chunk,
stage 0's first chunk holding the embedding and one layer, stage 7's last chunk one layer and
the loss (megatron/core/transformer/transformer_layer.py, get_transformer_layer_offset).
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from clirun import cli, one_line_error
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.memory.gpu_memory import plan_memory, stage_memories
from trainbudget.core.parallel.memory.parallel_memory import in_flight_micro_batches
from trainbudget.core.parallel.pipeline_split import chunk_layer_counts
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.timing.step_time import step_terms, step_time
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

LLAMA_405B = get_preset("llama-3-405b")  # 126 layers
GPT3 = get_preset("gpt3-175b")  # 96 layers
CLUSTER = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=128)
KW = dict(seq_len=8192, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))
# dp 2 x tp 8 x pp 8 = 128 GPUs; 16 micro-batches a step (a multiple of pp, Megatron's rule)
BASE = dict(dp=2, tp=8, sp=True, pp=8, zero=1, grad_accum=16, recompute="full")
GPT3_KW = {**KW, "seq_len": 2048}  # GPT-3's learned position table
ENDS = dict(embedding_in_pp_split=True, loss_in_pp_split=True)


def interleaved(**kw) -> Plan:
    return Plan(**BASE, vpp=kw.pop("vpp", 8), schedule="interleaved", **kw)


def test_126_layers_pp8_vpp8_with_embedding_and_loss_as_layers_is_accepted():
    plan = interleaved(**ENDS)
    validate_plan(plan, LLAMA_405B, n_gpus=128, seq_len=8192)
    assert plan.stage_layer_counts(126) == (15, *(16,) * 6, 15)
    chunks = chunk_layer_counts(plan, 126)
    assert chunks[0] == (1, *(2,) * 7)  # chunk 0 of stage 0: the embedding and one layer
    assert chunks[-1] == (*(2,) * 7, 1)  # the last chunk: one layer and the loss
    assert all(row == (2,) * 8 for row in chunks[1:-1])
    assert sum(map(sum, chunks)) == 126
    assert "pp8+emb+loss vpp8" in plan.describe()


def test_the_derived_split_equals_the_same_split_given():
    """Flags alone (the even split of the slots, derived in PlanNumbers) and the same counts
    given as pp_layers time and size the plan identically."""
    derived = interleaved(**ENDS)
    given = interleaved(pp_layers=(15, *(16,) * 6, 15), **ENDS)
    validate_plan(given, LLAMA_405B, n_gpus=128, seq_len=8192)
    for stage in ("first", "middle", "last", "max"):
        assert PlanNumbers.of(derived).stage_layers(126, stage) == PlanNumbers.of(
            given
        ).stage_layers(126, stage)
    # the planner's array form (numpy fields) reads the same split and gives the plan back
    grid = PlanNumbers.of_many([derived, interleaved()])
    assert list(grid.stage_layers(126, "first")) == [15, 126 // 8]
    assert list(grid.stage_layers(126, "max")) == [16, 126 // 8]
    assert grid.plans() == [derived, interleaved()]
    a, b = (step_time(LLAMA_405B, p, CLUSTER, **KW) for p in (derived, given))
    assert a.step_seconds == b.step_seconds
    ma, mb = (plan_memory(LLAMA_405B, p, **KW) for p in (derived, given))
    assert ma.total_bytes == mb.total_bytes


def test_step_time_parts_sum_and_the_slowest_stage_sets_it():
    plan = interleaved(**ENDS)
    t = step_time(LLAMA_405B, plan, CLUSTER, **KW)
    assert math.isclose(sum(t.breakdown_seconds.values()), t.step_seconds, rel_tol=1e-12)
    terms = step_terms(LLAMA_405B, plan, CLUSTER, **KW)
    mb = terms.micro_batch
    # the last stage: 15 layers and the head; a middle one: 16 layers at the same layer time
    per_layer = (mb.forward_seconds + mb.backward_seconds) / 15
    assert mb.stage_seconds == pytest.approx(max(16 * per_layer, 15 * per_layer + mb.head_seconds))
    assert terms.compute_seconds == pytest.approx(16 * mb.stage_seconds)
    # the bubble: (sum of the stages' times - the slowest's) / vpp
    every = 126 * per_layer + mb.head_seconds
    assert terms.bubble_seconds == pytest.approx((every - mb.stage_seconds) / 8)


def test_interleaving_divides_the_same_splits_bubble_by_vpp():
    """The same stage split without chunks (1F1B; (126 + 2) / 8 = 16 slots a stage) has a
    bubble vpp times longer: Narayanan et al. 2021, Sec. 2.2.2."""
    one_f_one_b = Plan(**BASE, **ENDS)
    validate_plan(one_f_one_b, LLAMA_405B, n_gpus=128, seq_len=8192)
    vpp8 = step_terms(LLAMA_405B, interleaved(**ENDS), CLUSTER, **KW)
    vpp1 = step_terms(LLAMA_405B, one_f_one_b, CLUSTER, **KW)
    assert vpp8.compute_seconds == vpp1.compute_seconds
    assert vpp8.bubble_seconds == pytest.approx(vpp1.bubble_seconds / 8)


def test_even_split_reduces_to_narayanans_bubble():
    """GPT-3 on pp 8 x vpp 4: 3 layers a chunk. (pp - 1) (t_f + t_b) / v of a stage's layers
    (Narayanan et al. 2021 Sec. 2.2.2), and a split given equal to the even one changes nothing."""
    even = interleaved(vpp=4)
    same = interleaved(vpp=4, pp_layers=(12,) * 8)
    t = step_terms(GPT3, even, CLUSTER, **GPT3_KW)
    layers = t.micro_batch.forward_seconds + t.micro_batch.backward_seconds
    assert t.bubble_seconds == pytest.approx((8 - 1) * layers / 4)
    assert step_time(GPT3, same, CLUSTER, **GPT3_KW) == step_time(GPT3, even, CLUSTER, **GPT3_KW)
    assert plan_memory(GPT3, same, **GPT3_KW) == plan_memory(GPT3, even, **GPT3_KW)


def test_flags_off_leave_the_numbers_as_they_were():
    """Regression pin: the even split's numbers read n_layers // pp exactly (plain ints, the
    same arithmetic as before the flags existed), on one plan and on a grid."""
    numbers = PlanNumbers.of(interleaved(vpp=4))
    assert (numbers.embedding_slot, numbers.loss_slot) == (0, 0)
    assert {numbers.stage_layers(96, s) for s in ("first", "middle", "last", "max")} == {12}
    grid = PlanNumbers.of_many([interleaved(vpp=4), interleaved(vpp=2)])
    assert list(grid.stage_layers(96, "first")) == [12, 12]
    assert grid.plans() == [interleaved(vpp=4), interleaved(vpp=2)]


def test_memory_names_the_heaviest_stage_with_interleaved_in_flight_micro_batches():
    plan = interleaved(**ENDS)
    stages = stage_memories(LLAMA_405B, plan, **KW)
    heaviest = plan_memory(LLAMA_405B, plan, **KW)
    assert heaviest.stage == max(stages, key=lambda s: stages[s].total_bytes)
    assert heaviest.total_bytes == max(m.total_bytes for m in stages.values())
    for m in stages.values():
        parts = (
            m.params_bytes,
            m.grads_bytes,
            m.optimizer_bytes,
            m.activations_bytes,
            m.temporaries_bytes,
            m.buffers_bytes,
        )
        assert math.isclose(sum(parts), m.total_bytes, rel_tol=1e-12)
    # the first stage holds pp (1 + (pp - 1) / (pp vpp)) = 8.875 micro-batches interleaved
    # (Korthikanti et al. 2022, Sec. 4.2.3), 8 under 1F1B: its activations grow with vpp
    assert in_flight_micro_batches(plan) == pytest.approx(8 * (1 + 7 / 64))
    first_1f1b = stage_memories(LLAMA_405B, Plan(**BASE, **ENDS), **KW)["first"]
    assert stages["first"].activations_bytes > first_1f1b.activations_bytes


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        # 126 + 1 = 127 slots do not split over 64 chunks
        (dict(embedding_in_pp_split=True), "n_layers (126) + 1 (the embedding) = 127 must be"),
        # stage slots not divisible by vpp: Megatron-Core's chunks are equal
        (dict(pp_layers=(15, *(16,) * 6, 15)), "not stage 0: 15, stage 7: 15"),
        (dict(pp_layers=(16,) * 8), "sum to 128, not n_layers (126)"),
        # stage 0: 7 layers + the embedding = 8 slots, 1 a chunk: chunk 0 holds no layer
        (dict(pp_layers=(7, *(16,) * 6, 23), **ENDS), "chunk 0 of stage 0 holds no transformer"),
    ],
)
def test_bad_splits_name_the_field_the_value_and_the_rule(change, needle):
    plan = dataclasses.replace(interleaved(), **change)
    with pytest.raises(SpecError, match=re.escape(needle)):
        validate_plan(plan, LLAMA_405B, n_gpus=128, seq_len=8192)


def test_counted_ends_need_a_pipeline():
    plan = Plan(tp=8, loss_in_pp_split=True)
    with pytest.raises(SpecError, match=re.escape("loss_in_pp_split (True) needs pp > 1")):
        validate_plan(plan, LLAMA_405B, n_gpus=8, seq_len=8192)


ARGV = (
    "estimate", "--model", "llama-3-405b", "--gpus", "128", "--gpu", "h100-sxm", "--tp", "8",
    "--pp", "8", "--vpp", "8", "--global-batch", "32", "--seq-len", "8192", "--zero", "1",
    "--sp", "--recompute", "full",
)  # fmt: skip


def test_cli_states_the_split_and_refuses_a_bad_one_in_one_line():
    code, out, err = cli(*ARGV, "--account-for-embedding", "--account-for-loss")
    assert code == 0, err
    assert "pp8+emb+loss vpp8" in out
    line = one_line_error((*ARGV, "--pp-layers", "15,16,16,16,16,16,16,15"))
    assert "pp_layers" in line and "must be divisible by vpp (8)" in line
    # today the CLI without the flags still refuses 126 layers on 64 chunks
    assert "must be divisible by pp (8) * vpp (8)" in one_line_error(ARGV)
