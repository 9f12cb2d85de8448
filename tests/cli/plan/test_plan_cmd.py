"""`trainbudget plan` (layout search, cheapest cluster) and `estimate` with a parallel plan."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from clirun import cli, cli_json
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

PLAN = ("plan", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "16")
MOE_PLAN = ("plan", "--model", "mixtral-8x7b", "--gpus", "8", "--global-batch", "16")
GPT2_PLAN = ("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "16")
EST = ("estimate", "--model", "llama-2-7b", "--gpus", "8")
CHEAP = (  # a narrow policy keeps the four searches fast
    *GPT2_PLAN,
    "--no-cp",
    "--zero-stages",
    "0,1",
    "--recompute-options",
    "none",
    "--tokens",
    "1e10",
    "--within-days",
    "365",
    "--gpu-options",
    "h100-sxm,a100-80gb",
    "--gpu-counts",
    "8,16",
    "--prices",
    "h100-sxm=3,a100-80gb=1.5",
)
PLAN_KEYS = {
    "plan",
    "fits",
    "memory_bytes",
    "step_seconds",
    "step_breakdown_seconds",
    "tokens_per_second",
    "mfu",
    "hfu",
    "comm_bytes_per_step",
}


# ---- plan --json -------------------------------------------------------------------------------
def test_plan_json_shape():
    out = cli_json(*PLAN)
    assert set(out) >= {"plans", "evaluated", "search_seconds"}
    plans = out["plans"]
    assert isinstance(plans, list) and 1 <= len(plans) <= 5  # --top defaults to 5
    assert out["evaluated"] >= out["fitting"] >= len(plans)
    assert out["search_seconds"] >= 0
    for p in plans:
        assert set(p) >= PLAN_KEYS
        assert p["fits"] is True
        m = p["memory_bytes"]
        assert m["total"] == pytest.approx(
            m["params"]
            + m["grads"]
            + m["optimizer"]
            + m["activations"]
            + m["temporaries"]
            + m["buffers"]
        )
        assert m["total"] <= p["memory_limit_bytes"] < p["device_memory_bytes"]
        assert sum(p["step_breakdown_seconds"].values()) == pytest.approx(p["step_seconds"])
        assert p["tokens_per_second"] == pytest.approx(
            p["plan"]["global_batch"] * 4096 / p["step_seconds"]
        )
        assert 0 < p["mfu"] <= p["hfu"] <= 1
        assert isinstance(p["comm_bytes_per_step"], dict)
        assert p["plan"]["global_batch"] == 16
        d = p["plan"]
        assert d["dp"] * d["tp"] * d["pp"] * d["cp"] == 8
    # best first
    spt = [p["seconds_per_token"] for p in plans]
    assert spt == sorted(spt)
    # the why line compares the winner with the next plan shown: plans[1] is either a tie
    # (listed) or the fastest strictly slower plan (named)
    assert len(plans) >= 2
    assert plans[1]["plan"]["description"] in out["why"]


def test_plan_json_top_and_tokens():
    out = cli_json(*GPT2_PLAN, "--top", "2", "--tokens", "1e9")
    assert len(out["plans"]) == 2
    for p in out["plans"]:
        days = 1e9 / p["tokens_per_second"] / 86400
        assert p["time_days"] == pytest.approx(days)
        assert p["gpu_hours"] == pytest.approx(days * 24 * 8)


def test_plan_policy_flags_reach_the_search():
    out = cli_json(
        *PLAN,
        "--max-tp",
        "2",
        "--zero-stages",
        "0,1",
        "--recompute-options",
        "full",
        "--no-cp",
        "--top",
        "10",
    )
    for p in out["plans"]:
        d = p["plan"]
        assert d["tp"] <= 2 and d["zero"] in (0, 1) and d["cp"] == 1
        assert d["recompute"] == "full"
    smaller = cli_json(*PLAN, "--max-tp", "2", "--zero-stages", "0,1", "--no-cp")
    assert smaller["evaluated"] < cli_json(*PLAN)["evaluated"]


def test_selective_op_is_searched_on_request_and_estimated():
    """Not in the default policy; asked for, every plan found uses it, and estimate takes it
    for the one-GPU figure and the plan alike."""
    out = cli_json(*PLAN, "--recompute-options", "selective-op", "--zero-stages", "1", "--top", "3")
    assert {p["plan"]["recompute"] for p in out["plans"]} == {"selective-op"}
    est = cli_json(*EST, "--dp", "8", "--zero", "1", "--flash-attention", "--recompute",
                   "selective-op", "--global-batch", "8")  # fmt: skip
    assert est["plan"]["recompute"] == "selective-op"


def test_plan_no_flash_attention():
    out = cli_json(*GPT2_PLAN, "--no-flash-attention", "--top", "3")
    assert all(p["plan"]["flash_attention"] is False for p in out["plans"])


def test_plan_memory_headroom():
    tight = cli_json(*PLAN, "--memory-headroom", "0.3")
    loose = cli_json(*PLAN)
    assert tight["fitting"] < loose["fitting"]
    for p in tight["plans"]:  # the flat rule, against the memory the device gives
        assert p["memory_headroom"] == 0.3 and p["fits_rule"].startswith("allocated peak")
        assert p["memory_limit_bytes"] == pytest.approx(0.3 * p["device_memory_bytes"])
        assert p["memory_bytes"]["total"] <= 0.3 * p["device_memory_bytes"]
    assert all(p["memory_headroom"] is None for p in loose["plans"])  # the device rule


def test_plan_seq_len_and_cluster_flags():
    out = cli_json(
        *GPT2_PLAN, "--seq-len", "512", "--gpus-per-node", "4", "--link-efficiency", "0.5"
    )
    best = out["plans"][0]
    assert best["tokens_per_step"] == 16 * 512


def test_nic_bandwidth_sets_the_network_each_gpu_gets():
    """--nic-bandwidth 50Gb/s (4 x 100 Gb/s shared by 8 GPUs: 6.25 GB/s each) times the same
    plan's collectives across nodes on that rate, where the a100-80gb row has one 200 Gb/s HDR
    port a GPU: the exposed data-parallel time grows, and matches the core's on that cluster."""
    args = ("estimate", "--model", "llama-2-7b", "--gpus", "64", "--gpu", "a100-80gb",
            "--dp", "64", "--zero", "1", "--global-batch", "128", "--json")  # fmt: skip
    slow = cli_json(*args, "--nic-bandwidth", "50Gb/s")
    fast = cli_json(*args)
    dp = [d["step_breakdown_seconds"]["dp_comm"] for d in (slow, fast)]
    assert dp[0] > 2 * dp[1]
    hw = dataclasses.replace(get_hardware("a100-80gb"), inter_node_bytes_per_second=6.25e9)
    t = step_time(
        get_preset("llama-2-7b"), Plan(dp=64, zero=1, grad_accum=2),
        Cluster(hardware=hw, n_gpus=64), seq_len=4096, precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )  # fmt: skip
    assert slow["step_seconds"] == pytest.approx(t.step_seconds, rel=1e-9)


