"""Step time under a plan: structure, bounds, bubble, communication volumes and utilisation.

Predicted seconds are not pinned: the efficiency constants may be recalibrated. The tests check
what the model must satisfy whatever they are: sums, bounds, ratios, orderings.
"""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import (
    DEFAULT_HOST_MEMORY_BYTES_PER_SECOND_PER_GPU,
    DEFAULT_PCIE_BYTES_PER_SECOND,
    Cluster,
)
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.timing.dp_time import OVERLAP_COMPUTE_SLOWDOWN
from trainbudget.core.parallel.timing.step_time import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    StepTime,
    step_bounds,
    step_terms,
    step_time,
    update_bytes_per_param,
    zero_shard_params,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

BF16 = get_precision("bf16-mixed")
FP32 = get_precision("fp32")
ADAMW = get_optimizer("adamw")
H100 = get_hardware("h100-sxm")
L2_7B = get_preset("llama-2-7b")
MIXTRAL = get_preset("mixtral-8x7b")
SEQ = 4096
L2_7B_PARAMS = 6_738_415_616  # Llama 2 7B's exact count (tests/core/spec/test_presets.py)


def st(plan: Plan, spec: ModelSpec = L2_7B, *, precision=BF16, seq_len=SEQ, **kw) -> StepTime:
    cluster = Cluster(hardware=H100, n_gpus=plan.n_gpus)
    return step_time(
        spec, plan, cluster, seq_len=seq_len, precision=precision, optimizer=ADAMW, **kw
    )


PLANS = [
    Plan(),
    Plan(dp=8, grad_accum=4),
    Plan(dp=8, zero=1, grad_accum=2),
    Plan(dp=8, zero=3, grad_accum=2),
    Plan(dp=2, tp=4, grad_accum=4),
    Plan(dp=2, tp=4, sp=True, grad_accum=4, recompute="full"),
    Plan(dp=2, tp=2, pp=4, grad_accum=8),
    Plan(dp=2, tp=2, pp=4, vpp=2, schedule="interleaved", grad_accum=8),
    Plan(dp=2, tp=2, pp=2, schedule="gpipe", grad_accum=4),
    Plan(dp=4, cp=4, zero=2, grad_accum=2),
    Plan(dp=16, tp=8, zero=1, grad_accum=4),  # 128 GPUs, dp across nodes
    Plan(dp=8, zero=3, offload_optimizer="cpu"),
    Plan(dp=8, zero=3, offload_params="nvme", offload_optimizer="nvme"),
    Plan(dp=8, flash_attention=False, recompute="selective"),
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_breakdown_sums_to_step(plan):
    t = st(plan)
    assert sum(t.breakdown_seconds.values()) == pytest.approx(t.step_seconds, rel=1e-12)
    assert all(v >= 0 for v in t.breakdown_seconds.values())
    for key in ("compute", "pipeline_bubble", "tp_comm", "pp_comm", "optimizer", "offload"):
        assert key in t.breakdown_seconds
    assert t.breakdown_seconds["compute"] == t.compute_seconds


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_step_between_its_bounds(plan):
    t = st(plan)
    assert 0 < t.lower_bound_seconds <= t.step_seconds * (1 + 1e-12)
    assert t.step_seconds <= t.upper_bound_seconds * (1 + 1e-12)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_exposed_communication_never_exceeds_the_total(plan):
    t = st(plan)
    exposed = sum(v for k, v in t.breakdown_seconds.items() if k.endswith("_comm"))
    assert exposed <= sum(t.comm_seconds.values()) * (1 + 1e-12)


def test_B_bounds():
    # seed 004, B-bounds: perfect overlap -> max(compute, comm), none -> compute + comm
    assert step_bounds(3.0, 2.0) == (3.0, 5.0)
    assert step_bounds(2.0, 5.0) == (5.0, 7.0)
    assert step_bounds(4.0, 0.0) == (4.0, 4.0)


def test_single_gpu_has_no_communication():
    t = st(Plan(grad_accum=4))
    assert t.comm_seconds == {} and t.comm_bytes == {}
    assert t.breakdown_seconds["tp_comm"] == t.breakdown_seconds["pp_comm"] == 0
    assert "dp_comm" not in t.breakdown_seconds
    assert t.breakdown_seconds["pipeline_bubble"] == 0
    assert t.overlap_note == "no communication (one GPU)"
    # no communication: both bounds are compute (+ the optimizer step for the upper one)
    assert t.lower_bound_seconds == pytest.approx(t.compute_seconds)


def test_tokens_per_second():
    for plan in PLANS:
        t = st(plan)
        assert t.tokens_per_step == plan.global_batch * SEQ
        assert t.tokens_per_second == pytest.approx(t.tokens_per_step / t.step_seconds)
        assert t.n_gpus == plan.n_gpus


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_mfu_at_most_hfu_at_most_one(plan):
    t = st(plan)
    assert 0 < t.mfu <= t.hfu <= 1


def test_mfu_definition():
    t = st(Plan(dp=8, grad_accum=2))
    peak = H100.peak_flops_per_second("bf16")
    assert t.peak_flops_per_second == peak
    assert t.mfu == pytest.approx(t.model_flops_per_step / (t.step_seconds * 8 * peak))


# ---- pipeline bubble: every stage's micro-batch but the slowest one's, / vpp interleaved --------
@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 16), (8, 8), (8, 32)])
def test_bubble_is_a_micro_batch_through_every_stage_but_the_slowest(pp, m):
    """1F1B over stages of times t_s takes (m - 1) max t_s + sum t_s (the first forward fills
    every stage, the last backward drains them). With an even split the last stage, its layers
    and the head, is the slowest; the other pp - 1 hold only their layers, so the bubble is
    (pp - 1) of those stages' micro-batches: a little under (pp - 1) / m of the compute
    (Narayanan et al. 2021's fraction for equal stages)."""
    plan = Plan(dp=1, tp=1, pp=pp, grad_accum=m)
    t = st(plan)
    terms = step_terms(L2_7B, plan, Cluster(hardware=H100, n_gpus=pp), seq_len=SEQ,
                       precision=BF16, optimizer=ADAMW)  # fmt: skip
    mb = terms.micro_batch
    layers_only = mb.forward_seconds + mb.backward_seconds
    assert mb.stage_seconds == pytest.approx(layers_only + mb.head_seconds)
    bubble = t.breakdown_seconds["pipeline_bubble"]
    assert bubble == pytest.approx((pp - 1) * layers_only)
    share = bubble / t.compute_seconds
    assert share == pytest.approx((pp - 1) / m * layers_only / mb.stage_seconds)
    assert 0.8 * (pp - 1) / m < share < (pp - 1) / m


