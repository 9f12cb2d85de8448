"""Time of one training step under a plan: compute by op class (a roofline per op), the
communication each parallel axis needs, how much of it hides behind compute, the pipeline
bubble, the optimizer step and offload transfers.

Overlap model (what each collective can hide behind, as Megatron-LM and FSDP schedule them):
- TP/SP collectives sit on the critical path between a layer's matmuls: never hidden.
- PP sends/receives and EP all-to-alls: on the critical path of each micro-batch: not hidden.
- CP ring exchange of K/V: overlapped with the attention of the previous chunk.
- DP gradient reduction (ZeRO 0-2): bucketed, overlapped with the backward pass of the last
  micro-batch only (earlier micro-batches accumulate locally); the ZeRO-1/2 parameter
  all-gather after the update overlaps the next step's first forward (Megatron's
  --overlap-param-gather), so it is hidden behind one micro-batch's forward.
- ZeRO-3 gathers (forward and backward, every micro-batch) prefetch behind that micro-batch's
  compute; its gradient reduce-scatter behaves like DP's.
Lower bound max(compute, comm), upper bound compute + comm (seed 004, B-bounds; `step_bounds`),
with comm the busiest axis's collectives for the lower bound and all of them for the upper; the
estimate lies between and `overlap_note` says which terms were exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.comm import collective_cost
from trainbudget.core.parallel.parallel_memory import DDP_BUCKET_BYTES, stage_params
from trainbudget.core.parallel.plan import Plan, group_span
from trainbudget.core.single.activations import MASK_BYTES
from trainbudget.core.single.flops import forward_flops
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks. One set for every plan and model: they
    are properties of the kernels, not tuned per case (docs/validation.md shows the errors)."""

    matmul: float = 0.70
    """Fraction of the dense peak that transformer GEMMs sustain end to end. Large bf16 GEMMs
    alone reach 70-80 % with cuBLAS on A100/H100, but kernel launch gaps, shapes that tile
    badly and clock throttling under sustained load take more. 0.70 is the one value from the
    grid {0.60, 0.65, 0.70, 0.75} with the smallest mean absolute error over all published
    runs in docs/validation.md, where the leave-one-out error of this choice is reported too."""
    attention: float = 0.5
    """FlashAttention-2 forward+backward reaches 50-73 % of A100 peak (Dao 2023, arXiv
    2307.08691, Fig. 4-6); the backward is the slower half."""
    hbm: float = 0.85
    """Fraction of HBM bandwidth memory-bound kernels achieve (STREAM-like copy rates)."""


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True, kw_only=True)
class StepTime:
    step_seconds: float
    breakdown_seconds: dict[str, float]
    """Exposed time by category; sums to step_seconds."""
    comm_seconds: dict[str, float]
    """Total time of each collective category per step, hidden or not."""
    comm_bytes: dict[str, float]
    """Bytes each GPU sends per step, by collective category."""
    compute_seconds: float
    """Matmuls, attention and memory-bound ops of all micro-batches on the slowest stage."""
    lower_bound_seconds: float
    upper_bound_seconds: float
    overlap_note: str
    model_flops_per_step: float
    hardware_flops_per_step: float
    tokens_per_step: int
    n_gpus: int
    peak_flops_per_second: float
    notes: tuple[str, ...] = field(default=())

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (
            self.step_seconds * self.n_gpus * self.peak_flops_per_second
        )

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / (
            self.step_seconds * self.n_gpus * self.peak_flops_per_second
        )


def matmul_seconds(
    flops: float, m: float, n: float, k: float, e: int, peak: float, hbm: float, eff: Efficiency
) -> float:
    """Roofline of one GEMM shape (m, k) @ (k, n): compute at the achievable peak, or the bytes
    of both operands and the result at the achievable HBM bandwidth, whichever is slower."""
    bytes_moved = e * (m * k + k * n + m * n)
    return max(flops / (peak * eff.matmul), flops / (2 * m * n * k) * bytes_moved / (hbm * eff.hbm))


