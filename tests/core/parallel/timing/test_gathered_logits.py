"""The step time of a DTensor-TP head that gathers its logits whole to every TP rank, and of a
token embedding TP leaves whole (KempnerForge's TP plan: core/spec/frameworks.py KEMPNERFORGE;
timing in core.parallel.timing.loss_time, comm_time and step_time)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from trainbudget.core.ops import SCALAR, numpy_ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.comm import collective_total
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY
from trainbudget.core.parallel.timing.loss_time import (
    gathered_logits_copy_seconds,
    loss_extra_bytes_per_logit,
    loss_logits,
    loss_seconds,
)
from trainbudget.core.parallel.timing.step_time import (
    micro_batch_terms,
    step_terms,
    update_bytes_per_param,
)
from trainbudget.core.spec.frameworks import FRAMEWORKS, KEMPNERFORGE
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.loss_kernels import get_loss_kernel
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

SEQ = 4096
SPEC = get_preset("llama-2-7b")  # V = 32000, d = 4096: KempnerForge's 7B rows
HW = get_hardware("h200")
PRECISION = get_precision("bf16-mixed")
KW = dict(seq_len=SEQ, precision=PRECISION, optimizer=get_optimizer("adamw"))
# the same row with the loss on vocabulary-parallel logits (a kernel that does not gather)
SPLIT_LOSS = replace(KEMPNERFORGE, loss_kernel="torch-cross-entropy")


def test_the_loss_runs_over_the_whole_vocabulary_where_the_head_gathers_it():
    # 8192 tokens x 32000 / 4 on each rank, or all 32000 columns
    assert loss_logits(8192, 32000, 4, False) == 65_536_000
    assert loss_logits(8192, 32000, 4, True) == 262_144_000
    assert get_loss_kernel(KEMPNERFORGE.loss_kernel).whole_vocabulary


def test_dtensor_s_copies_around_the_gather_by_hand():
    """torch 2.13: forward, all_gather_single(gather_dim=-1) re-lays the gathered shards with
    torch.cat (8192 x 32000 x 2 bytes read and written: 1,048,576,000 bytes); backward,
    Replicate -> Shard clones the rank's 8192 x 8000 slice (262,144,000 bytes)."""
    assert gathered_logits_copy_seconds(8192, 32000, 4, 2, 1.0, SCALAR) == 1_310_720_000
    assert gathered_logits_copy_seconds(8192, 32000, 1, 2, 1.0, SCALAR) == 0.0
    tps = np.array([1, 2, 4, 8])
    grid = gathered_logits_copy_seconds(8192, 32000, tps, 2, 3e12, numpy_ops())
    scalars = [gathered_logits_copy_seconds(8192, 32000, int(t), 2, 3e12, SCALAR) for t in tps]
    assert grid.tolist() == scalars


def _head(framework, plan: Plan):
    cluster = Cluster(hardware=HW, n_gpus=plan.n_gpus)
    L = PlanNumbers.of(plan)
    kw = dict(seq_len=SEQ, precision=PRECISION, framework=framework)
    return micro_batch_terms(SPEC, L, cluster, **kw).head_seconds


def test_the_head_adds_the_loss_over_the_other_ranks_columns_and_the_copies():
    """TP 4, micro-batch 2 x 4096 tokens: the loss over the 3/4 of the vocabulary the rank
    did not compute, at the kernel's bytes per logit, and DTensor's copies."""
    plan = Plan(tp=4, sp=True, micro_batch=2)
    tokens, v, e = 2 * SEQ, SPEC.vocab_size, PRECISION.activation_bytes
    rate = HW.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    extra = loss_extra_bytes_per_logit(KEMPNERFORGE.loss_kernel, KEMPNERFORGE.compiled, e)
    ungathered = replace(KEMPNERFORGE, loss_kernel="megatron-vocab-parallel")
    # the same bytes per logit, without the gather: compare against the kernel's own traffic
    assert get_loss_kernel("megatron-vocab-parallel").whole_vocabulary is False
    other = loss_extra_bytes_per_logit("megatron-vocab-parallel", False, e)
    want = (
        loss_seconds(tokens * v, e, extra, rate)
        - loss_seconds(tokens * v / 4, e, other, rate)
        + gathered_logits_copy_seconds(tokens, v, 4, e, rate, SCALAR)
    )
    got = _head(KEMPNERFORGE, plan) - _head(ungathered, plan)
    assert got == pytest.approx(want, rel=1e-12)


