"""The planner over numpy arrays: the same plans as `planner.enumerate_plans`, the same formulas
as `parallel_memory.plan_memory` and `step_time.step_time`, one array element per plan.

The scalar modules stay the readable reference; this one transcribes them line by line (each
block names the function it mirrors, in the same operation order, so the two agree to the last
bit in practice and to rel 1e-9 by test). Per-model constants (FLOPs per layer, parameter counts
per part) come from the scalar functions once per search. Only the plans `enumerate_plans`
yields are covered: no zero_shard (HSDP), no parameter offload, no GPipe schedule.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.parallel_memory import DDP_BUCKET_BYTES
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.planner import (
    PlannerResult,
    Policy,
    axis_candidates,
    divisors,
    evaluate,
)
from trainbudget.core.parallel.step_time import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.single.activations import FP32_BYTES
from trainbudget.core.single.flops import forward_flops
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision

DEFAULT_POLICY = Policy()
RECOMPUTE_CODES = ("none", "selective", "full")  # code = index
OFFLOAD_CODES = ("none", "cpu", "nvme")
_INT_FIELDS = ("dp", "tp", "pp", "cp", "ep", "zero", "vpp", "micro_batch", "grad_accum")


@dataclass(frozen=True)
class PlanArrays:
    """Plans as parallel arrays (plan i = element i of each). `recompute` and `offload`
    (offload_optimizer) are indices into RECOMPUTE_CODES / OFFLOAD_CODES; the schedule is
    'interleaved' where vpp > 1, else '1f1b'."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    zero: np.ndarray
    sp: np.ndarray
    vpp: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    recompute: np.ndarray
    offload: np.ndarray
    flash: np.ndarray

    def __len__(self) -> int:
        return len(self.dp)

    def plan(self, i: int) -> Plan:
        ints = {name: int(getattr(self, name)[i]) for name in _INT_FIELDS}
        return Plan(
            **ints,
            sp=bool(self.sp[i]),
            schedule="interleaved" if ints["vpp"] > 1 else "1f1b",
            recompute=RECOMPUTE_CODES[self.recompute[i]],
            offload_optimizer=OFFLOAD_CODES[self.offload[i]],
            flash_attention=bool(self.flash[i]),
        )

    def plans(self) -> list[Plan]:
        return [self.plan(i) for i in range(len(self))]


def _recompute_code(kind: str) -> int:
    if kind not in RECOMPUTE_CODES:
        raise SpecError("recompute", kind, "must be one of " + ", ".join(RECOMPUTE_CODES))
    return RECOMPUTE_CODES.index(kind)