# ---- plan text -------------------------------------------------------------------------------
def test_plan_text_lists_plans_and_why():
    code, out, err = cli(*GPT2_PLAN, "--top", "3", "--tokens", "1e9")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("seq len") and lines[1].startswith("global batch")
    assert "layouts evaluated" in lines[2]
    rows = [ln for ln in lines if ln[:2].strip() in ("1", "2", "3")]
    assert len(rows) == 3
    # the detail block names the winner, the why line the plan it is compared with
    json_out = cli_json(*GPT2_PLAN, "--top", "3")
    names = [p["plan"]["description"] for p in json_out["plans"]]
    plan_line = next(ln for ln in lines if ln.startswith("plan "))
    why_line = next(ln for ln in lines if ln.startswith("why "))
    assert names[0] in plan_line
    assert names[1] in why_line
    assert why_line.split(None, 1)[1] == json_out["why"]
    assert any(ln.startswith("time ") and "days" in ln for ln in lines)
    assert "MFU" in out and "memory/GPU" in out


# ---- cheapest cluster ------------------------------------------------------------------------
def test_within_days_json_quotes_sorted():
    out = cli_json(*CHEAP)
    quotes = out["quotes"]
    assert len(quotes) == 4  # 2 GPU types x 2 counts
    assert {(q["gpu"], q["gpus"]) for q in quotes} == {
        ("h100-sxm", 8),
        ("h100-sxm", 16),
        ("a100-80gb", 8),
        ("a100-80gb", 16),
    }
    assert all(q["meets_deadline"] for q in quotes)
    costs = [q["cost"] for q in quotes]
    assert costs == sorted(costs)
    assert out["best"] == quotes[0]
    for q in quotes:
        price = 3.0 if q["gpu"] == "h100-sxm" else 1.5
        assert q["price_per_gpu_hour"] == price
        # cost = days x 24 h x GPUs x price
        assert q["cost"] == pytest.approx(q["days"] * 24 * q["gpus"] * price)