def test_an_uneven_split_fills_and_drains_through_its_lighter_stages():
    """Llama 2 7B (32 layers) on 4 stages of 9, 9, 9, 5: the largest stages set the pace, and
    the bubble is the other three stages' micro-batch (the head and 5 layers, 9 and 9)."""
    even, uneven = Plan(pp=4, grad_accum=8), Plan(pp=4, grad_accum=8, pp_layers=(9, 9, 9, 5))
    cluster = Cluster(hardware=H100, n_gpus=4)
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    per_layer = step_terms(L2_7B, even, cluster, **kw).micro_batch
    per_layer = (per_layer.forward_seconds + per_layer.backward_seconds) / 8
    mb = step_terms(L2_7B, uneven, cluster, **kw).micro_batch
    assert mb.stage_seconds == pytest.approx(9 * per_layer)
    assert mb.pipeline_seconds == pytest.approx(32 * per_layer + mb.head_seconds)
    bubble = st(uneven).breakdown_seconds["pipeline_bubble"]
    assert bubble == pytest.approx(23 * per_layer + mb.head_seconds)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 2, 8), (4, 4, 8), (8, 2, 16)])
def test_bubble_interleaved_is_1f1b_over_vpp(pp, vpp, m):
    # the same plan but the schedule: compute is the same, the bubble shrinks vpp-fold
    plain = st(Plan(pp=pp, grad_accum=m))
    inter = st(Plan(pp=pp, vpp=vpp, schedule="interleaved", grad_accum=m))
    assert inter.compute_seconds == pytest.approx(plain.compute_seconds)
    ratio = inter.breakdown_seconds["pipeline_bubble"] / plain.breakdown_seconds["pipeline_bubble"]
    assert ratio == pytest.approx(1 / vpp)
    # interleaving sends vpp times as many activations between stages
    assert inter.comm_bytes["pp"] == pytest.approx(vpp * plain.comm_bytes["pp"])


