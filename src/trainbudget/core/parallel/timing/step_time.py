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
- ZeRO-3 / FSDP, layer by layer: each layer's gather (forward, backward, and the recomputed
  forward where the framework gathers again for it) is prefetched behind the layer before it,
  its reduce-scatter behind the layer after it; per layer max(compute, comm), the first gather
  of each forward and the last reduce-scatter of each reducing backward exposed. One
  collective per layer, each paying NCCL's flat-ring latency (p - 1 steps).
- A collective hidden behind compute still slows it (OVERLAP_COMPUTE_SLOWDOWN, measured:
  Lee et al. 2025): data-parallel and CP communication charge that share of their hidden
  time.
- HSDP (a ZeRO shard group of zero_shard dp ranks): reduce-scatter and all-gather inside the
  shard group (NVLink when it fits a node), the sharded gradients all-reduced across the
  replicas (the inter-node network), in the same window as the gradient reduction.
Lower bound max(compute, comm), upper bound compute + comm (seed 004, B-bounds; `step_bounds`),
with comm the busiest axis's collectives for the lower bound and all of them for the upper; the
estimate lies between and `overlap_note` says which terms were exposed.
"""

from dataclasses import dataclass, field
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.layout import ON_GPU, TO_CPU, PlanNumbers, as_numbers
from trainbudget.core.parallel.memory.parallel_memory import stage_params
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.comm_time import Communication, communication
from trainbudget.core.parallel.timing.compute_time import MicroBatchCompute, micro_batch_terms
from trainbudget.core.parallel.timing.efficiency import DEFAULT_EFFICIENCY, Efficiency
from trainbudget.core.parallel.timing.layer_traffic import BACKWARD_PER_FORWARD
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.flops import forward_flops
from trainbudget.core.spec.frameworks import GENERIC, Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision

__all__ = ["DEFAULT_EFFICIENCY", "Efficiency", "StepTerms", "StepTime", "step_terms", "step_time"]

PARAMETER_FETCHES_PER_MICRO_BATCH = 2
"""Offloaded parameters (ZeRO-Infinity) come over the link for the forward and the backward."""


def comm_axis(category: str) -> str:
    """The mesh axis a collective category runs on: 'dp' for the data-parallel reductions and
    gathers (dp_grad_reduce, dp_param_gather, zero3_gather), else the category's own name."""
    return "dp" if category.startswith(("dp_", "zero3")) else category


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
    def data_parallel_share(self) -> float:
        """The data-parallel collectives' seconds (hidden or not) over the step."""
        dp = sum(v for k, v in self.comm_seconds.items() if comm_axis(k) == "dp")
        return dp / self.step_seconds

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


@dataclass(frozen=True, kw_only=True)
class StepTerms:
    """Every term of one step, as numbers (one plan) or arrays (the planner's grid)."""

    micro_batch: MicroBatchCompute
    compute_seconds: Any
    """Matmuls, attention and memory-bound ops of all micro-batches on the slowest stage."""
    bubble_seconds: Any
    """Pipeline bubble: the fill and drain, one micro-batch through every stage but the
    slowest, / vpp when interleaved ((pp - 1) slots of the slowest stage when all are equal,
    Narayanan et al. 2021; with stages of times t_s a 1F1B or GPipe step takes
    (m - 1) max t_s + sum t_s). Interleaved, a stage's vpp chunks take t_s / vpp each and
    the fill and drain cross one chunk of every other stage: (sum t_s - max t_s) / vpp,
    Narayanan et al. 2021 Sec. 2.2.2's (p - 1) (t_f + t_b) / v when the stages are equal
    (docs/formulas.md, "Uneven splits under the interleaved schedule")."""
    comm: Communication
    optimizer_seconds: Any
    """The optimizer update: on the GPU (HBM-bound), or on the host under optimizer offload
    (`cpu_update_seconds`)."""
    offload_seconds: Any
    """Transfers to and from CPU or NVMe of offloaded state and parameters (the updated
    weights only where their transfer outlasts the host update it overlaps)."""

    @property
    def step_seconds(self) -> Any:
        c = self.comm
        return (
            self.compute_seconds
            + self.bubble_seconds
            + c.tp_seconds
            + c.pp_seconds
            + c.cp_seconds
            + c.ep_seconds
            + c.dp_seconds
            + self.optimizer_seconds
            + self.offload_seconds
        )