def test_within_days_single_price_and_tight_deadline():
    loose = cli_json(*CHEAP)
    days = sorted(q["days"] for q in loose["quotes"])
    deadline = (days[0] + days[-1]) / 2
    args = list(CHEAP)
    args[args.index("--within-days") + 1] = repr(deadline)
    out = cli_json(*args)
    flags = [q["meets_deadline"] for q in out["quotes"]]
    assert True in flags and False in flags
    assert flags == sorted(flags, reverse=True)  # deadline-meeting quotes first
    same = cli_json(
        *GPT2_PLAN, "--no-cp", "--tokens", "1e10", "--within-days", "365", "--prices", "2"
    )
    assert [q["gpu"] for q in same["quotes"]] == ["h100-sxm"]
    assert same["quotes"][0]["gpus"] == 8
    assert same["quotes"][0]["price_per_gpu_hour"] == 2


def test_within_days_no_fit_is_reported_last():
    # llama-2-7b cannot fit one 24 GB RTX 4090
    argv = (
        "plan", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "8", "--no-cp",
        "--max-micro-batch", "1", "--tokens", "1e9", "--within-days", "1000",
        "--gpu-options", "rtx-4090,h100-sxm", "--gpu-counts", "1,8", "--prices", "0.5",
    )  # fmt: skip
    out = cli_json(*argv)
    # 7e9-parameter state (~108 GB unsharded) fits neither one RTX 4090 nor one H100; both
    # 8-GPU clusters fit with ZeRO
    quotes = out["quotes"]
    fits = [q["plan"] is not None for q in quotes]
    assert fits == [True, True, False, False]  # no-fit candidates are reported last
    assert {(q["gpu"], q["gpus"]) for q in quotes[2:]} == {("rtx-4090", 1), ("h100-sxm", 1)}
    for q in quotes[2:]:
        assert q["cost"] is None and q["days"] is None and not q["meets_deadline"]
    code, text, _ = cli(*argv)
    assert code == 0 and text.count("no fit") == 2


def test_within_days_text():
    code, out, err = cli(*CHEAP)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["gpu", "gpus", "days", "cost"]
    assert len(lines) == 5


# ---- estimate with a plan ------------------------------------------------------------------
def test_estimate_with_plan_adds_plan_fields():
    out = cli_json(
        *EST, "--tp", "2", "--pp", "2", "--dp", "2", "--zero", "1", "--sp",
        "--global-batch", "16", "--flash-attention",
    )  # fmt: skip
    assert set(out) >= PLAN_KEYS
    p = out["plan"]
    assert (p["dp"], p["tp"], p["pp"], p["zero"], p["sp"]) == (2, 2, 2, 1, True)
    assert p["grad_accum"] == 8  # 16 = 1 x 8 x 2
    assert p["global_batch"] == 16
    assert sum(out["step_breakdown_seconds"].values()) == pytest.approx(out["step_seconds"])
    assert out["tokens_per_second"] == pytest.approx(16 * 4096 / out["step_seconds"])
    assert 0 < out["mfu"] <= out["hfu"] <= 1
    assert set(out["comm_bytes_per_step"]) >= {"tp", "pp", "dp_grad_reduce"}
    # memory_bytes is the plan-aware one: it matches plan_memory for this plan
    spec = get_preset("llama-2-7b")
    plan = Plan(dp=2, tp=2, pp=2, zero=1, sp=True, grad_accum=8)
    want = plan_memory(
        spec,
        plan,
        seq_len=4096,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )
    m = out["memory_bytes"]
    assert m["total"] == pytest.approx(want.total_bytes)
    assert m["peak_stage"] == want.stage
    assert {"buffers", "host_offloaded"} <= set(m)
    # and the step time is step_time's
    t = step_time(
        spec,
        plan,
        Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8),
        seq_len=4096,
        precision=get_precision("bf16-mixed"),
        optimizer=get_optimizer("adamw"),
    )
    assert out["step_seconds"] == pytest.approx(t.step_seconds)