def test_more_micro_batches_amortise_the_bubble():
    fractions, per_token = [], []
    for m in (4, 8, 16, 32):
        t = st(Plan(dp=2, pp=4, grad_accum=m))
        fractions.append(t.breakdown_seconds["pipeline_bubble"] / t.compute_seconds)
        per_token.append(t.step_seconds / t.tokens_per_step)
    assert fractions == sorted(fractions, reverse=True) and len(set(fractions)) == 4
    assert per_token == sorted(per_token, reverse=True)
    assert per_token[0] > per_token[-1]


def test_no_bubble_without_pipeline():
    assert st(Plan(dp=8, grad_accum=8)).breakdown_seconds["pipeline_bubble"] == 0


# ---- communication volumes ----------------------------------------------------------------
def test_tp_comm_grows_with_tp():
    # same micro-batches; a ring all-reduce moves 2 (t - 1) / t of the activations per rank
    # (1, 1.5, 1.75 for t = 2, 4, 8); "auto" may pick the double binary tree instead (2 per
    # rank, fewer latency steps) where that is faster, so the ratio is at least the ring's
    ts = {tp: st(Plan(tp=tp, grad_accum=2)) for tp in (2, 4, 8)}
    by = {tp: t.comm_bytes["tp"] for tp, t in ts.items()}
    assert by[2] < by[4] < by[8]
    for tp in (4, 8):
        assert by[tp] / by[2] >= 2 * (tp - 1) / tp - 1e-9
    secs = [ts[tp].comm_seconds["tp"] for tp in (2, 4, 8)]
    assert secs == sorted(secs) and len(set(secs)) == 3
    # TP collectives sit between a layer's matmuls: never hidden
    assert all(t.breakdown_seconds["tp_comm"] == t.comm_seconds["tp"] for t in ts.values())


def test_sp_moves_the_same_tp_bytes():
    # each TP all-reduce becomes one all-gather + one reduce-scatter, which move what the
    # all-reduce moved (Korthikanti et al. 2022, Sec. 4.2.2: "the same bandwidth")
    a = st(Plan(tp=4, dp=2, grad_accum=2))
    b = st(Plan(tp=4, dp=2, sp=True, grad_accum=2))
    assert b.comm_bytes["tp"] == pytest.approx(a.comm_bytes["tp"])


def test_full_recompute_repeats_forward_tp_collectives():
    # 4 collectives per layer become 6
    a = st(Plan(tp=4, grad_accum=2))
    b = st(Plan(tp=4, grad_accum=2, recompute="full"))
    assert b.comm_bytes["tp"] / a.comm_bytes["tp"] == pytest.approx(6 / 4)


@pytest.mark.parametrize(("dp", "precision"), [(8, BF16), (16, BF16), (64, BF16), (8, FP32)])
def test_zero3_sends_one_and_a_half_times_zero0(dp, precision):
    # ZeRO paper Sec. 7: stage 0 all-reduces the gradients (2 (p-1)/p psi per rank, ring);
    # stage 3 reduce-scatters them ((p-1)/p psi) and all-gathers the weights for forward and
    # backward (2 (p-1)/p psi at m = 1): 3 / 2 = 1.5x when weight and gradient bytes are equal
    # (bf16-mixed: 2 and 2; fp32: 4 and 4)
    assert precision.weight_bytes == precision.grad_bytes
    z0 = sum(st(Plan(dp=dp, zero=0), precision=precision).comm_bytes.values())
    z3 = sum(st(Plan(dp=dp, zero=3), precision=precision).comm_bytes.values())
    assert z3 / z0 == pytest.approx(1.5)


@pytest.mark.parametrize("zero", [1, 2])
def test_zero12_send_what_dp_sends(zero):
    # reduce-scatter + all-gather of the updated weights = one all-reduce
    z0 = st(Plan(dp=8, zero=0)).comm_bytes
    z = st(Plan(dp=8, zero=zero)).comm_bytes
    assert set(z) == {"dp_grad_reduce", "dp_param_gather"}
    assert sum(z.values()) == pytest.approx(sum(z0.values()))


def test_zero3_gathers_every_micro_batch():
    one = st(Plan(dp=8, zero=3, grad_accum=1)).comm_bytes
    four = st(Plan(dp=8, zero=3, grad_accum=4)).comm_bytes
    assert four["zero3_gather"] == pytest.approx(4 * one["zero3_gather"])
    assert four["dp_grad_reduce"] == pytest.approx(one["dp_grad_reduce"])  # once per step


