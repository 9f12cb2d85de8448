"""Per-op selective checkpointing (selective-op): the saved set pinned to torchtitan's policy,
and its memory and time between no recomputation and full recomputation."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.activations import (
    activation_memory,
    layer_activations,
    op_checkpoint_layer,
)
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.op_checkpoint import (
    TORCHTITAN_SOURCE,
    layer_matmuls,
    recomputed_flops,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

L3_8B = get_preset("llama-3-8b")
DENSE = ["llama-3-8b", "llama-2-7b", "llama-3-70b", "gpt2", "gemma-2-9b"]


def _saved(spec) -> tuple[list[str], list[str]]:
    mms = layer_matmuls(spec)
    return [m.name for m in mms if m.saved], [m.name for m in mms if not m.saved]


def test_llama_saves_every_other_matmul_as_torchtitan():
    """torchtitan b5bcd76 (TORCHTITAN_SOURCE), SelectiveAC._wrap_block: the mm counter is
    incremented per mm of a block's forward and `count % 2 == 0` is recomputed; llama3's block
    runs wq, wk, wv (QKVLinear), wo, w1, w3, w2 (FeedForward: w2(silu(w1(x)) * w3(x)))."""
    assert "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a" in TORCHTITAN_SOURCE
    assert _saved(L3_8B) == (["wq", "wv", "w1", "w2"], ["wk", "wo", "w3"])


def test_a_biased_linear_is_addmm_saved_and_not_counted():
    """`addmm` is in the compute-intensive save list but not in the policy's mm_ops."""
    assert _saved(get_preset("gpt2")) == (["wq", "wk", "wv", "wo", "up", "w2"], [])
    qwen_like = dataclasses.replace(L3_8B, qkv_bias=True)
    assert _saved(qwen_like) == (["wq", "wk", "wv", "wo", "w3"], ["w1", "w2"])


def test_llama_kept_tensors_per_token():
    """Block input, wq, wv, attention output, w1, w2 outputs (bf16), and the fp32 logsumexp of
    32 heads: (4096 + 4096 + 1024 + 4096 + 14336 + 4096) * 2 + 32 * 4 bytes per token."""
    kept = op_checkpoint_layer(
        L3_8B, seq_len=1, micro_batch=1, activation_bytes=2, flash_attention=True
    )
    assert kept.total_bytes == 31744 * 2 + 32 * 4
    assert kept.unread_bytes == 4096 * 2  # w2's output: saved, never read by the backward


def test_recomputed_flops_are_wk_wo_w3():
    per_token = 2 * 4096 * (1024 + 4096 + 14336)
    assert recomputed_flops(L3_8B, 8192) == 32 * 8192 * per_token
    f = training_flops(L3_8B, 8192, recompute="selective-op")
    assert f.recompute_flops_per_token == 32 * per_token


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("tp,sp", [(1, False), (4, False), (4, True), (8, True)])
def test_per_layer_memory_between_none_and_full(name, tp, sp):
    spec = get_preset(name)
    if spec.bias and sp:
        pytest.skip("all-biased linears: see test_all_biased_linears_under_sp_keep_more")
    kw = dict(seq_len=1024, micro_batch=2, activation_bytes=2, tp=tp, sp=sp)
    for flash in (False, True):
        none = layer_activations(spec, flash_attention=flash, **kw).total_bytes
        kept = op_checkpoint_layer(spec, flash_attention=flash, **kw).total_bytes
        full = 1024 * 2 * spec.d_model * 2 / (tp if sp else 1)  # the checkpointed input
        assert none >= kept >= full


def test_all_biased_linears_under_sp_keep_more():
    """Every linear of gpt2 is an addmm, so the policy saves every output, the row-parallel
    partial sums (full width on each TP rank) and the SP reduce-scatter outputs among them:
    under TP 8 with SP that is more than no recomputation keeps. The ordering none >=
    selective-op is a property of bias-free blocks, not of the policy."""
    kw = dict(seq_len=1024, micro_batch=2, activation_bytes=2, tp=8, sp=True)
    spec = get_preset("gpt2")
    none = layer_activations(spec, flash_attention=True, **kw).total_bytes
    assert op_checkpoint_layer(spec, flash_attention=True, **kw).total_bytes > none


@pytest.mark.parametrize("name", DENSE)
def test_activation_memory_between_none_and_full(name):
    spec = get_preset(name)
    kw = dict(seq_len=1024, micro_batch=1, activation_bytes=2, flash_attention=True)
    total = {r: activation_memory(spec, recompute=r, **kw).total_bytes for r in ("none", "full")}
    op = activation_memory(spec, recompute="selective-op", **kw).total_bytes
    assert total["none"] >= op >= total["full"]


PLANS = [
    Plan(dp=8, zero=3),
    Plan(dp=2, tp=4, sp=True, grad_accum=4),
    Plan(dp=2, tp=4, grad_accum=4, flash_attention=False),
    Plan(dp=2, tp=2, pp=4, grad_accum=8),
]


@pytest.mark.parametrize("plan", PLANS, ids=Plan.describe)
def test_step_time_and_memory_between_none_and_full(plan):
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=plan.n_gpus)
    kw = dict(seq_len=8192, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))
    step, mem, hw = {}, {}, {}
    for r in ("none", "selective-op", "full"):
        p = dataclasses.replace(plan, recompute=r)
        t = step_time(L3_8B, p, cluster, causal=True, **kw)
        step[r], hw[r] = t.step_seconds, t.hardware_flops_per_step
        mem[r] = plan_memory(L3_8B, p, seq_len=8192, precision=kw["precision"],
                             optimizer=kw["optimizer"]).activations_bytes  # fmt: skip
    assert step["none"] < step["selective-op"] < step["full"]
    assert hw["none"] < hw["selective-op"] < hw["full"]
    assert mem["none"] > mem["selective-op"] > mem["full"]


def test_moe_and_mla_are_refused():
    for name in ("mixtral-8x7b", "deepseek-v3"):
        spec = get_preset(name)
        with pytest.raises(SpecError, match="selective-op"):
            activation_memory(
                spec, seq_len=1024, micro_batch=1, activation_bytes=2, recompute="selective-op"
            )
        plan = Plan(dp=8, recompute="selective-op")
        with pytest.raises(SpecError, match="selective-op"):
            validate_plan(plan, spec, n_gpus=8, seq_len=1024)
