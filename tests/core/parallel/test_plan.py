"""Plan: validation of parallel layouts (every failing rule in one error) and group placement."""

from __future__ import annotations

import re

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import AXES, SCHEDULES, Plan, group_span, validate_plan
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.presets import get_preset

GPT3 = get_preset("gpt3-175b")  # 96 layers, 96 heads, d_model 12288
L2_7B = get_preset("llama-2-7b")  # 32 layers, 32 heads, 32 kv heads
L2_70B = get_preset("llama-2-70b")  # 80 layers, 64 heads, 8 kv heads (GQA)
MIXTRAL = get_preset("mixtral-8x7b")  # 32 layers, 32 heads, 8 kv heads, 8 experts top-2


def problems(plan: Plan, model: ModelSpec, **kw) -> str:
    kw.setdefault("seq_len", 4096)
    with pytest.raises(SpecError) as info:
        validate_plan(plan, model, **kw)
    assert info.value.field == "plan"
    return info.value.rule


# ---- Plan basics ----------------------------------------------------------------------------
def test_defaults_are_one_gpu_no_parallelism():
    p = Plan()
    assert (p.dp, p.tp, p.pp, p.cp, p.ep, p.vpp) == (1, 1, 1, 1, 1, 1)
    assert p.zero == 0 and not p.sp and p.schedule == "1f1b"
    assert p.n_gpus == 1 and p.global_batch == 1


def test_n_gpus_and_global_batch():
    p = Plan(dp=4, tp=8, pp=2, cp=2, micro_batch=2, grad_accum=16)
    assert p.n_gpus == 4 * 8 * 2 * 2 == 128
    assert p.global_batch == 2 * 16 * 4 == 128  # ep and cp do not multiply the batch


def test_shard_group_is_dp_times_cp_or_the_hsdp_shard():
    assert Plan(dp=8, cp=2, zero=3).shard_group == 16  # Megatron distributed optimizer: dp * cp
    assert Plan(dp=8, zero=3, zero_shard=4).shard_group == 4  # HSDP: shard over 4, replicate 2x
    assert Plan(dp=8, cp=2, zero=3, zero_shard=4).shard_group == 8


def test_describe():
    p = Plan(dp=2, tp=4, sp=True, pp=4, vpp=2, schedule="interleaved", cp=2, zero=1)
    assert p.describe() == "dp2 tp4+sp pp4 vpp2 cp2 zero1 mb1x1"
    p = Plan(dp=8, zero=3, zero_shard=4, micro_batch=2, grad_accum=3, recompute="full")
    assert p.describe() == "dp8 tp1 pp1 zero3/shard4 mb2x3 recompute-full"
    p = Plan(zero=3, offload_optimizer="cpu", offload_params="nvme")
    assert "offload-opt-cpu" in p.describe() and "offload-params-nvme" in p.describe()


# ---- published layouts are accepted ---------------------------------------------------------
def test_gpt3_175b_tp8_pp8_on_64_gpus():
    # Megatron-LM (Narayanan et al. 2021, Table 1): GPT-3 175B with tp 8, pp 8; 96 heads / 8 = 12,
    # 96 layers / 8 = 12 per stage; dp 1 on 64 GPUs; 1 * 8 * 8 * 1 = 64.
    validate_plan(Plan(dp=1, tp=8, pp=8, grad_accum=64), GPT3, n_gpus=64, seq_len=2048)
    # the same with dp 16 on 1024 GPUs, global batch 1536 = 1 x 96 x 16
    validate_plan(
        Plan(dp=16, tp=8, pp=8, grad_accum=96),
        GPT3,
        n_gpus=1024,
        seq_len=2048,
        global_batch=1536,
    )


def test_uneven_pipeline_split_accepted_and_described():
    # Megatron-LM's --decoder-first/last-pipeline-num-layers: 96 layers as 11 + 6 x 12 + 13
    plan = Plan(tp=8, pp=8, grad_accum=64, pp_layers=(11, 12, 12, 12, 12, 12, 12, 13))
    validate_plan(plan, GPT3, n_gpus=64, seq_len=2048)
    assert "pp8[11,12,12,12,12,12,12,13]" in plan.describe()
    assert plan.stage_layer_counts(96) == (11, 12, 12, 12, 12, 12, 12, 13)
    assert Plan(pp=8).stage_layer_counts(96) == (12,) * 8
    # an uneven split lifts the n_layers % pp rule (96 layers over 5 stages)
    validate_plan(Plan(tp=8, pp=5, pp_layers=(19, 19, 20, 19, 19)), GPT3, n_gpus=40, seq_len=2048)