def _terms(framework, plan: Plan):
    cluster = Cluster(hardware=HW, n_gpus=plan.n_gpus)
    return step_terms(SPEC, plan, cluster, framework=framework, **KW)


def test_each_micro_batch_gathers_its_logits_over_the_tp_group_exposed():
    """tokens x V x 2 bytes (2 x 4096 x 32000 x 2 = 524,288,000) all-gathered over the 4
    TP ranks of one node, once per micro-batch forward (4 of them); nothing backward."""
    plan = Plan(tp=4, sp=True, micro_batch=2, grad_accum=4)
    n_bytes = 2 * SEQ * SPEC.vocab_size * 2
    assert n_bytes == 524_288_000
    gathered = [
        t for name, t in _terms(KEMPNERFORGE, plan).comm.collectives if t.n_bytes == n_bytes
    ]
    assert [(t.kind, t.count, t.group_size) for t in gathered] == [("all_gather", 4, 4)]
    cluster = Cluster(hardware=HW, n_gpus=4)
    alone = collective_total("all_gather", n_bytes, 4, 4, cluster, 4)
    assert gathered[0].seconds == alone.seconds > 0
    exposed = _terms(KEMPNERFORGE, plan).comm.tp_seconds - _terms(SPLIT_LOSS, plan).comm.tp_seconds
    assert exposed == pytest.approx(alone.seconds, rel=1e-12)


def test_fsdp_reduces_gathers_and_updates_the_whole_embedding_where_tp_leaves_it():
    """TP 2 x FSDP 2, one micro-batch: the gradient reduce-scatter carries V x d x (1 - 1/2)
    more parameters (32000 x 4096 / 2 = 65,536,000) at the row's fp32 reduction, and the
    optimizer updates that many / 2 more on each GPU."""
    plan = Plan(tp=2, sp=True, dp=2, zero=3, micro_batch=2)
    split = replace(KEMPNERFORGE, tp_splits_embedding=True)
    extra_params = SPEC.vocab_size * SPEC.d_model / 2
    assert extra_params == 65_536_000

    def reduced(framework) -> float:
        return sum(
            t.n_bytes * t.count
            for name, t in _terms(framework, plan).comm.collectives
            if name == "dp_grad_reduce"
        )

    gb = KEMPNERFORGE.grad_reduce_bytes
    assert reduced(KEMPNERFORGE) - reduced(split) == pytest.approx(extra_params * gb, rel=1e-12)
    rate = (
        HW.hbm_bytes_per_second * DEFAULT_EFFICIENCY.resolved(HW, KEMPNERFORGE.attention_kernel).hbm
    )
    per_param = update_bytes_per_param(PRECISION, get_optimizer("adamw"))
    update = _terms(KEMPNERFORGE, plan).optimizer_seconds - _terms(split, plan).optimizer_seconds
    assert update == pytest.approx(extra_params / 2 * per_param / rate, rel=1e-12)


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_a_row_that_neither_gathers_logits_nor_keeps_the_embedding_whole_sends_nothing_new(
    name,
):
    """Every TP collective of such a row is one layer's activations (tokens x d x 2 bytes):
    no logit-sized gather (with the embedding split, the step's parameters are
    `stage_params`' as before)."""
    framework = FRAMEWORKS[name]
    if get_loss_kernel(framework.loss_kernel).whole_vocabulary or not framework.tp_splits_embedding:
        pytest.skip("the row gathers logits or keeps the embedding whole")
    plan = Plan(tp=4, sp=True, dp=2, zero=3, micro_batch=1)
    terms = _terms(framework, plan)
    act = SEQ * SPEC.d_model * PRECISION.activation_bytes
    tp = [t for n, t in terms.comm.collectives if n == "tp" and t.count > 0]
    assert tp and all(t.n_bytes == act for t in tp)