def update_bytes_per_param(precision: Precision, optimizer: Optimizer) -> float:
    """HBM traffic of the optimizer update per parameter: read the gradient, read and write
    the master copy, write the weights, read and write each state."""
    return (
        precision.grad_bytes
        + 2 * precision.master_bytes
        + precision.weight_bytes
        + 2 * optimizer.state_bytes_per_param(precision)
    )


def cpu_update_seconds(
    n_params: Any, precision: Precision, optimizer: Optimizer, cluster: Cluster
) -> Any:
    """The optimizer update of `n_params` on the host (ZeRO-Offload's CPU-Adam: Ren et al.
    2021, arXiv 2101.06840, Sec. 5.1): a vectorised loop bound by host DRAM, moving the same
    bytes per parameter as the GPU update. DeepSpeed's CPU-Adam copies each updated tile of
    weights to the GPU while it updates the next (DeepSpeed csrc/adam: TILE-sized steps,
    double-buffered through launch_param_update), so the step charges the gradients coming
    down, then max(weights going up, update) (ZeRO-Offload Sec. 4.1, Fig. 5: the update waits
    for the gradients)."""
    moved = n_params * update_bytes_per_param(precision, optimizer)
    return moved / cluster.host_memory_bytes_per_second


def step_terms(
    spec: ModelSpec,
    plan: Plan | PlanNumbers,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    framework: Framework = GENERIC,
    xp: Ops = SCALAR,
    micro_batch: MicroBatchCompute | None = None,
) -> StepTerms:
    """The terms of one optimizer step of `plan` (one plan, or arrays of plans with `xp`).
    `micro_batch`: `micro_batch_terms` of these plans where the caller has it (the planner's
    grid computes it once per model-parallel layout, not once per plan)."""
    L = as_numbers(plan)
    hw = cluster.hardware
    eff = efficiency.resolved(hw, framework.attention_kernel)
    hbm = hw.hbm_bytes_per_second
    kw = dict(seq_len=seq_len, precision=precision, efficiency=efficiency, causal=causal)
    mb = micro_batch or micro_batch_terms(spec, L, cluster, framework=framework, xp=xp, **kw)
    stage_mb = mb.stage_seconds
    stage = _last_stage_params(spec, L, framework, xp)
    # gradients accumulated outside the GEMMs after every micro-batch's backward
    # (`Framework.grad_accumulation_bytes`): the stage's parameters, unsharded
    accumulate = (stage.dense + stage.experts) * framework.grad_accumulation_bytes
    adds = L.grad_accum - framework.grad_accumulation_first_free  # the first may assign
    compute = L.grad_accum * stage_mb + adds * accumulate / (hbm * eff.hbm)
    comm = communication(
        spec,
        L,
        cluster,
        seq_len=seq_len,
        precision=precision,
        micro_batch=mb,
        compute_seconds=compute,
        stage=stage,
        framework=framework,
        memory_bytes_per_second=hbm * eff.hbm,
        xp=xp,
    )
    # the update runs on this GPU's ZeRO shard (all of its parameters without ZeRO)
    shard = L.shard_dp * L.cp
    sharded = stage.dense / shard + stage.experts / xp.maximum(1, shard // L.ep)
    local = xp.where(L.zero >= 1, sharded, stage.dense + stage.experts)
    on_gpu = L.offload_optimizer == ON_GPU
    per_param = framework.optimizer_bytes_per_param or update_bytes_per_param(precision, optimizer)
    update = local * per_param / (hbm * eff.hbm)
    pcie, nvme = cluster.pcie_bytes_per_second, cluster.nvme_bytes_per_second
    # offloaded optimizer: gradients down, then the host update with its weights going up
    link = xp.where(L.offload_optimizer == TO_CPU, pcie, min(pcie, nvme))
    cpu_update = cpu_update_seconds(local, precision, optimizer, cluster)
    weights_up = _weights_up_seconds(local, precision, framework, cluster, link, cpu_update, xp)
    grads_down = local * (framework.offload_grad_bytes or precision.grad_bytes) / link
    offload = xp.where(on_gpu, 0.0, grads_down + weights_up)
    link = xp.where(L.offload_params == TO_CPU, pcie, min(pcie, nvme))
    fetched = PARAMETER_FETCHES_PER_MICRO_BATCH * L.grad_accum * (stage.dense + stage.experts)
    offload = offload + xp.where(
        L.offload_params == ON_GPU, 0.0, fetched * precision.weight_bytes / link
    )
    return StepTerms(
        micro_batch=mb,
        compute_seconds=compute,
        bubble_seconds=xp.maximum(0.0, mb.pipeline_seconds - stage_mb) / L.vpp,
        comm=comm,
        optimizer_seconds=xp.where(on_gpu, update, cpu_update),
        offload_seconds=offload,
    )


def _weights_up_seconds(local, precision, framework, cluster, link, cpu_update, xp) -> Any:
    """The updated 16-bit weights going back to the GPU under optimizer offload: while the host
    updates (tile by tile, the part the update does not cover), or after it, converted from
    the fp32 master on the host first (`Framework.offload_update_then_copy`: the master read
    and the 16-bit copy written at the host's memory rate, then the copy over the link)."""
    up = local * precision.weight_bytes / link
    if not framework.offload_update_then_copy:
        return xp.maximum(0.0, up - cpu_update)
    converted = local * (precision.master_bytes + precision.weight_bytes)
    return up + converted / cluster.host_memory_bytes_per_second


def _last_stage_params(spec: ModelSpec, L: PlanNumbers, framework: Framework, xp: Ops):
    """The head's stage's parameters (the only stage when pp = 1), whose gradients the step
    reduces, whose weights ZeRO-3 gathers and whose update this GPU runs: `stage_params`'
    'last', with the token embedding whole on each TP rank where the framework does not split
    it (`Framework.tp_splits_embedding`: KempnerForge's TP plan leaves it replicated, so FSDP2
    shards and gathers all V x d of it over the data-parallel group)."""
    return stage_params(spec, L, "last", xp, split_embedding=framework.tp_splits_embedding)


def step_time(
    spec: ModelSpec,
    plan: Plan,
    cluster: Cluster,
    *,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    causal: bool = True,
    count_causal: bool = False,
    framework: Framework = GENERIC,
) -> StepTime:
    """Predicted seconds of one optimizer step of `plan` on `cluster` (dropout's own kernels
    are inside the fitted in-training share: layer_time's `_memory_bound_seconds`). `causal`:
    the mask the attention kernel runs (a decoder trains causal: the default; False times a
    full mask). `count_causal`: the FLOP convention of `model_flops_per_step` and so of MFU,
    a separate choice -- the seeds' and PaLM's non-causal count by default, the unmasked
    query-key pairs only when True (docs/conventions.md)."""
    t = step_terms(
        spec,
        plan,
        cluster,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        efficiency=efficiency,
        causal=causal,
        framework=framework,
    )
    exposed = _exposed(spec, plan, t.comm)
    comm_s, comm_b = _by_category(plan, t.comm)
    breakdown = {
        "compute": t.compute_seconds,
        "pipeline_bubble": t.bubble_seconds,
        **exposed,
        "optimizer": t.optimizer_seconds,
        "offload": t.offload_seconds,
    }
    comm_total = sum(comm_s.values())
    note = _overlap_note(comm_total, exposed)
    tokens_step = plan.global_batch * seq_len
    fwd = forward_flops(spec, seq_len, causal=count_causal)
    model_flops = (1 + BACKWARD_PER_FORWARD) * (fwd.total / seq_len) * tokens_step
    full = fwd.layers
    if plan.recompute_every > 1:  # every stage recomputes ceil(its layers / K)
        counts = plan.stage_layer_counts(spec.n_layers)
        recomputed_layers = PlanNumbers.of(plan).recomputed_layers
        first = framework.recompute_every_from_first
        full = fwd.layers * sum(recomputed_layers(n, first) for n in counts) / spec.n_layers
    recomputed = {"none": 0, "selective": fwd.scores + fwd.attn_values, "full": full}
    if plan.recompute == "selective-op":
        recomputed["selective-op"] = op_checkpoint.recomputed_flops(spec, seq_len)
    extra = recomputed[plan.recompute] / seq_len * tokens_step
    compute_bubble = t.compute_seconds + t.bubble_seconds
    return StepTime(
        step_seconds=t.step_seconds,
        breakdown_seconds=breakdown,
        comm_seconds=comm_s,
        comm_bytes=comm_b,
        compute_seconds=t.compute_seconds,
        lower_bound_seconds=step_bounds(compute_bubble, _busiest_link(comm_s))[0],
        upper_bound_seconds=compute_bubble + comm_total + t.optimizer_seconds + t.offload_seconds,
        overlap_note=note,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops + extra,
        tokens_per_step=tokens_step,
        n_gpus=plan.n_gpus,
        peak_flops_per_second=cluster.hardware.peak_flops_per_second(precision.compute_dtype),
    )


def _exposed(spec: ModelSpec, plan: Plan, c: Communication) -> dict[str, float]:
    """Exposed seconds of the axes the plan uses (an axis of one GPU has no entry)."""
    exposed = {"tp_comm": c.tp_seconds, "pp_comm": c.pp_seconds}
    if plan.cp > 1:
        exposed["cp_comm"] = c.cp_seconds
    if spec.is_moe and plan.ep > 1:
        exposed["ep_comm"] = c.ep_seconds
    if plan.dp * plan.cp > 1:
        exposed["dp_comm"] = c.dp_seconds
    return exposed


def _by_category(plan: Plan, c: Communication) -> tuple[dict[str, float], dict[str, float]]:
    """(seconds, bytes sent per rank) per collective category, the ones that run."""
    seconds: dict[str, float] = {}
    sent: dict[str, float] = {}
    for name, total in c.collectives:
        if name == "dp_param_gather" and plan.zero == 3:
            name = "zero3_gather"
        if total.seconds > 0:
            seconds[name] = seconds.get(name, 0.0) + total.seconds
            sent[name] = sent.get(name, 0.0) + total.bytes_sent_per_rank
    return seconds, sent


def _busiest_link(comm_seconds: dict[str, float]) -> float:
    """Collectives of one axis share links; different axes mostly use different ones (TP
    inside a node, DP across nodes), so the busiest axis bounds the step from below."""
    by_axis: dict[str, float] = {}
    for name, seconds in comm_seconds.items():
        axis = comm_axis(name)
        by_axis[axis] = by_axis.get(axis, 0.0) + seconds
    return max(by_axis.values(), default=0.0)


def _overlap_note(comm_total: float, exposed: dict[str, float]) -> str:
    if comm_total <= 0:
        return "no communication (one GPU)"
    hidden = comm_total - sum(exposed.values())
    shown = ", ".join(f"{k} {v:.3g} s" for k, v in exposed.items() if v > 0)
    return (
        f"{hidden:.3g} s of {comm_total:.3g} s communication hidden behind compute; "
        f"exposed: {shown}"
    )


def step_bounds(compute_seconds: float, comm_seconds: float) -> tuple[float, float]:
    """(lower, upper) bound of a step from its compute and communication time: perfect
    overlap gives max(compute, comm), none gives compute + comm (seed 004, B-bounds)."""
    return max(compute_seconds, comm_seconds), compute_seconds + comm_seconds


def zero_shard_params(n_local: float, plan: Plan) -> float:
    """Parameters whose optimizer update this GPU performs (all of them unless ZeRO >= 1)."""
    return n_local / plan.shard_group if plan.zero >= 1 else n_local