@pytest.mark.parametrize(
    ("pp_layers", "pp", "vpp", "needle"),
    [
        ((12, 12, 12), 4, 1, "one entry per stage (pp = 4)"),
        ((12, 12, 12, 12), 4, 1, "sum to 48, not n_layers (96)"),
        ((0, 32, 32, 32), 4, 1, "must be positive integers"),
        ((23, 25, 24, 24), 4, 2, "must be divisible by vpp (2), as a stage's vpp chunks"),
    ],
)
def test_uneven_pipeline_split_rules(pp_layers, pp, vpp, needle):
    schedule = "interleaved" if vpp > 1 else "1f1b"
    plan = Plan(tp=8, pp=pp, vpp=vpp, schedule=schedule, grad_accum=8, pp_layers=pp_layers)
    with pytest.raises(SpecError, match=re.escape(needle)):
        validate_plan(plan, GPT3, n_gpus=8 * pp, seq_len=2048)


def test_llama2_70b_interleaved():
    # Megatron-style llama-2-70b: tp 8 (64 heads / 8; 8 kv heads / 8 = 1 each), pp 4, vpp 5
    # (80 layers / (4 * 5) = 4 layers per virtual stage); grad_accum 8 is a multiple of pp 4.
    plan = Plan(dp=2, tp=8, pp=4, vpp=5, schedule="interleaved", grad_accum=8, sp=True)
    validate_plan(plan, L2_70B, n_gpus=64, seq_len=4096, global_batch=16)


def test_tp_beyond_kv_heads_replicates_them():
    # llama-2-70b has 8 kv heads; tp 16 > 8 is legal (Megatron replicates K/V): 16 % 8 == 0
    validate_plan(Plan(tp=16), L2_70B, n_gpus=16, seq_len=4096)


def test_moe_with_ep():
    # Mixtral: 8 experts over ep 4, carved out of dp 4 (dp * cp = 4, 4 % 4 == 0)
    validate_plan(Plan(dp=4, tp=2, ep=4), MIXTRAL, n_gpus=8, seq_len=4096)
    # ep may also use the cp ranks: dp 2 * cp 2 = 4
    validate_plan(Plan(dp=2, cp=2, tp=2, ep=4), MIXTRAL, n_gpus=8, seq_len=4096)


def test_context_parallel_accepted():
    # seq_len 4096 % (2 * 4) == 0
    validate_plan(Plan(dp=2, cp=4), L2_7B, n_gpus=8, seq_len=4096)


def test_zero3_offload_params_accepted():
    validate_plan(
        Plan(dp=8, zero=3, offload_params="cpu", offload_optimizer="cpu"),
        L2_7B,
        n_gpus=8,
        seq_len=4096,
    )


# ---- every failing factor at once -----------------------------------------------------------
def test_all_failing_factors_in_one_error():
    # llama-2-7b, tp 3, pp 5 on 8 GPUs (dp 1): 1 * 3 * 5 * 1 = 15 != 8; 32 heads % 3 = 2;
    # 32 kv heads % 3 = 2 and 3 % 32 = 3; 32 layers % 5 = 2: four problems, one error
    rule = problems(Plan(tp=3, pp=5), L2_7B, n_gpus=8)
    assert "dp(1) * tp(3) * pp(5) * cp(1) = 15 != gpus(8)" in rule
    assert "n_heads (32)" in rule
    assert "n_kv_heads (32)" in rule
    assert "n_layers (32)" in rule
    assert rule.count(";") == 3  # exactly four problems


def test_product_message_format():
    rule = problems(Plan(dp=3, tp=2, pp=2, cp=2), L2_7B, n_gpus=16)
    assert re.search(r"dp\(3\) \* tp\(2\) \* pp\(2\) \* cp\(2\) = 24 != gpus\(16\)", rule)


def test_error_value_is_the_plan_description():
    with pytest.raises(SpecError) as info:
        validate_plan(Plan(tp=3), L2_7B, n_gpus=3, seq_len=4096)
    assert info.value.value == "dp1 tp3 pp1 zero0 mb1x1"