def test_estimate_memory_per_stage_and_even_pp_layers():
    base = (*EST, "--tp", "2", "--pp", "4", "--global-batch", "16")
    out = cli_json(*base)
    stages = out["memory_bytes_per_stage"]
    assert list(stages) == ["first", "middle", "last"]
    assert max(stages.values()) == out["memory_bytes"]["total"]
    assert stages[out["memory_bytes"]["peak_stage"]] == out["memory_bytes"]["total"]
    even = cli_json(*base, "--pp-layers", "8,8,8,8")
    assert even["plan"]["pp_layers"] == [8, 8, 8, 8] and out["plan"]["pp_layers"] == []
    for key in ("step_seconds", "memory_bytes_per_stage", "step_breakdown_seconds"):
        assert even[key] == out[key]
    # --pp defaults to the number of entries; a heavier first stage is the heaviest
    uneven = cli_json(*EST, "--tp", "2", "--pp-layers", "11,7,7,7", "--global-batch", "16")
    assert uneven["plan"]["pp"] == 4
    assert uneven["memory_bytes"]["peak_stage"] == "first"
    assert uneven["step_seconds"] > out["step_seconds"]  # 11 layers set the pace
    code, text, _ = cli(*base, "--pp-layers", "11,7,7,7")
    assert code == 0 and "per stage    first " in text and "(heaviest: first)" in text


def test_estimate_plan_memory_below_single_gpu():
    single = cli_json("estimate", "--model", "llama-2-7b")  # one GPU: no plan
    planned = cli_json(*EST, "--tp", "8")
    assert "step_seconds" not in single
    assert planned["memory_bytes"]["total"] < single["memory_bytes"]["total"]


def test_estimate_plan_with_tokens_gives_plan_time():
    out = cli_json(*EST, "--dp", "8", "--zero", "3", "--tokens", "1e9")
    assert out["time_seconds"] == pytest.approx(1e9 / out["tokens_per_step"] * out["step_seconds"])
    assert out["time_days"] == pytest.approx(out["time_seconds"] / 86400)
    assert "what_if_mfu" not in out  # one time for one layout (no --mfu given)


def test_estimate_plan_text():
    code, out, err = cli(*EST, "--tp", "8")
    assert code == 0 and err == ""
    assert "plan         dp1 tp8 pp1 zero0 mb1x1" in out
    assert "throughput" in out and "overlap" in out


def test_estimate_offload_and_dense_n():
    out = cli_json(*EST, "--dp", "8", "--zero", "3", "--offload-optimizer", "cpu")
    assert out["memory_bytes"]["host_offloaded"] > 0
    assert out["memory_bytes"]["optimizer"] == 0
    bare = cli_json("estimate", "--model", "dense:7e9", "--gpus", "8", "--zero", "3")
    assert bare["step_seconds"] is None
    # 7e9 x 16 bytes / 8 ranks = 14 GB (ZeRO-3 over dp 8)
    assert bare["memory_bytes"]["total"] == pytest.approx(14e9)


def test_json_is_valid_json_without_nan():
    code, out, _ = cli(*CHEAP, "--json")
    assert code == 0
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite {c}"))
    for q in json.loads(out)["quotes"]:
        assert q["cost"] is None or math.isfinite(q["cost"])