def _layer_compute_seconds(
    spec: ModelSpec,
    plan: Plan,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    dropout: bool,
) -> tuple[float, float, float]:
    """(forward seconds of one layer for one micro-batch on one GPU, its attention-core part,
    its memory-bound part)."""
    fwd = forward_flops(spec, seq_len)
    n, t, b = spec.n_layers, plan.tp, plan.micro_batch
    rows = b * seq_len / plan.cp  # tokens through each weight matmul on this GPU
    d, d_q = spec.d_model, spec.n_heads * spec.d_head
    d_hidden = spec.d_ff_expert if spec.is_moe else spec.d_ff
    k_experts = (spec.experts_per_token + spec.n_shared_experts) if spec.is_moe else 1
    scale = b / (plan.tp * plan.cp * n)  # one layer's share of one sequence's FLOPs, per GPU
    mm = (
        matmul_seconds(fwd.qkv * scale, rows, (d_q + 2 * spec.d_kv) / t, d, e, peak, hbm, eff)
        + matmul_seconds(fwd.attn_proj * scale, rows, d, d_q / t, e, peak, hbm, eff)
        + matmul_seconds(
            (fwd.mlp_up + fwd.mlp_gate) * scale,
            rows * k_experts,
            d_hidden / t * (2 if spec.mlp == "swiglu" else 1),
            d,
            e,
            peak,
            hbm,
            eff,
        )
        + matmul_seconds(fwd.mlp_down * scale, rows * k_experts, d, d_hidden / t, e, peak, hbm, eff)
        + matmul_seconds(fwd.router * scale, rows, spec.n_experts or 1, d, e, peak, hbm, eff)
    )
    heads = spec.n_heads / t
    hbm_rate = hbm * eff.hbm
    if plan.flash_attention:
        attention = (fwd.scores + fwd.attn_values) * scale / (peak * eff.attention)
    else:
        # unfused: batched GEMMs (s/cp, d_head) @ (d_head, s) and (s/cp, s) @ (s, d_head) per
        # head, whose k = d_head makes them memory-bound on the s x s operand; then softmax
        # (read and write the s x s scores) and, with dropout, its mask and dropped copy
        q_rows = seq_len / plan.cp
        attention = matmul_seconds(
            fwd.scores * scale, q_rows, seq_len, spec.d_head, e, peak, hbm, eff
        )
        attention += matmul_seconds(
            fwd.attn_values * scale, q_rows, spec.d_head, seq_len, e, peak, hbm, eff
        )
        per_score = 2 * e + ((2 * e + MASK_BYTES) if dropout else 0)
        attention += rows * heads * seq_len * per_score / hbm_rate
    # memory-bound ops, bytes per token of one layer: 2 norms (read+write h), 2 residual adds
    # (read 2h, write h), the activation function, RoPE on q and k, hidden dropouts
    rep = t if plan.sp else 1  # norms and residuals run redundantly on each TP rank without SP
    per_token = (4 * d + 6 * d) / rep + (
        3 if spec.mlp == "swiglu" else 2
    ) * d_hidden * k_experts / t
    if spec.position == "rope":
        per_token += 2 * (d_q + spec.d_kv) / t
    memory_bound = rows * per_token * e / hbm_rate
    if dropout:
        memory_bound += rows * 2 * d / rep * (2 * e + MASK_BYTES) / hbm_rate
    return mm + attention + memory_bound, attention, memory_bound