@pytest.mark.parametrize(
    ("plan", "model", "kw", "needle"),
    [
        # sp splits along the TP group: nothing to split with tp 1
        (Plan(dp=8, sp=True), L2_7B, {}, "sp needs tp > 1"),
        # vpp > 1 needs the interleaved schedule, and interleaved needs vpp > 1
        (Plan(dp=4, pp=2, vpp=2, grad_accum=2), L2_7B, {}, "vpp (2)"),
        (Plan(dp=4, pp=2, schedule="interleaved", grad_accum=2), L2_7B, {}, "vpp (1)"),
        # interleaved: grad_accum 3 is not a multiple of pp 2 (Megatron's rule)
        (
            Plan(dp=4, pp=2, vpp=2, schedule="interleaved", grad_accum=3),
            L2_7B,
            {},
            "grad_accum (3) must be a multiple of pp (2)",
        ),
        # 32 layers over pp 4 * vpp 3 = 12 stages
        (
            Plan(dp=2, pp=4, vpp=3, schedule="interleaved", grad_accum=4),
            L2_7B,
            {},
            "n_layers (32) must be divisible by pp (4) * vpp (3)",
        ),
        (Plan(dp=8, schedule="zigzag"), L2_7B, {}, "schedule ('zigzag')"),
        # ep on a dense model
        (Plan(dp=8, ep=2), L2_7B, {}, "ep (2) must be 1 for a dense model"),
        # 8 experts % ep 3
        (Plan(dp=6, ep=3), MIXTRAL, {"n_gpus": 6}, "n_experts (8) must be divisible by ep (3)"),
        # ep 8 does not divide dp 4 * cp 1
        (Plan(dp=4, tp=2, ep=8), MIXTRAL, {}, "ep (8) must divide dp (4) * cp (1)"),
        # cp 3: 4096 % 6 = 4 (load-balanced ring attention needs 2 * cp chunks)
        (Plan(dp=2, cp=3), L2_7B, {"n_gpus": 6}, "seq_len (4096) must be divisible by 2 * cp (6)"),
        # cp 4 with seq_len 4100: 4100 % 8 = 4
        (Plan(dp=2, cp=4), L2_7B, {"seq_len": 4100}, "2 * cp (8)"),
        (Plan(dp=8, offload_params="cpu"), L2_7B, {}, "offload_params needs zero = 3"),
        (Plan(dp=8, zero=2, offload_params="nvme"), L2_7B, {}, "offload_params needs zero = 3"),
        (Plan(dp=8, offload_optimizer="disk"), L2_7B, {}, "offload_optimizer ('disk')"),
        (Plan(dp=8, zero=5), L2_7B, {}, "zero (5) must be 0, 1, 2 or 3"),
        (Plan(dp=8, zero=0, zero_shard=4), L2_7B, {}, "zero_shard (4)"),
        (Plan(dp=8, zero=3, zero_shard=3), L2_7B, {}, "zero_shard (3) must divide dp (8)"),
        (Plan(dp=8, recompute="some"), L2_7B, {}, "recompute ('some')"),
        # 1 x 2 x 8 = 16 sequences, not 32
        (
            Plan(dp=8, grad_accum=2),
            L2_7B,
            {"global_batch": 32},
            "global_batch (32) != micro_batch (1) * grad_accum (2) * dp (8) = 16",
        ),
        # llama-2-70b: 8 kv heads and tp 16 divide one another, but 64 heads and tp 128 do not
        # (128 does not divide 64); kv: 128 % 8 == 0 is fine
        (Plan(tp=128), L2_70B, {"n_gpus": 128}, "n_heads (64) must be divisible by tp (128)"),
    ],
)
def test_each_rule(plan, model, kw, needle):
    kw.setdefault("n_gpus", 8)
    rule = problems(plan, model, **kw)
    assert needle in rule
    assert ";" not in rule  # only the rule under test fails


def test_kv_heads_must_divide_or_be_divided():
    spec = ModelSpec(
        vocab_size=1000, d_model=384, n_layers=4, n_heads=12, n_kv_heads=4, d_ff=1536,
        max_seq_len=512,
    )  # fmt: skip
    # tp 6: 12 heads % 6 == 0, but 4 kv heads % 6 = 4 and 6 % 4 = 2
    rule = problems(Plan(tp=6), spec, n_gpus=6, seq_len=512)
    assert rule == "n_kv_heads (4) and tp (6) must divide one another"
    validate_plan(Plan(tp=2), spec, n_gpus=2, seq_len=512)  # 4 % 2 == 0
    validate_plan(Plan(tp=12), spec, n_gpus=12, seq_len=512)  # 12 % 4 == 0


def test_vocab_smaller_than_tp():
    spec = ModelSpec(vocab_size=4, d_model=64, n_layers=2, n_heads=8, d_ff=256, max_seq_len=64)
    assert "vocab_size (4) must be at least tp (8)" in problems(
        Plan(tp=8), spec, n_gpus=8, seq_len=64
    )