def test_context_and_expert_parallel_communicate():
    t = st(Plan(dp=2, cp=4))
    assert t.comm_bytes["cp"] > 0 and "cp_comm" in t.breakdown_seconds
    t = st(Plan(dp=8, ep=8), MIXTRAL)
    assert t.comm_bytes["ep"] > 0 and "ep_comm" in t.breakdown_seconds


def test_a_hidden_cp_ring_costs_its_overlap_slowdown():
    """At 32K tokens on 4 CP ranks inside a node the K/V ring hides behind the attention
    (exposed max(0, ring - attention) is 0), yet the attention beside it runs slower:
    cp_comm is the ring's seconds x s / (1 + s), s = OVERLAP_COMPUTE_SLOWDOWN."""
    t = st(Plan(dp=2, cp=4), seq_len=32768)
    s = OVERLAP_COMPUTE_SLOWDOWN
    assert t.breakdown_seconds["cp_comm"] == pytest.approx(t.comm_seconds["cp"] * s / (1 + s))


def test_pp_comm_present_with_pipeline_only():
    t = st(Plan(pp=4, grad_accum=4))
    assert set(t.comm_bytes) == {"pp"}
    assert t.breakdown_seconds["pp_comm"] == pytest.approx(t.comm_seconds["pp"])


def test_dp_across_nodes_is_slower_than_inside_one():
    # the same 8-way dp gradient all-reduce: inside one node (tp 1) vs one member per node
    # (tp 8 pushes dp peers onto different nodes); per-GPU bytes differ little, bandwidth 9x
    inside = st(Plan(dp=8, grad_accum=1))
    spread = Cluster(hardware=H100, n_gpus=64, gpus_per_node=8)
    t = step_time(
        L2_7B,
        Plan(dp=8, tp=8, grad_accum=1),
        spread,
        seq_len=SEQ,
        precision=BF16,
        optimizer=ADAMW,
    )
    per_byte_inside = inside.comm_seconds["dp_grad_reduce"] / inside.comm_bytes["dp_grad_reduce"]
    per_byte_spread = t.comm_seconds["dp_grad_reduce"] / t.comm_bytes["dp_grad_reduce"]
    assert per_byte_spread > per_byte_inside


# ---- recomputation and utilisation --------------------------------------------------------
def test_full_recompute_costs_time_and_widens_hfu_minus_mfu():
    base = st(Plan(dp=8, grad_accum=2))
    full = st(Plan(dp=8, grad_accum=2, recompute="full"))
    assert full.step_seconds > base.step_seconds
    assert full.compute_seconds > base.compute_seconds
    assert full.model_flops_per_step == pytest.approx(base.model_flops_per_step)
    assert full.hardware_flops_per_step > base.hardware_flops_per_step
    assert full.hfu - full.mfu > base.hfu - base.mfu
    assert base.hfu == pytest.approx(base.mfu)  # no recompute: hardware FLOPs = model FLOPs
    assert full.mfu < base.mfu


def test_selective_recompute_without_flash():
    base = st(Plan(dp=8, flash_attention=False))
    sel = st(Plan(dp=8, flash_attention=False, recompute="selective"))
    assert sel.hardware_flops_per_step > base.hardware_flops_per_step
    assert sel.step_seconds > base.step_seconds


def test_model_flops_do_not_depend_on_the_layout():
    flops = {st(p).model_flops_per_step / p.global_batch for p in PLANS}
    assert max(flops) == pytest.approx(min(flops))


# ---- offload and optimizer --------------------------------------------------------------
def test_offload_moves_the_optimizer_step_to_the_host_and_adds_transfers():
    gpu = st(Plan(dp=8, zero=3))
    cpu = st(Plan(dp=8, zero=3, offload_optimizer="cpu"))
    assert gpu.breakdown_seconds["offload"] == 0 and gpu.breakdown_seconds["optimizer"] > 0
    assert cpu.breakdown_seconds["offload"] > 0
    # the host update is slower than the GPU's (DRAM 40 GB/s per GPU against HBM 3.35 TB/s)
    assert cpu.breakdown_seconds["optimizer"] > gpu.breakdown_seconds["optimizer"]
    nvme = st(Plan(dp=8, zero=3, offload_optimizer="nvme"))
    # NVMe (3 GB/s per GPU) is slower than PCIe (25 GB/s)
    assert nvme.breakdown_seconds["offload"] > cpu.breakdown_seconds["offload"]


