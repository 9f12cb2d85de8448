"""The phase model on one pipeline stage's rank: the stage's share of the model and the
micro-batches its schedule keeps in flight. The measured side (MemTracker on each stage of a
torchrun run) is tests/train/test_rank_memory.py."""

from __future__ import annotations

import dataclasses

from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.stage_peak import covers_stage, stage_peak
from trainbudget.core.spec.presets import get_preset

# tests/train/test_rank_memory.py's pp model: 2 layers, one per stage, a tied 257 x 32 embedding
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
    return [stage_peak(SPEC, plan, stage_index=i, **KW) for i in range(plan.pp)]


def test_pipelines_alone_are_covered():
    assert covers_stage(Plan(pp=2, grad_accum=4))
    assert covers_stage(Plan(pp=2, schedule="gpipe"))
    for plan in (
        Plan(),
        Plan(pp=2, dp=2),
        Plan(pp=2, tp=2),
        Plan(pp=2, vpp=2, schedule="interleaved"),
        Plan(pp=2, recompute="full"),
    ):
        assert not covers_stage(plan)


def test_the_first_stage_holds_pp_micro_batches_under_1f1b_and_all_under_gpipe():
    one_f_one_b = peaks(Plan(pp=2, micro_batch=2, grad_accum=4))
    gpipe = peaks(Plan(pp=2, micro_batch=2, grad_accum=4, schedule="gpipe"))
    first = [p.phases[0].activations_bytes for p in (one_f_one_b[0], gpipe[0])]
    assert first[1] == 2 * first[0]  # 4 micro-batches in flight against 2
    # the last stage runs each micro-batch's backward right after its forward under 1F1B
    assert one_f_one_b[1].total_bytes < gpipe[1].total_bytes


def test_gradients_exist_from_the_second_backward_on():
    (first, last) = peaks(Plan(pp=2, micro_batch=2, grad_accum=2))
    for stage in (first, last):
        names = [p.phase for p in stage.phases]
        assert names == ["first backward", "backward 2 of 2", "optimizer step"]
        assert stage.phases[0].grads_bytes == 0 < stage.phases[1].grads_bytes
    # the embedding's copy on each end: the first adds the learned positions, the last the
    # final norm (64 x 32 and 2 x 32 parameters, fp32)
    assert first.phases[0].params_bytes - last.phases[0].params_bytes == (2048 - 64) * 4