@pytest.mark.parametrize("name", ["dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "grad_accum"])
@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_non_positive_degrees(name, bad):
    rule = problems(Plan(**{name: bad}), L2_7B, n_gpus=1)
    assert f"{name} ({bad!r}) must be a positive integer" in rule


def test_several_sub_rules_listed_together():
    # sp without tp, ep on dense, offload without zero 3, global batch mismatch: four problems
    rule = problems(
        Plan(dp=8, sp=True, ep=2, offload_params="cpu"), L2_7B, n_gpus=8, global_batch=7
    )
    for needle in ("sp needs tp", "ep (2)", "offload_params", "global_batch (7)"):
        assert needle in rule
    assert rule.count(";") == 3


def test_global_batch_none_skips_the_check():
    validate_plan(Plan(dp=8, grad_accum=3), L2_7B, n_gpus=8, seq_len=4096)


def test_schedules_constant():
    assert SCHEDULES == ("1f1b", "gpipe", "interleaved")
    for s in ("1f1b", "gpipe"):
        validate_plan(Plan(dp=2, pp=4, schedule=s, grad_accum=4), L2_7B, n_gpus=8, seq_len=4096)


# ---- group_span: rank order tp-cp-dp-pp, innermost first --------------------------------------
def test_axes_order():
    assert AXES == ("tp", "cp", "dp", "pp")


@pytest.mark.parametrize(
    ("plan", "gpn", "expected"),
    [
        # tp8 dp4 pp2 on 64 GPUs, 8 per node. tp: stride 1, a node holds 8 of its 8 members.
        # dp: stride tp = 8, a node holds 8 // 8 = 1 member: dp spreads across nodes.
        # pp: stride tp * cp * dp = 32 -> 1 per node.
        (Plan(dp=4, tp=8, pp=2), 8, {"tp": (8, 8), "cp": (1, 1), "dp": (4, 1), "pp": (2, 1)}),
        # tp2 dp4 on 8 GPUs: tp (2, 2); dp stride 2, 8 // 2 = 4 members of 4 share the node;
        # pp size 1
        (Plan(dp=4, tp=2), 8, {"tp": (2, 2), "dp": (4, 4), "pp": (1, 1)}),
        # tp2 cp2 dp4 on 16 GPUs: cp stride 2 -> min(2, 8 // 2) = 2; dp stride 4 -> 8 // 4 = 2 of 4
        (Plan(dp=4, tp=2, cp=2), 8, {"tp": (2, 2), "cp": (2, 2), "dp": (4, 2)}),
        # tp4 dp8 pp4 on 128 GPUs: dp stride 4 -> 2 per node; pp stride 32 -> 1 per node
        (Plan(dp=8, tp=4, pp=4), 8, {"tp": (4, 4), "dp": (8, 2), "pp": (4, 1)}),
        # pure dp 64: a node holds 8 of the 64 ranks
        (Plan(dp=64), 8, {"tp": (1, 1), "dp": (64, 8)}),
        # tp 16 across two 8-GPU nodes: 8 per node (capped by the node)
        (Plan(tp=16), 8, {"tp": (16, 8)}),
        # tp1 pp8 on one 8-GPU node: pp stride 1 -> all 8 stages inside the node
        (Plan(pp=8), 8, {"pp": (8, 8)}),
        # 4-chip hosts (TPU v5p): tp 4 fills the host; dp stride 4 -> 1 per host
        (Plan(dp=4, tp=4), 4, {"tp": (4, 4), "dp": (4, 1)}),
        # tp 8 on 4-GPU nodes: 4 per node
        (Plan(dp=2, tp=8), 4, {"tp": (8, 4), "dp": (2, 1)}),
    ],
)
def test_group_span(plan, gpn, expected):
    for axis, span in expected.items():
        assert group_span(plan, axis, gpn) == span, axis


def test_tp_inside_node_dp_across_nodes():
    # the usual layout: tp fills the node, every dp peer is on another node
    plan = Plan(dp=16, tp=8)
    size, per_node = group_span(plan, "tp", 8)
    assert per_node == size == 8
    size, per_node = group_span(plan, "dp", 8)
    assert (size, per_node) == (16, 1)


def test_group_span_members_times_nodes_is_the_group():
    # per_node always divides the group size for power-of-two layouts on 8-GPU nodes
    for dp in (1, 2, 4, 8, 16):
        for tp in (1, 2, 4, 8):
            for pp in (1, 2, 4):
                plan = Plan(dp=dp, tp=tp, pp=pp)
                for axis in AXES:
                    size, per_node = group_span(plan, axis, 8)
                    assert 1 <= per_node <= size
                    assert size % per_node == 0