def test_offloaded_optimizer_time_is_the_host_adam_update():
    """ZeRO-3 over 8 GPUs: each updates 1/8 of Llama 2 7B on the host, moving the GPU update's
    bytes per parameter (bf16 gradient 2 + fp32 master read and write 8 + bf16 weight 2 +
    AdamW's two fp32 states read and written 16 = 28) at 40 GB/s per GPU."""
    cpu = st(Plan(dp=8, zero=3, offload_optimizer="cpu"))
    want = L2_7B_PARAMS / 8 * 28 / DEFAULT_HOST_MEMORY_BYTES_PER_SECOND_PER_GPU
    assert update_bytes_per_param(BF16, ADAMW) == 28
    assert cpu.breakdown_seconds["optimizer"] == pytest.approx(want, rel=1e-12)
    # 0.84e9 parameters x 28 B / 40 GB/s = 0.59 s; the bf16 weights going up (0.84e9 x 2 B
    # over 25 GB/s PCIe = 0.067 s) hide behind it, the gradients coming down (0.067 s) do not
    grads_down = L2_7B_PARAMS / 8 * 2 / DEFAULT_PCIE_BYTES_PER_SECOND
    assert cpu.breakdown_seconds["offload"] == pytest.approx(grads_down, rel=1e-12)


