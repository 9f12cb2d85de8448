"""The per-GPU phase model of a plan (core.parallel.memory.gpu_peak via gpu_memory): stages, phases,
engines' buffers, ZeRO, HSDP, offload, recomputation. The measured side: the profile matrix
(one GPU) and tests/train/observe/test_rank_memory.py (every layout the trainer runs)."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.memory.gpu_memory import plan_memory, stage_memories
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.params import count_params
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.frameworks import GENERIC, TRAINBUDGET, get_framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset
from trainbudget.core.units import GB, MB

BF16 = get_precision("bf16-mixed")  # 2 + 2 + 4 (master) + 8 (Adam m, v) = 16 bytes per parameter
ADAMW = get_optimizer("adamw")
L2_7B = get_preset("llama-2-7b")  # untied, RoPE
L3_8B = get_preset("llama-3-8b")
GPT2 = get_preset("gpt2")  # tied, learned positions, biases
SEQ = 4096


def mem(spec: ModelSpec, plan: Plan, seq_len: int = SEQ, framework=GENERIC):
    return plan_memory(
        spec, plan, seq_len=seq_len, precision=BF16, optimizer=ADAMW, framework=framework
    )


def test_one_gpu_is_the_reference_step_profile_measures():
    """No layout: the generic row's engine is the reference step (core.single.peak_memory),
    which the profile matrix holds to MemTracker."""
    m = mem(GPT2, Plan(), seq_len=1024)
    ref = training_peak(
        GPT2, precision="bf16-mixed", optimizer="adamw", seq_len=1024, micro_batch=1
    )
    assert m.stage == "only"
    assert m.total_bytes == pytest.approx(ref.total_bytes, rel=1e-12)
    assert dict(m.phases_bytes)["backward end"] == pytest.approx(
        next(p.total_bytes for p in ref.phases if p.phase == "backward end"), rel=1e-12
    )


def test_the_answer_is_the_peak_phase_and_its_parts():
    m = mem(L2_7B, Plan(dp=8, zero=1, grad_accum=4))
    assert m.total_bytes == max(total for _, total in m.phases_bytes)
    assert m.phase == max(m.phases_bytes, key=lambda p: p[1])[0]
    parts = (
        m.params_bytes,
        m.grads_bytes,
        m.optimizer_bytes,
        m.activations_bytes,
        m.temporaries_bytes,
        m.buffers_bytes,
    )
    assert sum(parts) == pytest.approx(m.total_bytes)


def test_the_issues_llama_3_8b_zero3_plan_under_each_engine():
    """The issue's plan: Llama 3 8B, dp8, micro-batch 1 x 8, sequence 8192, bf16-mixed, AdamW.
    The trainer's FSDP2 holds the unsharded gradients while accumulating and the loss's fp32
    temporaries at backward start: 91.7 GB (the figure its rank_peak gave on main 0288d16);
    under its DDP, 206 GB."""
    kw = dict(seq_len=8192, precision=BF16, optimizer=ADAMW, framework=TRAINBUDGET)
    fsdp = plan_memory(L3_8B, Plan(dp=8, zero=3, grad_accum=8), **kw)
    ddp = plan_memory(L3_8B, Plan(dp=8, zero=0, grad_accum=8), **kw)
    assert fsdp.total_bytes / GB == pytest.approx(91.7, abs=0.05)
    assert ddp.total_bytes / GB == pytest.approx(206.1, abs=0.05)
    assert fsdp.phase.startswith("backward start") and fsdp.grads_bytes > fsdp.state.grads_bytes
    # an engine that reduce-scatters every micro-batch accumulates only its shard
    titan = plan_memory(
        L3_8B, Plan(dp=8, zero=3, grad_accum=8), **{**kw, "framework": get_framework("torchtitan")}
    )
    assert titan.total_bytes < fsdp.total_bytes


def test_middle_stage_holds_the_second_stages_micro_batches():
    plan = Plan(pp=4, grad_accum=8)
    stages = stage_memories(L2_7B, plan, seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    assert list(stages) == ["first", "middle", "last"]
    assert stages["middle"].activations_bytes < stages["first"].activations_bytes
    assert mem(L2_7B, plan).total_bytes == max(m.total_bytes for m in stages.values())
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    assert list(stage_memories(L2_7B, Plan(pp=2, grad_accum=8), **kw)) == ["first", "last"]
    assert list(stage_memories(L2_7B, Plan(), **kw)) == ["only"]


def test_even_pp_layers_give_the_default_memory_exactly():
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    for pp in (2, 4, 8):
        even = stage_memories(L2_7B, Plan(pp=pp, grad_accum=16), **kw)
        given = stage_memories(L2_7B, Plan(pp=pp, grad_accum=16, pp_layers=(32 // pp,) * pp), **kw)
        assert {k: v.total_bytes for k, v in even.items()} == {
            k: v.total_bytes for k, v in given.items()
        }


def test_an_uneven_split_moves_memory_to_the_heavier_stage():
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    even = stage_memories(L2_7B, Plan(pp=4, grad_accum=8), **kw)
    uneven = stage_memories(L2_7B, Plan(pp=4, grad_accum=8, pp_layers=(6, 8, 9, 9)), **kw)
    assert uneven["first"].total_bytes < even["first"].total_bytes
    assert uneven["last"].total_bytes > even["last"].total_bytes


def test_1f1b_first_stage_holds_pp_micro_batches_gpipe_all():
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    one = stage_memories(L2_7B, Plan(pp=4, grad_accum=8), **kw)["first"]
    gpipe = stage_memories(L2_7B, Plan(pp=4, grad_accum=8, schedule="gpipe"), **kw)["first"]
    assert gpipe.activations_bytes > one.activations_bytes
    assert gpipe.activations_bytes / one.activations_bytes == pytest.approx(2, rel=0.05)


def test_size_capped_buckets_when_data_parallel():
    """The generic row's engine: DDP's 25 MB buckets, two in flight, when dp * cp > 1."""
    one = mem(L2_7B, Plan(tp=8)).buffers_bytes
    assert one == 0  # no data-parallel reduction
    for zero in (0, 1, 2):
        assert mem(L2_7B, Plan(dp=8, zero=zero)).buffers_bytes == 2 * 25 * MB
    assert mem(L2_7B, Plan(cp=2)).buffers_bytes == 2 * 25 * MB


def test_a_bucket_never_holds_more_than_the_gradients():
    tiny = ModelSpec(vocab_size=257, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=64)
    grads = count_params(tiny).total * BF16.grad_bytes
    assert mem(tiny, Plan(dp=2), seq_len=64).buffers_bytes == pytest.approx(2 * grads)


def test_zero3_buffers_are_gathered_layers():
    # the layer in use and the prefetched one (2 x 2 bytes) and its unsharded gradient (2)
    m = mem(L2_7B, Plan(dp=8, zero=3))
    layer = count_params(L2_7B).per_layer / L2_7B.n_layers
    assert m.buffers_bytes == pytest.approx(6 * layer)


def test_zero_shards_over_dp_times_cp_and_hsdp_over_its_group():
    n = count_params(L2_7B).total
    assert mem(L2_7B, Plan(dp=4, cp=2, zero=3)).state.total_bytes == pytest.approx(16 * n / 8)
    hsdp = mem(L2_7B, Plan(dp=16, zero=3, zero_shard=4))
    assert hsdp.state.total_bytes == pytest.approx(16 * n / 4)


def test_memory_never_grows_with_the_zero_stage():
    for fw in ("generic", "trainbudget", "megatron", "deepspeed"):
        totals = [
            mem(L2_7B, Plan(dp=8, zero=z), framework=get_framework(fw)).total_bytes
            for z in (0, 1, 2, 3)
        ]
        assert totals == sorted(totals, reverse=True), fw


@pytest.mark.parametrize("target", ["cpu", "nvme"])
def test_offload_optimizer_moves_master_and_state_to_host(target):
    base = mem(L2_7B, Plan(dp=8, zero=1))
    off = mem(L2_7B, Plan(dp=8, zero=1, offload_optimizer=target))
    assert off.optimizer_bytes == 0
    assert off.host_bytes == pytest.approx(base.optimizer_bytes)
    assert off.total_bytes == pytest.approx(base.total_bytes - base.optimizer_bytes)


def test_offload_params_moves_weights_too():
    base = mem(L2_7B, Plan(dp=8, zero=3))
    off = mem(L2_7B, Plan(dp=8, zero=3, offload_params="cpu", offload_optimizer="cpu"))
    assert off.params_bytes == 0 and off.optimizer_bytes == 0
    assert off.host_bytes == pytest.approx(base.params_bytes + base.optimizer_bytes)
    assert off.buffers_bytes == base.buffers_bytes  # gathered layers still live on the GPU


def test_a_huge_vocabulary_makes_the_last_stage_the_peak():
    plan = Plan(pp=2, dp=4, grad_accum=8)
    assert mem(L2_7B.replace(vocab_size=1_000_000), plan).stage == "last"


def test_sp_cp_and_recomputation_lower_activations():
    no_sp = mem(L2_7B, Plan(tp=4, dp=2))
    assert mem(L2_7B, Plan(tp=4, dp=2, sp=True)).activations_bytes < no_sp.activations_bytes
    assert mem(L2_7B, Plan(cp=2)).activations_bytes < mem(L2_7B, Plan(dp=2)).activations_bytes
    acts = [
        mem(L2_7B, Plan(dp=8, recompute=r, flash_attention=False)).activations_bytes
        for r in ("none", "selective", "full")
    ]
    assert acts[0] > acts[1] > acts[2]


def test_full_recomputation_peaks_at_backward_start_or_the_rebuilt_layer():
    m = mem(L2_7B, Plan(dp=8, zero=3, recompute="full"))
    phases = dict(m.phases_bytes)
    assert "first recomputation" in phases
    assert m.total_bytes == max(phases.values())


@pytest.mark.parametrize("every", [2, 3, 32])
def test_recomputing_every_kth_layer_lies_between_none_and_all(every):
    """`recompute_every` K recomputes ceil(L / K) layers (layout.recomputed_layers)."""
    none = mem(L2_7B, Plan(dp=8, zero=3)).total_bytes
    full = mem(L2_7B, Plan(dp=8, zero=3, recompute="full")).total_bytes
    part = mem(L2_7B, Plan(dp=8, zero=3, recompute="full", recompute_every=every)).total_bytes
    assert full <= part <= none