def enumerate_plan_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    policy: Policy = DEFAULT_POLICY,
) -> PlanArrays:
    """planner.enumerate_plans as arrays, in the same order: one grid over (tp, pp, cp) x
    micro-batch x vpp x ep x zero x recompute x sp x offload, then the scalar's filters as masks.
    The micro-batch, vpp and ep axes hold supersets (divisors of global_batch, n_layers,
    n_experts) that the masks cut down to each (tp, pp, cp)'s own lists."""
    n = cluster.n_gpus
    tps, pps, cps = axis_candidates(spec, cluster, seq_len=seq_len, policy=policy)
    tpc = np.array(list(itertools.product(tps, pps, cps)), dtype=np.int64).reshape(-1, 3)
    tpc = tpc[n % tpc.prod(axis=1) == 0]
    tpc = tpc[global_batch % (n // tpc.prod(axis=1)) == 0]
    axes = (
        np.arange(len(tpc)),
        [d for d in divisors(global_batch) if d <= policy.max_micro_batch],
        [v for v in divisors(spec.n_layers) if v <= policy.max_vpp],
        divisors(spec.n_experts) if spec.is_moe else [1],
        list(policy.zero_stages),
        [_recompute_code(r) for r in policy.recompute],
        [False, True],
        [0, 1] if policy.allow_offload else [0],
    )
    row, mb, vpp, ep, zero, rec, sp, off = (
        g.ravel() for g in np.meshgrid(*(np.asarray(a) for a in axes), indexing="ij")
    )
    tp, pp, cp = tpc[row].T
    dp = n // (tp * pp * cp)
    per_rank = global_batch // dp
    m = per_rank // mb
    flash = policy.flash_attention
    keep = (
        (per_rank % mb == 0)
        & np.where(pp > 1, (spec.n_layers // pp) % vpp == 0, vpp == 1)
        & ((dp * cp) % ep == 0)
        & ~(sp & (tp == 1))
        & ~((rec == 1) & flash)  # FlashAttention already keeps no s x s matrix
        & ~((zero > 0) & (dp * cp == 1))  # nothing to shard over
        & ~((vpp > 1) & (m % pp != 0))
        & ~((off != 0) & (zero == 0))
    )
    columns = (dp, tp, pp, cp, ep, zero, sp, vpp, mb, m, rec, off)  # PlanArrays' field order
    return PlanArrays(*(x[keep] for x in columns), flash=np.full(int(keep.sum()), flash))


def _bit_length(x: np.ndarray) -> np.ndarray:
    """int.bit_length of non-negative integers (exact below 2**53)."""
    return np.frexp(np.asarray(x, dtype=np.float64))[1]


def _collective(
    kind: str, n: np.ndarray, size: np.ndarray, per_node: np.ndarray, c: Cluster, count
) -> np.ndarray:
    """step_time's run(): comm.collective_cost(kind, n, size, k, c, "auto").seconds * count,
    k = min(per_node, size) where it divides size, else 1; 0 for a group of one, no bytes or
    no calls. Each branch mirrors comm._all_reduce / _gather / _all_to_all / _send_recv."""
    ai, bi = c.intra_node_latency_seconds, c.intra_node_bytes_per_second
    ae, be = c.inter_node_latency_seconds, c.inter_node_bytes_per_second
    k = np.minimum(per_node, size)
    k = np.where(size % k == 0, k, 1)
    m = size // k
    one = m == 1
    if kind == "all_reduce":
        # one node: the whole collective on the intra links; else intra rs/ag around nodes
        q, s = np.where(one, k, m), np.where(one, n, n / k)
        a, b = np.where(one, ai, ae), np.where(one, bi, be)
        sent = np.where(one, 0.0, 2 * (k - 1) / k * n)
        lat, bw = np.where(one, 0.0, 2 * (k - 1) * ai), np.where(one, 0.0, sent / bi)
        tree_steps, ring_steps = 2 * _bit_length(q - 1), 2 * (q - 1)
        tree = (lat + tree_steps * a) + (bw + 2 * s / b)
        ring = (lat + ring_steps * a) + (bw + ring_steps / q * s / b)
        seconds = np.minimum(tree, ring)  # "auto": the faster (ties: ring, the same value)
    elif kind in ("all_gather", "reduce_scatter"):
        sent_intra = (k - 1) / k * n
        sent_inter = (m - 1) / m * n / k
        seconds = ((k - 1) * ai + (m - 1) * ae) + (sent_intra / bi + sent_inter / be)
    elif kind == "all_to_all":
        p = k * m
        sent_intra = (k - 1) / p * n
        sent_inter = (p - k) / p * n
        seconds = ((k - 1) * ai + (p - k) * ae) + (sent_intra / bi + sent_inter / be)
    elif kind == "send_recv":
        seconds = np.where(one, ai + n / bi, ae + n / be)
    else:  # pragma: no cover - step_time uses no other kind
        raise ValueError(kind)
    free = (size <= 1) | (np.asarray(n) <= 0) | (np.asarray(count) <= 0)
    return np.where(free, 0.0, seconds * count)


def evaluate_arrays(
    spec: ModelSpec,
    cluster: Cluster,
    a: PlanArrays,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step_seconds, memory total_bytes, tokens_per_step) of every plan in `a`."""
    # ---- per-model constants (scalar functions, once) ----
    p = count_params(spec)
    fwd = forward_flops(spec, seq_len)
    n_layers, d, vocab, e = spec.n_layers, spec.d_model, spec.vocab_size, precision.activation_bytes
    d_q, d_head = spec.n_heads * spec.d_head, spec.d_head
    d_hidden = spec.d_ff_expert if spec.is_moe else spec.d_ff
    k_experts = (spec.experts_per_token + spec.n_shared_experts) if spec.is_moe else 1
    swiglu = spec.mlp == "swiglu"
    hw, eff = cluster.hardware, efficiency
    peak, hbm = hw.peak_flops_per_second(precision.compute_dtype), hw.hbm_bytes_per_second
    g = cluster.gpus_per_node
    wb, gb, mb_ = precision.weight_bytes, precision.grad_bytes, precision.master_bytes
    spp = optimizer.state_bytes_per_param(precision)
    dp, tp, pp, cp, ep, zero, sp, vpp = a.dp, a.tp, a.pp, a.cp, a.ep, a.zero, a.sp, a.vpp
    b, m, rec, off, flash = a.micro_batch, a.grad_accum, a.recompute, a.offload, a.flash
    layers = n_layers // pp
    rep = np.where(sp, tp, 1)
    tokens = seq_len * b / cp

    # ---- parallel_memory.stage_params ('first' and 'last'; pp = 1 makes both 'only') ----
    norms_per_layer = (p.attention_norm + p.mlp_norm) / n_layers
    split_per_layer = (p.attention_qkv + p.attention_proj + p.mlp + p.moe_shared_experts) / n_layers
    layer_dense = norms_per_layer + p.moe_router / n_layers + split_per_layer / tp
    experts = layers * (p.moe_experts / n_layers) / (ep * tp)
    vocab_rows = vocab * d / tp
    body = layers * layer_dense
    only = body + (vocab_rows + p.embedding_position) + p.final_norm  # pp = 1: every part
    if not spec.tied_embeddings:
        only = only + vocab_rows
    dense_first = np.where(pp == 1, only, body + (vocab_rows + p.embedding_position))
    # pp > 1: the last stage keeps a copy of the (tied) word embedding for the head
    dense_last = np.where(pp == 1, only, body + p.final_norm + vocab_rows)

    # ---- activations.layer_activations(...).total_bytes (no dropout) ----
    heads, d_qt = spec.n_heads / tp, spec.n_heads * d_head / tp
    d_kv = np.maximum(spec.d_kv / tp, d_head)  # K/V heads replicated when tp > n_kv_heads
    n_hidden = 4 if swiglu else 2
    if spec.is_moe:
        mlp = k_experts * tokens * (d / rep + n_hidden * spec.d_ff_expert / tp) * e
        mlp = mlp + tokens * spec.n_experts * FP32_BYTES / rep
    else:
        mlp = tokens * (d / rep + n_hidden * spec.d_ff / tp) * e
    store_matrix = ~(flash | (rec == 1))
    matrix = np.where(store_matrix, heads * (seq_len / cp) * seq_len * b * e, 0)
    layer = (
        2 * tokens * d * e / rep
        + tokens * (d / rep + d_qt) * e
        + tokens * (d_qt + 2 * d_kv) * e
        # RoPE's rotated copies of q and k
        + (tokens * (d_qt + d_kv) * e if spec.position == "rope" else 0.0)
        + matrix
        + np.where(flash, heads * tokens * FP32_BYTES, 0)
        + mlp
        + 0.0  # dropout_bytes: the planner trains without dropout
    )

    # ---- parallel_memory._stage_activations ----
    full = rec == 2
    checkpoint = tokens * d * e / rep
    per_micro_batch = np.where(full, layers * checkpoint, layers * layer)
    working = np.where(full, layer - checkpoint, 0.0)
    in_flight = np.minimum(m, pp)  # in_flight_micro_batches: 1F1B, or interleaved below
    in_flight = np.where(vpp > 1, in_flight * (1 + (pp - 1) / (pp * vpp)), in_flight)
    acts_first = in_flight * per_micro_batch + working
    acts_last = np.where(pp > 1, 1 * per_micro_batch + working, acts_first)
    acts_last = acts_last + 2 * tokens * d * e / rep
    acts_last = acts_last + tokens * vocab / tp * (e + 2 * FP32_BYTES)
    acts_first = np.where(pp == 1, acts_last, acts_first)

    # ---- parallel_memory.plan_memory (zero_model_state of dense and expert parts) ----
    shard = dp * cp  # plan.shard_group (no HSDP)
    expert_shard = np.maximum(1, shard // ep)
    offloaded = off != 0

    def total_bytes(dense: np.ndarray, acts: np.ndarray) -> np.ndarray:
        div3, div2, div1 = (np.where(zero >= z, shard, 1) for z in (3, 2, 1))
        ediv3, ediv2, ediv1 = (np.where(zero >= z, expert_shard, 1) for z in (3, 2, 1))
        params = dense * wb / div3 + experts * wb / ediv3
        grads = dense * gb / div2 + experts * gb / ediv2
        master = dense * mb_ / div1 + experts * mb_ / ediv1
        opt_state = dense * spp / div1 + experts * spp / ediv1
        optimizer_bytes = np.where(offloaded, 0.0, master + opt_state)
        buffers = np.where(
            zero >= 3,
            layer_dense * (2 * wb + gb),
            np.where(dp * cp > 1, 2 * DDP_BUCKET_BYTES, 0.0),
        )
        return params + grads + optimizer_bytes + acts + buffers

    memory = np.maximum(total_bytes(dense_first, acts_first), total_bytes(dense_last, acts_last))

    # ---- step_time._layer_compute_seconds ----
    rows = b * seq_len / cp
    scale = b / (tp * cp * n_layers)

    def matmul(flops: float, rows_: np.ndarray, n: float, k: float) -> np.ndarray:
        """step_time.matmul_seconds: compute- or HBM-bound, whichever is slower."""
        moved = e * (rows_ * k + k * n + rows_ * n)
        return np.maximum(
            flops / (peak * eff.matmul), flops / (2 * rows_ * n * k) * moved / (hbm * eff.hbm)
        )

    up_width = d_hidden / tp * (2 if swiglu else 1)
    mm = (
        matmul(float(fwd.qkv) * scale, rows, (d_q + 2 * spec.d_kv) / tp, d)
        + matmul(float(fwd.attn_proj) * scale, rows, d, d_q / tp)
        + matmul(float(fwd.mlp_up + fwd.mlp_gate) * scale, rows * k_experts, up_width, d)
        + matmul(float(fwd.mlp_down) * scale, rows * k_experts, d, d_hidden / tp)
        + matmul(float(fwd.router) * scale, rows, spec.n_experts or 1, d)
    )
    if flash.all():  # FlashAttention: the attention core at its own achievable peak
        attn_fwd = float(fwd.scores + fwd.attn_values) * scale / (peak * eff.attention)
    else:  # unfused batched GEMMs on the s x s scores, then softmax reads and writes them
        q_rows = seq_len / cp
        unfused = matmul(float(fwd.scores) * scale, q_rows, seq_len, d_head)
        unfused = unfused + matmul(float(fwd.attn_values) * scale, q_rows, d_head, seq_len)
        unfused = unfused + rows * (spec.n_heads / tp) * seq_len * (2 * e) / (hbm * eff.hbm)
        flash_s = float(fwd.scores + fwd.attn_values) * scale / (peak * eff.attention)
        attn_fwd = np.where(flash, flash_s, unfused)
    per_token = (4 * d + 6 * d) / rep + (3 if swiglu else 2) * d_hidden * k_experts / tp
    if spec.position == "rope":
        per_token = per_token + 2 * (d_q + spec.d_kv) / tp
    layer_fwd = mm + attn_fwd + rows * per_token * e / (hbm * eff.hbm)

    # ---- step_time.step_time: compute, bubble ----
    recompute_fwd = np.select([rec == 0, rec == 1], [0.0, attn_fwd], layer_fwd)
    recompute_fwd = np.where(flash & (rec != 2), attn_fwd / 2, recompute_fwd)
    fwd_mb = layers * layer_fwd
    bwd_mb = layers * (2 * layer_fwd + recompute_fwd)
    tokens_mb = b * seq_len / cp
    head_flops = 2 * tokens_mb * d * vocab / tp
    head_fwd = head_flops / (peak * eff.matmul) + tokens_mb * vocab / tp * (2 * e + 16) / (
        hbm * eff.hbm
    )
    stage_mb = fwd_mb + bwd_mb + 3 * head_fwd
    compute = m * stage_mb
    bubble = (pp - 1) * stage_mb / vpp

    # ---- communication; group_span: per_node = max(1, min(size, g // stride)) ----
    tp_pn = np.maximum(1, np.minimum(tp, g))
    cp_pn = np.maximum(1, np.minimum(cp, g // tp))
    dp_pn = np.maximum(1, np.minimum(dp, g // (tp * cp)))
    pp_pn = np.maximum(1, np.minimum(pp, g // (tp * cp * dp)))
    act_msg = tokens_mb * d * e
    tp_per_layer = np.where(full, 6, 4)
    n_tp = m * layers * tp_per_layer
    t_tp = np.where(
        sp,
        _collective("all_gather", act_msg, tp, tp_pn, cluster, n_tp)
        + _collective("reduce_scatter", act_msg, tp, tp_pn, cluster, n_tp),
        _collective("all_reduce", act_msg, tp, tp_pn, cluster, m * layers * tp_per_layer),
    )
    t_pp = _collective("send_recv", act_msg / rep, pp, pp_pn, cluster, 2 * m * vpp)
    kv = tokens_mb * 2 * np.maximum(spec.d_kv / tp, d_head) * e
    hop = _collective("send_recv", kv, cp, cp_pn, cluster, m * layers * 3 * (cp - 1))
    t_cp = np.where(cp > 1, np.maximum(0.0, hop - m * layers * 3 * attn_fwd), 0.0)
    t_ep = 0.0
    if spec.is_moe:
        a2a = tokens_mb * spec.experts_per_token * d * e
        ep_pn = np.minimum(ep, dp_pn)
        t_ep = np.where(
            ep > 1, _collective("all_to_all", a2a, ep, ep_pn, cluster, m * layers * 4), 0.0
        )

    # DP / ZeRO: dense weights over dp * cp, routed experts over dp * cp / ep (step_time)
    dp_group = dp * cp
    expert_group = dp_group // ep
    pn = np.maximum(1, np.minimum(dp_group, dp_pn * cp_pn))
    groups = ((dense_last, dp_group, pn), (experts, expert_group, np.maximum(1, pn // ep)))
    t_grad = sum(
        np.where(
            zero == 0,
            _collective("all_reduce", n_ * gb, g_, k_, cluster, 1),
            _collective("reduce_scatter", n_ * gb, g_, k_, cluster, 1),
        )
        for n_, g_, k_ in groups
    )
    floor = t_grad * np.minimum(1.0, DDP_BUCKET_BYTES / ((dense_last + experts) * gb))
    gather_count = np.where(zero == 3, 2 * m, np.where(zero > 0, 1, 0))
    t_gather = sum(
        _collective("all_gather", n_ * wb, g_, k_, cluster, gather_count) for n_, g_, k_ in groups
    )
    window = np.where(zero == 3, compute, np.where(zero > 0, bwd_mb + fwd_mb, bwd_mb))
    floor = np.where(zero == 3, floor + t_gather / (2 * m * layers), floor)
    t_dp = np.where(dp_group > 1, np.maximum(floor, t_grad + t_gather - window), 0.0)

    # optimizer step (HBM-bound) or offload transfers; zero_shard_params + the experts' share
    local = np.where(zero >= 1, dense_last / shard + experts / expert_shard, dense_last + experts)
    upd_bytes = gb + 2 * mb_ + wb + 2 * spp
    optimizer_s = np.where(offloaded, 0.0, local * upd_bytes / (hbm * eff.hbm))
    pcie, nvme = cluster.pcie_bytes_per_second, cluster.nvme_bytes_per_second
    link = np.where(off == 1, pcie, min(pcie, nvme))
    offload_s = np.where(offloaded, local * (gb + wb) / link, 0.0)

    # sum(breakdown.values()) in its order
    step = compute + bubble + t_tp + t_pp + t_cp + t_ep + t_dp + optimizer_s + offload_s
    tokens_per_step = b * m * dp * seq_len
    return step, memory, tokens_per_step


def search_fast(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    policy: Policy = DEFAULT_POLICY,
    top: int = 5,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> PlannerResult:
    """planner.search over arrays; the `top` plans returned are re-evaluated by the scalar
    `planner.evaluate`, so their memory and time breakdowns are the reference ones."""
    start = time.perf_counter()
    arrays = enumerate_plan_arrays(
        spec, cluster, global_batch=global_batch, seq_len=seq_len, policy=policy
    )
    if len(arrays) == 0:
        raise SpecError(
            "gpus",
            cluster.n_gpus,
            f"no valid layout of {spec.name} at global batch {global_batch} on "
            f"{cluster.n_gpus} GPUs: the batch must be divisible by some data-"
            "parallel degree and the heads/layers by TP/PP",
        )
    # planner.search validates every plan; the one rule enumeration does not guarantee (a
    # policy listing a ZeRO stage outside 0-3) raises validate_plan's error for the first one
    bad = (arrays.zero < 0) | (arrays.zero > 3)
    for i in np.flatnonzero(bad)[:1]:
        plan = arrays.plan(int(i))
        validate_plan(plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch)
    kw = dict(seq_len=seq_len, precision=precision, optimizer=optimizer, efficiency=efficiency)
    step, memory, tokens = evaluate_arrays(spec, cluster, arrays, **kw)
    fits = memory <= policy.memory_headroom * cluster.hardware.memory_bytes
    fitting = np.flatnonzero(fits)
    if len(fitting):
        # by seconds per token, equal speed: less memory; stable, so ties keep enumeration order
        order = fitting[np.lexsort((memory[fitting], (step / tokens)[fitting]))]
    else:
        order = np.argsort(memory, kind="stable")
    ranked = []
    for i in order[:top]:
        plan = arrays.plan(int(i))
        validate_plan(plan, spec, n_gpus=cluster.n_gpus, seq_len=seq_len, global_batch=global_batch)
        ranked.append(evaluate(spec, plan, cluster, headroom=policy.memory_headroom, **kw))
    return PlannerResult(
        plans=tuple(ranked),
        evaluated=len(arrays),
        n_fitting=len(fitting),
        search_seconds=time.perf_counter() - start,
    )