def test_a_slow_host_lengthens_the_offloaded_step():
    plan = Plan(dp=8, zero=3, offload_optimizer="cpu")
    fast = st(plan)
    slow_cluster = Cluster(hardware=H100, n_gpus=8, host_memory_bytes_per_second=10e9)
    slow = step_time(L2_7B, plan, slow_cluster, seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    assert slow.breakdown_seconds["optimizer"] == pytest.approx(
        4 * fast.breakdown_seconds["optimizer"]
    )
    assert slow.step_seconds > fast.step_seconds


# ---- uneven pipeline splits --------------------------------------------------------------
def test_even_pp_layers_give_the_default_step_exactly():
    for plan in (Plan(pp=4, grad_accum=16), Plan(pp=8, tp=2, sp=True, grad_accum=8)):
        given = dataclasses.replace(plan, pp_layers=(32 // plan.pp,) * plan.pp)
        a, b = st(plan), st(given)
        assert a.step_seconds == b.step_seconds
        assert a.breakdown_seconds == b.breakdown_seconds


def test_uneven_split_step_follows_its_largest_stage():
    # 32 layers over 4 stages: 8 each, or 6 + 8 + 8 + 10 (the last stage, with the head, largest)
    even = st(Plan(pp=4, grad_accum=16))
    heavy_last = st(Plan(pp=4, grad_accum=16, pp_layers=(6, 8, 8, 10)))
    assert heavy_last.breakdown_seconds["compute"] > even.breakdown_seconds["compute"]
    # the fill and drain run through the other stages: 22 layers, not the even split's 24
    assert (
        heavy_last.breakdown_seconds["pipeline_bubble"] < even.breakdown_seconds["pipeline_bubble"]
    )
    # a middle stage of 11 layers: compute and bubble are those of 11 layers (no head), which
    # the last stage's 8 layers + head do not reach
    t = step_terms(
        L2_7B,
        Plan(pp=4, grad_accum=16, pp_layers=(7, 11, 6, 8)),
        Cluster(hardware=H100, n_gpus=4),
        seq_len=SEQ,
        precision=BF16,
        optimizer=ADAMW,
    )
    per_layer = t.micro_batch.forward_seconds / 8
    backward_per_layer = t.micro_batch.backward_seconds / 8
    assert t.micro_batch.stage_seconds == pytest.approx(11 * (per_layer + backward_per_layer))
    assert t.compute_seconds == pytest.approx(16 * t.micro_batch.stage_seconds)
    # the other stages: 7 + 6 + 8 layers and the head
    other = 21 * (per_layer + backward_per_layer) + t.micro_batch.head_seconds
    assert t.bubble_seconds == pytest.approx(other)


def test_lightening_the_head_stage_shortens_the_step():
    # Megatron's --decoder-last-pipeline-num-layers: one layer fewer on the head's stage pays
    # when the head costs more than a layer. Llama 3 8B's head (d 4096 x vocab 128256, 1.05
    # GFLOP per token forward) outweighs one layer (0.44 GFLOP); Llama 2 7B's (vocab 32000)
    # does not, and there moving a layer off the last stage slows the step.
    l3 = get_preset("llama-3-8b")
    even = st(Plan(pp=4, grad_accum=16), l3)
    lighter_last = st(Plan(pp=4, grad_accum=16, pp_layers=(8, 8, 9, 7)), l3)
    assert lighter_last.step_seconds < even.step_seconds
    l2_even = st(Plan(pp=4, grad_accum=16))
    assert st(Plan(pp=4, grad_accum=16, pp_layers=(8, 8, 9, 7))).step_seconds > l2_even.step_seconds


def test_zero_shard_params():
    assert zero_shard_params(800.0, Plan(dp=8)) == 800
    assert zero_shard_params(800.0, Plan(dp=8, zero=1)) == 100
    assert zero_shard_params(800.0, Plan(dp=4, cp=2, zero=3)) == 100
    assert zero_shard_params(800.0, Plan(dp=8, zero=2, zero_shard=2)) == 400


def test_zero1_shrinks_the_optimizer_step():
    a = st(Plan(dp=8)).breakdown_seconds["optimizer"]
    b = st(Plan(dp=8, zero=1)).breakdown_seconds["optimizer"]
    assert b == pytest.approx(a / 8)


# ---- efficiency knobs ---------------------------------------------------------------------
def test_efficiency_bounds():
    for hw in (H100, get_hardware("a100-80gb"), get_hardware("tpu-v5e")):
        resolved = DEFAULT_EFFICIENCY.resolved(hw)
        for f in dataclasses.fields(Efficiency):
            assert 0 < getattr(resolved, f.name) <= 1


def test_higher_efficiency_is_faster():
    plan = Plan(dp=8, grad_accum=2)
    slow = st(plan, efficiency=Efficiency(matmul=0.5, attention=0.3, hbm=0.6))
    fast = st(plan, efficiency=Efficiency(matmul=0.9, attention=0.7, hbm=0.95))
    assert fast.compute_seconds < slow.compute_seconds
    assert fast.mfu > slow.mfu


def test_overlap_note_mentions_hidden_communication():
    t = st(Plan(dp=8, grad_accum=4))
    assert "communication hidden behind compute" in t.overlap_note


# ---- HSDP: a shard group of zero_shard dp ranks inside the dp group ---------------------------
def _hsdp(shard: int, m: int = 8) -> Plan:
    return Plan(dp=64, zero=3, zero_shard=shard, grad_accum=m)


def test_hsdp_shard_collectives_stay_on_nvlink_and_replicas_all_reduce():
    """llama-2-7b on 64 H100 (8 nodes), ZeRO-3 sharded over 8 (one node) vs all 64: the shard
    group's gathers and reduce-scatters send only the intra-node share and run at NVLink speed,
    and the sharded gradients are all-reduced across the 8 replicas."""
    full, hsdp = st(_hsdp(0)), st(_hsdp(8))
    assert "dp_replica_all_reduce" not in full.comm_seconds
    assert hsdp.comm_seconds["dp_replica_all_reduce"] > 0
    # one node: (k-1)/k of the buffer on NVLink; 64 ranks: the same plus (m-1)/m of n/k on IB
    cluster = Cluster(hardware=H100, n_gpus=64)
    # one collective per layer: 2 gathers a micro-batch, one reduce-scatter a step (GENERIC)
    for name, calls in (("zero3_gather", 2 * 8 * L2_7B.n_layers), ("dp_grad_reduce", 32)):
        assert hsdp.comm_bytes[name] < full.comm_bytes[name]
        # ring of 8 inside the node: 7 steps of NVLink latency per call, the bytes at NVLink rate
        nvlink_seconds = hsdp.comm_bytes[name] / cluster.intra_node_bytes_per_second
        latency = calls * 7 * cluster.intra_node_latency_seconds
        assert hsdp.comm_seconds[name] == pytest.approx(nvlink_seconds + latency, rel=1e-12)
    # the replicas all-reduce the 1/8 shard each holds, across nodes
    grads = L2_7B_PARAMS * BF16.grad_bytes / 8
    assert hsdp.comm_bytes["dp_replica_all_reduce"] == pytest.approx(2 * 7 / 8 * grads, rel=1e-3)


def test_hsdp_is_faster_when_gathers_are_exposed_and_needs_more_memory():
    full, hsdp = st(_hsdp(0)), st(_hsdp(8))
    assert hsdp.breakdown_seconds["dp_comm"] < full.breakdown_seconds["dp_comm"]
    # the update runs on 1/8 of the parameters instead of 1/64
    assert hsdp.breakdown_seconds["optimizer"] == pytest.approx(
        8 * full.breakdown_seconds["optimizer"]
    )
    assert hsdp.step_seconds < full.step_seconds
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    assert (
        plan_memory(L2_7B, _hsdp(8), **kw).total_bytes
        > plan_memory(L2_7B, _hsdp(0), **kw).total_bytes
    )


def test_a_shard_group_of_the_whole_dp_group_is_full_sharding():
    assert st(_hsdp(64)).step_seconds == st(_hsdp(0)).step_seconds
    assert st(Plan(dp=64, zero=1, zero_shard=64)) == st(Plan(dp=64, zero=1))


@pytest.mark.parametrize("m", [1, 4])
def test_zero3_exposes_one_layer_gather_per_micro_batch(m):
    """FSDP cannot prefetch the first layer's weights across a micro-batch boundary, and the
    backward waits for its last reduce-scatter: where each layer's compute outlasts its
    collectives (llama-2-7b, 4K tokens a micro-batch, 64 H100), that is all that stays exposed,
    plus what the hidden rest slows the compute beside it (OVERLAP_COMPUTE_SLOWDOWN)."""
    t = st(_hsdp(0, m=m))
    gather = t.comm_seconds["zero3_gather"] / (2 * m * L2_7B.n_layers)  # one layer's
    reduce = t.comm_seconds["dp_grad_reduce"] / L2_7B.n_layers  # GENERIC reduces once a step
    exposed = m * gather + reduce
    hidden = t.comm_seconds["zero3_gather"] + t.comm_seconds["dp_grad_reduce"] - exposed
    s = OVERLAP_COMPUTE_SLOWDOWN
    assert t.breakdown_seconds["dp_comm"] == pytest.approx(exposed + hidden * s / (1 + s))


def test_zero3_exposes_what_a_layers_collectives_outlast_its_compute():
    """Per layer max(compute, comm), not per step: a micro-batch of 64 tokens, whose layers
    compute for less than their gathers take, exposes the difference on every layer."""
    t = st(Plan(dp=64, zero=3), seq_len=64)
    gather = t.comm_seconds["zero3_gather"] / (2 * L2_7B.n_layers)
    assert t.breakdown_seconds["dp_comm"] > L2_7B.n_layers * gather


def test_recomputing_every_kth_layer_costs_between_none_and_full():
    base = dict(dp=2, tp=4, sp=True, grad_accum=4)
    none = st(Plan(**base))
    full = st(Plan(**base, recompute="full"))
    half = st(Plan(**base, recompute="full", recompute_every=2))
    assert none.step_seconds < half.step_seconds < full.step_seconds
    # half of the 32 layers repeat their 2 forward TP collectives
    assert half.comm_bytes["tp"] == pytest.approx(
        (none.comm_bytes["tp"] + full.comm_bytes["tp"]) / 2, rel=1e-12
    )
    # the recomputed forwards are hardware FLOPs: half the layers', then all of them
    assert none.hardware_flops_per_step < half.hardware_flops_per_step
    assert half.hardware_flops_per_step < full.hardware_flops_per_step


def test_recompute_every_needs_full_recomputation():
    with pytest.raises(SpecError, match=r"recompute_every \(2\) > 1 needs recompute 'full'"):
        validate_plan(Plan(dp=8, recompute_every=2), L2_7B, n_gpus=8, seq_len=SEQ)


def test_ep_all_to_alls_run_on_moe_layers_only():
    deepseek = get_preset("deepseek-v3")  # 61 layers, the first 3 dense (first_k_dense_replace)
    plan = Plan(dp=8, ep=8, zero=1, grad_accum=2)
    mixed, all_moe = st(plan, deepseek), st(plan, deepseek.replace(n_dense_layers=0))
    assert mixed.comm_bytes["ep"] == pytest.approx(58 / 61 * all_moe.comm_bytes["ep"], rel=1e-12)


def test_ep_all_to_alls_send_capacity_sized_buffers():
    # a capacity factor C pads each expert's dispatch buffer to C x its even share (GShard,
    # Switch): C times the dropless bytes; 0 (dropless, the preset's) assumes balanced routing
    plan = Plan(dp=8, ep=8, grad_accum=2)
    assert MIXTRAL.capacity_factor == 0
    dropless = st(plan, MIXTRAL).comm_bytes["ep"]
    capped = st(plan, MIXTRAL.replace(capacity_factor=1.25)).comm_bytes["ep"]
    assert capped == pytest.approx(1.25 * dropless, rel=1e-12)


def test_cp_sends_k_and_v_at_their_widths():
    deepseek = get_preset("deepseek-v3")  # MLA: K heads 192 wide, V heads 128
    plan = Plan(dp=4, cp=4, zero=2, grad_accum=2)
    narrow_v = st(plan, deepseek).comm_bytes["cp"]
    wide_v = st(plan, deepseek.replace(v_head_dim=192)).comm_bytes["cp"]
    assert narrow_v == pytest.approx((192 + 128) / (2 * 192) * wide_v, rel=1e-12)


def test_recompute_every_counts_layers_as_the_framework_does():
    """`--recompute-every 3` on 32 layers: trainbudget's convention recomputes ceil(32/3) = 11
    layers (1, 4, ..., 31); torchtitan's _apply_layer_sac, counting from 1 and wrapping when
    count % 3 == 0, floor(32/3) = 10 (3, 6, ..., 30): fewer recomputed, less time, more memory."""
    from trainbudget.core.parallel.layout import PlanNumbers
    from trainbudget.core.parallel.memory.gpu_memory import plan_memory
    from trainbudget.core.spec.frameworks import get_framework

    plan = Plan(dp=8, recompute="full", recompute_every=3, grad_accum=4)
    numbers = PlanNumbers.of(plan)
    assert numbers.recomputed_layers(32) == 11
    assert numbers.recomputed_layers(32, from_first=False) == 10
    titan = get_framework("torchtitan")
    assert not titan.recompute_every_from_first
    ours = dataclasses.replace(titan, recompute_every_from_first=True)
    assert st(plan, framework=titan).step_seconds < st(plan, framework=ours).step_seconds
    kw = dict(seq_len=SEQ, precision=BF16, optimizer=ADAMW)
    assert (
        plan_memory(L2_7B, plan, framework=titan, **kw).total_bytes
        > plan_memory(L2_7B, plan, framework=ours, **kw).total_bytes
    )


def test_fsdp2_under_a_pipeline_gathers_and_reduces_once_a_step():
    """torch's pipelining keeps FSDP2's parameters unsharded and its gradients unsynced for
    every micro-batch (torch 2.13 pipelining/stage.py: set_reshard_after_backward(False),
    set_requires_gradient_sync(False)), so the stage gathers once and reduce-scatters once per
    step (engines.Engine.pipeline_keeps_unsharded), where without a pipeline torchtitan's
    FSDP2 reduce-scatters every micro-batch and gathers each layer forward and backward."""
    from trainbudget.core.parallel.timing.step_time import step_terms
    from trainbudget.core.spec.frameworks import get_framework

    titan = get_framework("torchtitan")

    def calls(plan):
        cluster = Cluster(hardware=H100, n_gpus=plan.n_gpus)
        comm = step_terms(
            L2_7B, plan, cluster, seq_len=SEQ, precision=BF16, optimizer=ADAMW, framework=titan
        ).comm
        counts: dict[str, int] = {}
        for name, c in comm.collectives:
            counts[name] = counts.get(name, 0) + c.count
        return counts

    m = 8
    flat, piped = (
        calls(Plan(dp=8, zero=3, grad_accum=m)),
        calls(Plan(dp=4, pp=2, zero=3, grad_accum=m)),
    )
    assert flat["dp_grad_reduce"] == m * 32  # every micro-batch, one per layer
    assert flat["dp_param_gather"] == 2 * m * 32  # forward and backward, each layer
    assert piped["dp_grad_reduce"] == 16  # once a step, one per layer of the stage's 16
    assert piped["dp_param_gather"] == 16
