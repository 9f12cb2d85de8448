"""Megatron-LM arguments: parsed by an argparse parser built from the option table (written
from Megatron-LM d98e8a6's arguments.py), and round-tripped to the plan and the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emit_jobs import README_70B, STEPS_15T, job, parse_megatron
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.emit import megatron


def test_the_70b_plan_round_trips() -> None:
    a = parse_megatron(megatron.emit(job(README_70B, train_steps=STEPS_15T)).text)
    tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, 2
    assert a.context_parallel_size == cp
    dp = 1024 // (tp * pp * cp)  # Megatron's data-parallel size: world / (tp * pp * cp)
    assert (dp, a.global_batch_size // (a.micro_batch_size * dp)) == (256, 2)
    assert a.sequence_parallel and a.use_megatron_fsdp
    assert a.data_parallel_sharding_strategy == "optim_grads_params"  # ZeRO-3
    assert (a.seq_length, a.train_iters, a.bf16) == (8192, STEPS_15T, True)
    # llama-3-70b's shape (core/spec/presets.py)
    shape = (a.num_layers, a.hidden_size, a.ffn_hidden_size, a.num_attention_heads)
    assert shape == (80, 8192, 28672, 64)
    assert (a.num_query_groups, a.kv_channels, a.vocab_size) == (8, 128, 128256)
    assert a.swiglu and a.untie_embeddings_and_output_weights and a.disable_bias_linear
    assert a.recompute_granularity is None


def test_interleaved_pipeline_zero1_hsdp_and_every_kth_recompute() -> None:
    plan = Plan(
        dp=32,
        tp=8,
        sp=True,
        pp=4,
        vpp=2,
        schedule="interleaved",
        zero=1,
        zero_shard=8,
        micro_batch=1,
        grad_accum=8,
        recompute="full",
        recompute_every=2,
    )
    a = parse_megatron(megatron.emit(job(plan)).text)
    assert a.num_layers_per_virtual_pipeline_stage == 10  # 80 / (4 * 2)
    assert a.use_distributed_optimizer and a.num_distributed_optimizer_instances == 4
    # the plan recomputes ceil(20 / 2) = 10 layers per stage; Megatron 5 of each 10-layer chunk
    assert (a.recompute_method, a.recompute_num_layers) == ("block", 5)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in megatron.emit(job(plan)).notes[-1]
    full = parse_megatron(megatron.emit(job(Plan(dp=1024, zero=1, recompute="full"))).text)
    assert (full.recompute_method, full.recompute_num_layers) == ("uniform", 1)


def test_uneven_stages_moe_and_mla() -> None:
    plan = Plan(
        dp=16,
        tp=8,
        sp=True,
        pp=8,
        pp_layers=(7, 8, 8, 8, 8, 8, 8, 6),
        ep=8,
        zero=1,
        micro_batch=1,
        grad_accum=16,
        recompute="selective",
    )
    a = parse_megatron(megatron.emit(job(plan, model="deepseek-v3", seq_len=4096)).text)
    assert (a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers) == (7, 6)
    assert (a.num_experts, a.moe_router_topk, a.expert_model_parallel_size) == (256, 8, 8)
    assert a.moe_layer_freq == "([0]*3+[1]*58)" and a.moe_router_enable_expert_bias
    assert a.multi_latent_attention and (a.qk_head_dim, a.qk_pos_emb_head_dim) == (128, 64)
    assert a.recompute_granularity == "selective"


@pytest.mark.parametrize(
    ("plan", "kw", "named"),
    [
        (Plan(dp=256, pp=4, schedule="gpipe", zero=1), {}, "schedule = 'gpipe'"),
        (Plan(dp=1024, zero=3, recompute="selective-op"), {}, "recompute = 'selective-op'"),
        (Plan(dp=1024, zero=3), {"precision": "amp-bf16"}, "precision = 'amp-bf16'"),
        (Plan(dp=1024, zero=3, zero_shard=8), {}, "zero_shard = 8"),
        (Plan(dp=1024, zero=3), {"model": "gemma-2-9b"}, "sliding_window"),
    ],
)
def test_a_feature_without_an_equivalent_is_refused_in_one_line(plan, kw, named) -> None:
    with pytest.raises(SpecError) as err:
        megatron.emit(job(plan, **kw))
    assert named in str(err.value) and "cannot be emitted for megatron" in str(err.value)


def test_an_accounted_interleaved_split_names_chunks_per_rank_and_the_accounting() -> None:
    # issue 23 item 4's case: 126 layers + embedding + loss = 128 slots on pp8 x vpp8
    plan = Plan(dp=2, tp=8, sp=True, pp=8, vpp=8, schedule="interleaved", grad_accum=16)
    plan = replace(plan, embedding_in_pp_split=True, loss_in_pp_split=True)
    a = parse_megatron(megatron.emit(job(plan, model="llama-3-405b")).text)
    assert a.num_virtual_stages_per_pipeline_rank == 8
    assert a.num_layers_per_virtual_pipeline_stage is None  # 126 / 64 is no whole count
    assert a.account_for_embedding_in_pipeline_split and a.account_for_loss_in_pipeline_split
    uneven = replace(plan, pp_layers=(15, 16, 16, 16, 16, 16, 16, 15))
    with pytest.raises(SpecError, match="pp_layers"):
        megatron.emit(job(uneven, model="llama-3-405b"))
