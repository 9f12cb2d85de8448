"""comm_time: the pipeline's sends under Megatron-Core's interleaved schedule with
overlap_p2p_comm (Framework.overlaps_p2p_interleaved)."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.comm_time import p2p_exposed_share
from trainbudget.core.parallel.timing.dp_time import OVERLAP_COMPUTE_SLOWDOWN
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.spec.frameworks import get_framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

KW = dict(seq_len=4096, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adamw"))


def test_exposed_share_is_the_first_stage_warm_up():
    # megatron/core/pipeline_parallel/schedules.py: rank 0 warms up (pp - 1) x 2 +
    # (vpp - 1) x pp chunk passes of vpp x m; pp 4, vpp 10, m 32: 6 + 36 = 42 of 320
    assert p2p_exposed_share(4, 10, 32) == pytest.approx(42 / 320)
    # pp 8, vpp 5, m 64: 14 + 32 = 46 of 320
    assert p2p_exposed_share(8, 5, 64) == pytest.approx(46 / 320)
    # too few micro-batches: the whole schedule is warm-up
    assert p2p_exposed_share(8, 2, 9) == 1.0
    # m == pp: Megatron runs every micro-batch in the warm-up
    assert p2p_exposed_share(4, 2, 4) == 1.0
    # no interleaving: Megatron turns the overlap off
    assert p2p_exposed_share(4, 1, 64) == 1.0


def test_interleaved_sends_hide_behind_the_steady_state():
    """The megatron row overlaps the interleaved schedule's sends; megatron-legacy (the
    2021-22 code, not read for it) keeps them exposed: the same bytes, the exposed time the
    warm-up's share plus the slowdown the hidden rest costs the compute beside it."""
    llama = get_preset("llama-2-13b")
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=16, gpus_per_node=8)
    plan = Plan(dp=4, pp=4, vpp=10, grad_accum=32, schedule="interleaved")
    megatron = get_framework("megatron")
    waiting = dataclasses.replace(megatron, overlaps_p2p_interleaved=False)
    t = step_time(llama, plan, cluster, framework=megatron, **KW)
    t0 = step_time(llama, plan, cluster, framework=waiting, **KW)
    assert t.comm_bytes["pp"] == pytest.approx(t0.comm_bytes["pp"])
    whole = t0.breakdown_seconds["pp_comm"]
    share = 42 / 320
    slowdown = OVERLAP_COMPUTE_SLOWDOWN / (1 + OVERLAP_COMPUTE_SLOWDOWN)
    expected = whole * share + whole * (1 - share) * slowdown
    assert t.breakdown_seconds["pp_comm"] == pytest.approx(expected, rel=1e-9)
    assert not get_framework("megatron-legacy").overlaps_p2p_interleaved
    # 1F1B without interleaving: nothing hidden
    plain = dataclasses.replace(plan, vpp=1, schedule="1f1b")
    assert step_time(llama, plain, cluster, framework=megatron, **KW).breakdown_seconds[
        "pp_comm"
    ] == pytest.approx(
        step_time(llama, plain, cluster, framework=waiting, **KW).breakdown_seconds["pp_comm"]
    )