# ---- malformed input: exit 2, one stderr line naming the field ----------------------------
DEADLINE = (*PLAN, "--within-days", "30", "--tokens", "1e9")
GPT2_BATCH_7 = ("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "7")
BAD = [
    # (argv, needle naming the field)
    ((*EST, "--tp", "0"), "tp"),
    ((*EST, "--tp", "three"), "tp"),
    ((*EST, "--tp", "3"), "n_heads"),  # 32 heads % 3 (and the product 8 * 3 != 8 ...)
    ((*EST, "--tp", "2", "--pp", "2", "--dp", "4"), "dp(4) * tp(2) * pp(2) * cp(1) = 16"),
    ((*EST, "--zero", "5"), "zero (5)"),
    ((*EST, "--zero", "x"), "zero"),
    ((*EST, "--pp", "2", "--vpp", "2"), "grad_accum (1) must be a multiple of pp (2)"),
    ((*EST, "--pp", "2", "--vpp", "2", "--schedule", "1f1b", "--global-batch", "16"), "vpp (2)"),
    ((*EST, "--sp"), "sp needs tp > 1"),
    ((*EST, "--tp", "2", "--pp-layers", "8,8,8,9"), "sum to 33, not n_layers (32)"),
    ((*EST, "--tp", "2", "--pp", "2", "--pp-layers", "8,8,16"), "one entry per stage (pp = 2)"),
    ((*EST, "--tp", "2", "--pp-layers", "8,x,8,8"), "pp_layers"),
    ((*EST, "--tp", "2", "--global-batch", "7"), "global_batch"),
    ((*EST, "--cp", "3", "--dp", "2", "--gpus", "6"), "2 * cp (6)"),
    ((*EST, "--ep", "2"), "ep (2)"),
    ((*EST, "--offload-params", "cpu"), "offload_params"),
    ((*EST, "--zero", "1", "--zero-shard", "3"), "zero_shard (3)"),
    ((*EST, "--tp", "2", "--link-efficiency", "2"), "link_efficiency"),
    ((*EST, "--tp", "2", "--gpus-per-node", "0"), "gpus_per_node"),
    ((*EST, "--gpus", "12", "--tp", "2"), "gpus"),
    ((*EST, "--schedule", "zigzag"), "schedule = 'zigzag': must be one of 1f1b"),
    ((*PLAN, "--zero-stages", "7"), "zero_stages"),
    ((*PLAN, "--zero-stages", "one"), "zero_stages"),
    ((*PLAN, "--recompute-options", "bogus"), "recompute_options"),
    ((*MOE_PLAN, "--recompute-options", "selective-op"), "mixtral-8x7b has MoE experts"),
    ((*PLAN, "--memory-headroom", "2"), "memory_headroom"),
    ((*PLAN, "--memory-headroom", "0"), "memory_headroom"),
    ((*PLAN, "--max-tp", "0"), "max_tp"),
    ((*PLAN, "--max-micro-batch", "-1"), "max_micro_batch"),
    ((*PLAN, "--top", "0"), "top"),
    ((*PLAN, "--seq-len", "0"), "seq_len"),
    ((*PLAN, "--gpu", "nope"), "gpu"),
    ((*PLAN, "--within-days", "30"), "--tokens"),
    ((*PLAN, "--within-days", "30", "--tokens", "1e9"), "--prices"),
    ((*DEADLINE, "--gpu-options", "h100-sxm,a100-80gb", "--prices", "h100-sxm=2"), "a100-80gb"),
    ((*PLAN, "--within-days", "0", "--tokens", "1e9", "--prices", "2"), "within_days"),
    ((*PLAN, "--within-days", "30", "--tokens", "0", "--prices", "2"), "tokens"),
    ((*DEADLINE, "--prices", "2", "--gpu-counts", "8,0"), "gpu_counts"),
    ((*DEADLINE, "--prices", "cheap"), "prices"),
    (("plan", "--model", "dense:7e9", "--gpus", "8", "--global-batch", "16"), "--model"),
    (("plan", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "0"), "global_batch"),
    (("plan", "--model", "llama-2-7b", "--gpus", "12", "--global-batch", "16"), "gpus"),
    (("plan", "--model", "llama-2-7b", "--gpus", "0", "--global-batch", "16"), "gpus"),
    ((*PLAN, "--link-efficiency", "0"), "link_efficiency"),
    ((*PLAN, "--nic-bandwidth", "fast"), "nic_bandwidth = 'fast'"),
    ((*EST, "--dp", "8", "--nic-bandwidth", "0Gb/s"), "nic_bandwidth = '0Gb/s': must be above"),
    ((*PLAN, "--gpus-per-node", "3"), "gpus_per_node (3)"),
    # gpt2 on 8 GPUs, tp 1, no cp: dp in {8, 4, 2}; 7 is prime -> no layout
    ((*GPT2_BATCH_7, "--max-tp", "1", "--no-cp"), "no valid layout"),
    ((*PLAN, "--precision", "int8"), "precision"),
    ((*PLAN, "--gpu", "a100-80gb", "--precision", "fp8"), "a100-80gb has no dense fp8 peak"),
    ((*PLAN, "--optimizer", "adamww"), "optimizer"),
    ((*PLAN, "--tokens", "-5"), "tokens"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD, ids=[" ".join(a[0][3:]) for a in BAD])
def test_malformed_input_exits_2_with_one_line(argv, needle):
    code, out, err = cli(*argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err


def test_malformed_json_mode_too():
    code, out, err = cli(*EST, "--tp", "3", "--json")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    # every failing factor on the one line
    for needle in ("tp (3)", "n_heads (32)", "n_kv_heads (32)", "!= gpus(8)"):
        assert needle in err


def test_dense_n_rejects_zero_5():
    code, out, err = cli("estimate", "--model", "dense:7e9", "--gpus", "8", "--zero", "5")
    assert code == 2 and out == "" and "zero" in err


def test_dense_n_plan_error_leaves_stdout_empty():
    code, out, err = cli(
        "estimate", "--model", "dense:7e9", "--gpus", "8", "--tp", "2", "--dp", "3"
    )
    assert code == 2
    assert "dp(3) * tp(2) * pp(1) * cp(1) = 6 != gpus(8)" in err
    assert out == ""


HSDP_QUESTION = [
    "plan",
    "--model",
    "llama-2-7b",
    "--gpus",
    "64",
    "--gpu",
    "h100-sxm",
    "--global-batch",
    "512",
    "--seq-len",
    "4096",
    "--zero-stages",
    "3",
    "--max-micro-batch",
    "1",
    "--no-cp",
]


def test_plan_searches_hsdp_and_names_the_shard_size():
    """ZeRO-3 with 8 micro-batches on 8 nodes: each micro-batch's first gather is exposed, and
    gathering inside a node (HSDP, shard 8) beats gathering across all 64 ranks: its rings are
    8 ranks long, not 64 (NCCL's latency per step), on NVLink, and what they hide slows the
    compute less. It is shown first, ahead of the larger shard groups and full sharding."""
    out = cli_json(*HSDP_QUESTION, "--top", "10")
    shards = [p["plan"]["zero_shard"] for p in out["plans"]]
    assert {0, 8, 16, 32} <= set(shards)
    assert out["plans"][0]["plan"]["description"] == "dp64 tp1 pp1 zero3/shard8 mb1x8"
    full = next(p for p in out["plans"] if p["plan"]["description"] == "dp64 tp1 pp1 zero3 mb1x8")
    assert out["plans"][0]["seconds_per_token"] < full["seconds_per_token"]
    assert "faster per token" in out["why"]


def test_no_hsdp_searches_full_sharding_only():
    out = cli_json(*HSDP_QUESTION, "--no-hsdp", "--top", "10")
    assert {p["plan"]["zero_shard"] for p in out["plans"]} == {0}
    assert out["evaluated"] < cli_json(*HSDP_QUESTION)["evaluated"]
