"""The phase model on one pipeline stage's rank (`rank_peak` on the stage's first rank): the
stage's share of the model and the micro-batches its schedule keeps in flight. The measured
side (MemTracker on each stage of a torchrun run) is tests/train/observe/test_rank_memory.py."""

from __future__ import annotations

import dataclasses

from trainbudget.core.parallel.memory.gpu_peak import BACKWARD_STARTS
from trainbudget.core.parallel.memory.rank_peak import rank_peak
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.presets import get_preset

# tests/train/observe/test_rank_memory.py's pp model: 2 layers, one per stage, a tied 257 x 32
# embedding
SPEC = dataclasses.replace(
    get_preset("gpt2"),
    n_layers=2,
    d_model=32,
    n_heads=2,
    n_kv_heads=2,
    d_ff=64,
    vocab_size=257,
    max_seq_len=64,
)
KW = dict(precision="fp32", optimizer="adamw", seq_len=32)


def peaks(plan: Plan) -> list:
    return [stage(SPEC, plan, i) for i in range(plan.pp)]


def stage(spec, plan: Plan, index: int):
    """Stage `index`'s phases on its first rank, those that occur."""
    result = rank_peak(spec, plan, rank=index * plan.n_gpus // plan.pp, **KW)
    return dataclasses.replace(result, phases=tuple(p for p in result.phases if p.total_bytes))


def phase(result, name: str):
    return next(p for p in result.phases if p.phase == name)


FIRST, AFTER_WARM_UP, LAST = (BACKWARD_STARTS[i] for i in (2, 1, 0))


def test_every_pipeline_plan_is_modelled():
    # data parallel, interleaved and recomputing pipelines too, once a "not covered" case
    for plan in (
        Plan(pp=2, dp=2, zero=3, grad_accum=4),
        Plan(pp=2, vpp=2, schedule="interleaved", grad_accum=4),
        Plan(pp=2, recompute="full", grad_accum=2),
    ):
        stages = peaks(plan)
        assert all(s.total_bytes > 0 for s in stages)


def test_the_first_stage_holds_pp_micro_batches_under_1f1b_and_all_under_gpipe():
    one_f_one_b = peaks(Plan(pp=2, micro_batch=2, grad_accum=4))
    gpipe = peaks(Plan(pp=2, micro_batch=2, grad_accum=4, schedule="gpipe"))
    first = [phase(p, FIRST).activations_bytes for p in (one_f_one_b[0], gpipe[0])]
    assert first[1] == 2 * first[0]  # 4 micro-batches in flight against 2
    # the last stage runs each micro-batch's backward right after its forward under 1F1B
    assert one_f_one_b[1].total_bytes < gpipe[1].total_bytes


def test_gradients_exist_from_the_second_backward_on():
    (first, last) = peaks(Plan(pp=2, micro_batch=2, grad_accum=2))
    for s in (first, last):
        assert phase(s, FIRST).grads_bytes == 0 < phase(s, AFTER_WARM_UP).grads_bytes
        assert not any(p.phase.startswith("forward") for p in s.phases)  # no tp
    # the embedding's copy on each end: the first adds the learned positions, the last the
    # final norm (64 x 32 and 2 x 32 parameters, fp32)
    assert phase(first, FIRST).params_bytes - phase(last, FIRST).params_bytes == (2048 - 64) * 4


def test_the_receive_buffers_are_one_per_micro_batch_and_kept():
    # torch.distributed.pipelining allocates a buffer per micro-batch for the input a stage
    # receives and for the gradient it is sent (stage_peak's docstring); the last stage
    # also keeps each received input's gradient until the next step: k of them at backward k
    m, tokens = 4, 2 * 32
    (first, last) = peaks(Plan(pp=2, micro_batch=2, grad_accum=m))
    boundary = tokens * 32 * 4  # (B, T, d) fp32
    assert all(p.buffers_bytes == m * boundary for p in first.phases)
    # backward k holds k of the inputs' gradients; the step all m
    assert phase(last, FIRST).buffers_bytes == m * boundary
    assert phase(last, LAST).buffers_bytes == m * boundary + (m - 1) * boundary
    assert phase(last, "optimizer step").buffers_bytes == 2 * m * boundary


SPEC_TP = dataclasses.replace(SPEC, vocab_size=258)  # tp must divide the vocabulary


def test_tensor_parallel_stages_hold_their_shard_and_the_whole_embedding_gradient():
    kw = dict(micro_batch=2, grad_accum=4)
    alone = [stage(SPEC_TP, Plan(pp=2, **kw), i) for i in (0, 1)]
    tp = [stage(SPEC_TP, Plan(pp=2, tp=2, **kw), i) for i in (0, 1)]
    # weights: the split matrices and vocabulary rows halve, the norms and positions do not
    assert tp[0].peak.params_bytes < alone[0].peak.params_bytes
    assert tp[0].peak.params_bytes > alone[0].peak.params_bytes / 2
    # the first stage's embedding gradient covers the whole vocabulary (measured, torch 2.13)
    step = phase(tp[0], "optimizer step")
    assert step.grads_bytes - step.params_bytes == 129 * 32 * 4  # the other half's rows, fp32
    # the last stage's loss parallel: three fp32 (tokens x V/tp) tensors at its backward
    assert phase(tp[1], FIRST).temporaries_bytes == 3 * 64 * 129 * 4


def test_sequence_parallel_splits_the_boundary_and_a_forward_can_be_the_peak():
    kw = dict(micro_batch=2, grad_accum=4)
    tp = stage(SPEC_TP, Plan(pp=2, tp=2, **kw), 0)
    sp = stage(SPEC_TP, Plan(pp=2, tp=2, sp=True, **kw), 0)
    assert phase(sp, FIRST).buffers_bytes == phase(tp, FIRST).buffers_bytes / 2  # (B, T/tp, d)
    assert sp.total_bytes < tp.total_bytes
    # measured on the first stage of tests/train/observe/test_rank_memory.py's tp2+sp pp2 run: the
    # peak at a row-parallel reduce-scatter in the forward after a backward (1F1B)
    assert sp.peak.phase == "forward at a tensor-parallel collective (after the warm-up)"


def test_each_stage_keeps_the_saved_tensors_of_its_own_layers():
    # four stages, the third (a middle one) with 1, 2 or 3 of 8 layers: its one micro-batch in
    # flight keeps as many layers' saved tensors, whatever the second stage holds
    spec = dataclasses.replace(SPEC, n_layers=8)

    def third(layers: int) -> float:
        split = (1, 6 - layers, layers, 1)
        plan = Plan(pp=4, pp_layers=split, micro_batch=2, grad_accum=1)
        return phase(stage(spec, plan, 2), FIRST).activations_bytes

    one_layer = third(2) - third(1)
    assert one_layer > 0
    assert third(3) - third(1) == 2 * one_layer
