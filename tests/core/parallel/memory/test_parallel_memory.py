"""The terms of per-GPU memory under a plan: ZeRO model state, stage parameters, in-flight
micro-batches (the phase model that adds them up: test_gpu_memory.py)."""

from __future__ import annotations

import pytest

from trainbudget.core.parallel.memory.parallel_memory import (
    ModelState,
    in_flight_micro_batches,
    stage_params,
    zero_model_state,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset
from trainbudget.core.units import GB

BF16 = get_precision("bf16-mixed")  # 2 + 2 + 4 (master) + 8 (Adam m, v) = 16 bytes per parameter
ADAMW = get_optimizer("adamw")
L2_7B = get_preset("llama-2-7b")  # untied, RoPE
GPT2 = get_preset("gpt2")  # tied, learned positions, biases
MIXTRAL = get_preset("mixtral-8x7b")
SEQ = 4096


# ---- ZeRO (Rajbhandari et al. 2020, Fig. 1; seed 004 B-zero) ---------------------------------
@pytest.mark.parametrize(
    ("zero", "gb"),
    [
        (0, 120.0),  # (2 + 2 + 12) * 7.5e9 = 120 GB
        (1, 31.4),  # (2 + 2 + 12 / 64) * 7.5e9 = 31.4 GB
        (2, 16.6),  # (2 + 14 / 64) * 7.5e9 = 16.6 GB
        (3, 1.9),  # 16 / 64 * 7.5e9 = 1.875 GB
    ],
)
def test_B_zero_model_state(zero, gb):
    s = zero_model_state(7.5e9, shard=64, zero=zero, precision=BF16, optimizer=ADAMW)
    assert s.total_bytes / GB == pytest.approx(gb, abs=0.05)


def test_zero_model_state_parts():
    n, k = 1e9, 8
    s0 = zero_model_state(n, shard=k, zero=0, precision=BF16, optimizer=ADAMW)
    assert (s0.params_bytes, s0.grads_bytes, s0.master_bytes, s0.optimizer_state_bytes) == (
        2 * n,
        2 * n,
        4 * n,
        8 * n,
    )
    assert s0.optimizer_bytes == 12 * n
    s1 = zero_model_state(n, shard=k, zero=1, precision=BF16, optimizer=ADAMW)
    assert s1.master_bytes == 4 * n / k and s1.optimizer_state_bytes == 8 * n / k
    assert s1.grads_bytes == 2 * n
    s2 = zero_model_state(n, shard=k, zero=2, precision=BF16, optimizer=ADAMW)
    assert s2.grads_bytes == 2 * n / k and s2.params_bytes == 2 * n
    s3 = zero_model_state(n, shard=k, zero=3, precision=BF16, optimizer=ADAMW)
    assert s3.total_bytes == pytest.approx(16 * n / k)


def test_zero_with_one_rank_shards_nothing():
    for z in range(4):
        s = zero_model_state(1e9, shard=1, zero=z, precision=BF16, optimizer=ADAMW)
        assert s.total_bytes == 16e9


def test_model_state_total():
    s = ModelState(params_bytes=1, grads_bytes=2, master_bytes=3, optimizer_state_bytes=4)
    assert s.optimizer_bytes == 7 and s.total_bytes == 10


# ---- stage parameters ------------------------------------------------------------------------
def _stage_sum(spec: ModelSpec, plan: Plan) -> float:
    if plan.pp == 1:
        return stage_params(spec, plan, "only").dense
    middle = stage_params(spec, plan, "middle").dense
    return (
        stage_params(spec, plan, "first").dense
        + (plan.pp - 2) * middle
        + stage_params(spec, plan, "last").dense
    )


@pytest.mark.parametrize("pp", [1, 2, 4, 8, 16, 32])
def test_stages_sum_to_the_model_untied(pp):
    # llama-2-7b is untied: first holds the embedding, last the final norm and head, and the
    # 32 / pp layers each stage holds add up to all 32
    assert _stage_sum(L2_7B, Plan(pp=pp)) == pytest.approx(count_params(L2_7B).total)


def test_single_stage_holds_the_whole_tied_model():
    assert _stage_sum(GPT2, Plan()) == pytest.approx(count_params(GPT2).total)


@pytest.mark.parametrize("pp", [2, 3, 4, 6, 12])
def test_tied_pp_keeps_a_copy_of_the_embedding_on_the_last_stage(pp):
    # gpt2 (tied): Megatron keeps a word-embedding copy on the last stage when pp > 1,
    # so the stages hold total + vocab * d = total + 50257 * 768
    extra = GPT2.vocab_size * GPT2.d_model
    assert _stage_sum(GPT2, Plan(pp=pp)) == pytest.approx(count_params(GPT2).total + extra)


def test_stage_roles():
    p = count_params(L2_7B)
    layer = p.per_layer / L2_7B.n_layers
    plan = Plan(pp=4)  # 8 layers per stage
    first = stage_params(L2_7B, plan, "first")
    last = stage_params(L2_7B, plan, "last")
    middle = stage_params(L2_7B, plan, "middle")
    assert middle.dense == pytest.approx(8 * layer)
    assert first.dense == pytest.approx(8 * layer + p.embedding_token)
    assert last.dense == pytest.approx(8 * layer + p.final_norm + p.head)
    assert first.layer_dense == pytest.approx(layer)
    assert first.experts == 0


def test_tp_splits_matrices_not_norms():
    # tp 4: qkv, proj and MLP split 4 ways; the two RMSNorms per layer stay whole
    p = count_params(L2_7B)
    n = L2_7B.n_layers
    norms = (p.attention_norm + p.mlp_norm) / n
    split = (p.attention_qkv + p.attention_proj + p.mlp) / n
    sp_ = stage_params(L2_7B, Plan(tp=4), "only")
    assert sp_.layer_dense == pytest.approx(norms + split / 4)
    # the vocab-parallel embedding and head split too, the final norm does not
    assert sp_.dense == pytest.approx(
        n * (norms + split / 4) + 2 * p.embedding_token / 4 + p.final_norm
    )


def test_experts_split_by_ep_and_tp():
    p = count_params(MIXTRAL)
    full = stage_params(MIXTRAL, Plan(), "only").experts
    assert full == pytest.approx(p.moe_experts)
    assert stage_params(MIXTRAL, Plan(ep=8, dp=8), "only").experts == pytest.approx(
        p.moe_experts / 8
    )
    assert stage_params(MIXTRAL, Plan(ep=4, tp=2, dp=4), "only").experts == pytest.approx(
        p.moe_experts / 8
    )


# ---- micro-batches in flight ------------------------------------------------------------------
@pytest.mark.parametrize(("m", "pp"), [(1, 1), (8, 1), (8, 4), (16, 8), (2, 8), (32, 4)])
def test_in_flight_gpipe_keeps_all(m, pp):
    assert in_flight_micro_batches(Plan(pp=pp, schedule="gpipe", grad_accum=m)) == m


@pytest.mark.parametrize(("m", "pp", "want"), [(1, 1, 1), (8, 1, 1), (8, 4, 4), (2, 8, 2)])
def test_in_flight_1f1b_at_most_pp(m, pp, want):
    # Narayanan et al. 2021, Sec. 2.2.1: min(m, pp)
    assert in_flight_micro_batches(Plan(pp=pp, grad_accum=m)) == want


@pytest.mark.parametrize(
    ("m", "pp", "vpp", "want"),
    [
        # Korthikanti et al. 2022, Sec. 4.2.3: pp * (1 + (pp - 1) / (pp * vpp))
        (8, 4, 2, 4 * (1 + 3 / 8)),  # 5.5
        (16, 8, 4, 8 * (1 + 7 / 32)),  # 9.75
        (4, 2, 5, 2 * (1 + 1 / 10)),  # 2.2
    ],
)
def test_in_flight_interleaved(m, pp, vpp, want):
    plan = Plan(pp=pp, vpp=vpp, schedule="interleaved", grad_accum=m)
    assert in_flight_micro_batches(plan) == pytest.approx(want)
    # = pp + (pp - 1) / vpp: more than plain 1F1B's pp, at most pp + (pp - 1) / 2 (vpp >= 2)
    assert in_flight_micro_batches(plan) == pytest.approx(pp + (pp - 1) / vpp)
    assert min(m, pp) < in_flight_micro_batches(plan) <= pp + (pp - 1) / 2


def test_in_flight_interleaved_falls_toward_pp_as_vpp_grows():
    held = [
        in_flight_micro_batches(Plan(pp=4, vpp=v, schedule="interleaved", grad_accum=8))
        for v in (2, 4, 8)
    ]
    assert held[0] > held[1] > held[2] > 4


@pytest.mark.parametrize(("m", "pp", "i", "want"), [(8, 4, 1, 3), (8, 4, 3, 1), (2, 8, 1, 2)])
def test_in_flight_1f1b_on_stage_i_is_min_m_pp_minus_i(m, pp, i, want):
    # Narayanan et al. 2021, Sec. 2.2.1: stage i has pp - i micro-batches in flight
    assert in_flight_micro_batches(Plan(pp=pp, grad_accum=m), stage_index=i) == want


def test_in_flight_interleaved_on_stage_i_follows_megatron_warmup():
    # Megatron's warm-up on rank i: 2 (pp - i - 1) + (vpp - 1) pp chunks, plus 1, of 1/vpp each
    plan = Plan(pp=4, vpp=2, schedule="interleaved", grad_accum=8)
    for i in range(4):
        chunks = 2 * (4 - i - 1) + (2 - 1) * 4 + 1
        assert in_flight_micro_batches(plan, stage_index=i) == pytest.approx(chunks / 2)


def test_uneven_split_puts_each_stages_layers_on_it():
    # 32 layers as 6 + 8 + 9 + 9: the first stage holds 6 layers' weights and activations
    uneven = Plan(pp=4, grad_accum=8, pp_layers=(6, 8, 9, 9))
    even = Plan(pp=4, grad_accum=8)
    first_u, first_e = stage_params(L2_7B, uneven, "first"), stage_params(L2_7B, even, "first")
    per_layer = (first_e.dense - first_u.dense) / 2
    assert stage_params(L2_7B, uneven, "middle").dense == pytest.approx(
        stage_params(L2_7B, even, "middle").dense + per_layer
    )
    assert per_layer == pytest.approx(first_e.layer_dense)