def step_time(
    spec: ModelSpec,
    plan: Plan,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    dropout: bool = False,
) -> StepTime:
    """Predicted seconds of one optimizer step of `plan` on `cluster`. `dropout`: the model
    trains with attention and hidden dropout (GPT-3-era Megatron), which adds memory traffic."""
    hw = cluster.hardware
    peak = hw.peak_flops_per_second(precision.compute_dtype)
    e = precision.activation_bytes
    layers = spec.n_layers // plan.pp
    m = plan.grad_accum
    layer_fwd, attn_fwd, _ = _layer_compute_seconds(
        spec, plan, seq_len, e, peak, hw.hbm_bytes_per_second, efficiency, dropout
    )
    # backward = 2 x forward (seed 001); recomputation repeats forward work in backward
    recompute_fwd = {"none": 0.0, "selective": attn_fwd, "full": layer_fwd}[plan.recompute]
    if plan.flash_attention and plan.recompute != "full":
        recompute_fwd = attn_fwd / 2  # FlashAttention's backward recomputes Q K^T
    fwd_mb = layers * layer_fwd
    bwd_mb = layers * (2 * layer_fwd + recompute_fwd)
    # the last stage also runs the head and the loss
    tokens_mb = plan.micro_batch * seq_len / plan.cp
    head_flops = 2 * tokens_mb * spec.d_model * spec.vocab_size / plan.tp
    head_fwd = head_flops / (peak * efficiency.matmul) + tokens_mb * spec.vocab_size / plan.tp * (
        2 * e + 16
    ) / (hw.hbm_bytes_per_second * efficiency.hbm)
    stage_mb = fwd_mb + bwd_mb + 3 * head_fwd
    compute = m * stage_mb

    # pipeline bubble: (pp - 1) micro-batch slots, / vpp when interleaved (Narayanan et al. 2021)
    bubble = (plan.pp - 1) * stage_mb / plan.vpp

    comm_s: dict[str, float] = {}
    comm_b: dict[str, float] = {}
    exposed: dict[str, float] = {}

    def run(
        name: str,
        kind: str,
        n_bytes: float,
        axis: str,
        count: float,
        group: int = 0,
        per_node: int = 0,
    ) -> float:
        size, pn = group_span(plan, axis, cluster.gpus_per_node)
        size, pn = (group or size), (per_node or pn)
        if size <= 1 or n_bytes <= 0 or count <= 0:
            return 0.0
        cost = collective_cost(
            kind, n_bytes, size, min(pn, size) if size % min(pn, size) == 0 else 1, cluster, "auto"
        )
        comm_s[name] = comm_s.get(name, 0.0) + cost.seconds * count
        comm_b[name] = comm_b.get(name, 0.0) + cost.bytes_sent_per_rank * count
        return cost.seconds * count

    act_msg = tokens_mb * spec.d_model * e  # one layer's activations for one micro-batch
    # TP: 2 all-reduces forward, 2 backward per layer (SP: all-gather + reduce-scatter pairs,
    # the same bytes); full recomputation repeats the forward ones
    tp_per_layer = 4 + (2 if plan.recompute == "full" else 0)
    if plan.sp:
        # each all-reduce becomes an all-gather and a reduce-scatter (Korthikanti Sec. 4.2.2)
        t_tp = run("tp", "all_gather", act_msg, "tp", m * layers * tp_per_layer)
        t_tp += run("tp", "reduce_scatter", act_msg, "tp", m * layers * tp_per_layer)
    else:
        t_tp = run("tp", "all_reduce", act_msg, "tp", m * layers * tp_per_layer)
    exposed["tp_comm"] = t_tp
    # PP: each micro-batch crosses each stage boundary forward and back (vpp times when
    # interleaved); with SP the message is split across the TP group (Megatron's scatter-gather)
    p2p = act_msg / (plan.tp if plan.sp else 1)
    exposed["pp_comm"] = run("pp", "send_recv", p2p, "pp", 2 * m * plan.vpp)
    # CP: K and V pass around the ring (cp - 1 hops) forward; K, V and their grads backward
    if plan.cp > 1:
        kv = tokens_mb * 2 * max(spec.d_kv / plan.tp, spec.d_head) * e
        hop = run("cp", "send_recv", kv, "cp", m * layers * 3 * (plan.cp - 1))
        exposed["cp_comm"] = max(0.0, hop - m * layers * 3 * attn_fwd)
    # EP: dispatch and combine all-to-alls, forward and backward, per MoE layer
    if spec.is_moe and plan.ep > 1:
        k = spec.experts_per_token
        a2a = tokens_mb * k * spec.d_model * e
        _, dp_pn = group_span(plan, "dp", cluster.gpus_per_node)
        exposed["ep_comm"] = run(
            "ep",
            "all_to_all",
            a2a,
            "dp",
            m * layers * 4,
            group=plan.ep,
            per_node=min(plan.ep, dp_pn),
        )
    # DP / ZeRO: dense weights over the dp * cp group; routed experts over the expert-data-
    # parallel group of dp * cp / ep ranks (each expert lives on dp * cp / ep of them)
    sp_ = stage_params(spec, plan, "last" if plan.pp > 1 else "first")
    dp_group = plan.dp * plan.cp
    expert_group = dp_group // plan.ep
    wb, gb = precision.weight_bytes, precision.grad_bytes
    if dp_group > 1:
        _, pn = group_span(plan, "dp", cluster.gpus_per_node)
        _, cp_pn = group_span(plan, "cp", cluster.gpus_per_node)
        pn = max(1, min(dp_group, pn * cp_pn))
        groups = [(sp_.dense, dp_group, pn), (sp_.experts, expert_group, max(1, pn // plan.ep))]
        # ZeRO paper Sec. 7: stages 1-2 move what plain DP moves (reduce-scatter of gradients
        # + all-gather of updated weights = one all-reduce); stage 3 gathers the weights for
        # the forward and again for the backward of every micro-batch (1.5x per step at m = 1)
        kind = "all_reduce" if plan.zero == 0 else "reduce_scatter"
        t_grad = sum(
            run("dp_grad_reduce", kind, n * gb, "dp", 1, group=g, per_node=k) for n, g, k in groups
        )
        # the last bucket (the first layers' gradients) is reduced after backward ends
        floor = t_grad * min(1.0, DDP_BUCKET_BYTES / ((sp_.dense + sp_.experts) * gb))
        window = bwd_mb  # gradients reduce during the last micro-batch's backward
        t_gather = 0.0
        if plan.zero in (1, 2):
            # the updated weights are gathered during the next step's first forward
            t_gather = sum(
                run("dp_param_gather", "all_gather", n * wb, "dp", 1, group=g, per_node=k)
                for n, g, k in groups
            )
            window += fwd_mb
        elif plan.zero == 3:
            t_gather = sum(
                run("zero3_gather", "all_gather", n * wb, "dp", 2 * m, group=g, per_node=k)
                for n, g, k in groups
            )
            window = compute  # prefetched behind every micro-batch
            floor += t_gather / (2 * m * layers)  # the first layer's gather cannot hide
        # every DP-axis collective shares the same links and the same compute window
        exposed["dp_comm"] = max(floor, t_grad + t_gather - window)
    # optimizer step: reads grad, master, states; writes master, states, weights (HBM-bound)
    expert_shard = max(1, plan.shard_group // plan.ep)
    local = zero_shard_params(sp_.dense, plan) + (
        sp_.experts / expert_shard if plan.zero >= 1 else sp_.experts
    )
    upd_bytes = (
        precision.grad_bytes
        + 2 * precision.master_bytes
        + precision.weight_bytes
        + 2 * optimizer.state_bytes_per_param(precision)
    )
    optimizer_s = 0.0
    offload_s = 0.0
    if plan.offload_optimizer == "none":
        optimizer_s = local * upd_bytes / (hw.hbm_bytes_per_second * efficiency.hbm)
    else:
        # grads down, weights up over PCIe (or NVMe) per step; the CPU update itself is not timed
        link = (
            cluster.pcie_bytes_per_second
            if plan.offload_optimizer == "cpu"
            else min(cluster.pcie_bytes_per_second, cluster.nvme_bytes_per_second)
        )
        offload_s = local * (precision.grad_bytes + precision.weight_bytes) / link
    if plan.offload_params != "none":
        link = (
            cluster.pcie_bytes_per_second
            if plan.offload_params == "cpu"
            else min(cluster.pcie_bytes_per_second, cluster.nvme_bytes_per_second)
        )
        offload_s += (
            2 * m * (sp_.dense + sp_.experts) * wb / link
        )  # forward and backward fetch per micro-batch

    breakdown = {
        "compute": compute,
        "pipeline_bubble": bubble,
        **exposed,
        "optimizer": optimizer_s,
        "offload": offload_s,
    }
    step = sum(breakdown.values())
    comm_total = sum(comm_s.values())
    # collectives of one axis share links; different axes mostly use different ones (TP inside
    # a node, DP across nodes), so the busiest axis bounds the step from below
    by_axis: dict[str, float] = {}
    for name, seconds in comm_s.items():
        axis = "dp" if name.startswith(("dp", "zero3")) else name
        by_axis[axis] = by_axis.get(axis, 0.0) + seconds
    busiest_link = max(by_axis.values(), default=0.0)
    hidden = comm_total - sum(v for k, v in exposed.items())
    note = (
        f"{hidden:.3g} s of {comm_total:.3g} s communication hidden behind compute; "
        f"exposed: " + ", ".join(f"{k} {v:.3g} s" for k, v in exposed.items() if v > 0)
        if comm_total > 0
        else "no communication (one GPU)"
    )
    tokens_step = plan.global_batch * seq_len
    model_fwd_token = forward_flops(spec, seq_len).total / seq_len
    model_flops = 3 * model_fwd_token * tokens_step
    fwd = forward_flops(spec, seq_len)
    extra = (
        {"none": 0, "selective": fwd.scores + fwd.attn_values, "full": fwd.layers}[plan.recompute]
        / seq_len
        * tokens_step
    )
    return StepTime(
        step_seconds=step,
        breakdown_seconds=breakdown,
        comm_seconds=comm_s,
        comm_bytes=comm_b,
        compute_seconds=compute,
        lower_bound_seconds=step_bounds(compute + bubble, busiest_link)[0],
        upper_bound_seconds=compute + bubble + comm_total + optimizer_s + offload_s,
        overlap_note=note,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops + extra,
        tokens_per_step=tokens_step,
        n_gpus=plan.n_gpus,
        peak_flops_per_second=peak,
    )


def step_bounds(compute_seconds: float, comm_seconds: float) -> tuple[float, float]:
    """(lower, upper) bound of a step from its compute and communication time: perfect
    overlap gives max(compute, comm), none gives compute + comm (seed 004, B-bounds)."""
    return max(compute_seconds, comm_seconds), compute_seconds + comm_seconds


def zero_shard_params(n_local: float, plan: Plan) -> float:
    """Parameters whose optimizer update this GPU performs (all of them unless ZeRO >= 1)."""
    return n_local / plan.shard_group if plan.zero >= 1 else n_local
