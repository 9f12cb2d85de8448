"""Expert parallelism (EP) for the MoE layers: each rank holds n_experts / ep of every MoE
layer's routed experts, and the tokens routed to an expert travel to the rank that holds it and
back with all-to-alls (GShard, Lepikhin et al. 2020, arXiv:2006.16668, Sec. 2.2 and 3.2; the
layout of Megatron-Core and torchtitan, where EP is carved out of the data-parallel ranks).

Layout: the mesh's "dp" axis, in groups of ep consecutive dp ranks (the expert groups). Member
j of every group holds experts [j * E / ep, (j + 1) * E / ep); the members at the same position
in the dp / ep groups hold the same experts (an expert's replicas). The other parameters stay
replicated over every dp rank, as under DDP.

One MoE layer's forward, per micro-batch (`ExpertRunner`; routing and capacity are decided
before, on this rank's own tokens, in model.moe):
1. counts: an all-to-all of the (E,) assignment counts tells each rank how many rows each source
   sends to each of its experts (the splits of the next two all-to-alls);
2. dispatch: the kept assignments' rows, sorted by expert, go to their experts' ranks;
3. the local experts run on their rows, every one even on an empty slice (model.moe's rule);
4. combine: the outputs go back, in the order they came; the source applies the gates.
2 and 4 are dist.all_to_all_single in an autograd Function (`_AllToAll`) whose backward runs
the reverse all-to-all, so EP_ALL_TO_ALLS_PER_LAYER = 4 per layer and micro-batch.

Gradients (`sync_expert_grads`): DDP or FSDP2 averages the other parameters over the dp ranks.
DDP is told to ignore the experts; FSDP2 shards each expert over its replicas (an "edp" mesh of
dp / ep ranks, torchtitan's layout; one rank when dp == ep) and averages its gradient there.
An expert's gradient on its rank is already the sum, over the ranks of its expert group, of
each rank's local loss's gradient (the all-to-all's backward brought the contributions home);
summed over its replicas and divided by dp it is the gradient of the global mean loss -- what
one process computes on the whole batch (under FSDP2: its average over the replicas divided
by ep). The gradient norm (`grad_norm`) adds the expert groups' disjoint parts with an
all-reduce over the expert group. zero1 (ZeroRedundancyOptimizer would shard the experts as if
every rank held them) and hsdp (two data-parallel axes) are refused.

Capacity is applied per micro-batch on the source rank, over its own N tokens: an ep run equals
the one-process run with the same micro-batches (same micro_batch, grad_accum x ranks), with a
capacity factor or dropless; against a one-process run with bigger micro-batches only the
dropless rule (capacity factor 0) gives the same routing.

Difference from the core's all-to-all bytes (core/parallel/timing/comm_time.py): the core counts
buffers of the capacity, C x N x k rows, filled or not (GShard's padded dispatch); this sends
the kept assignments only (variable splits), at most N x k rows. Dropless (C = 0) they agree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from trainbudget.model.moe import MoE


@dataclass(frozen=True, kw_only=True)
class ExpertGroups:
    """This rank's place in the expert layout (module docstring)."""

    ep: int
    """Ranks per expert group."""
    dp: int
    """Data-parallel ranks (the divisor of the global mean's gradient)."""
    position: int
    """This rank's place in its expert group: it holds the position-th block of experts."""
    members: tuple[int, ...]
    """Global ranks of this rank's expert group, by position."""
    group: dist.ProcessGroup = field(repr=False)
    """The expert group (the all-to-alls, the gradient norm's experts part)."""
    replicas: dist.ProcessGroup | None = field(repr=False)
    """The ranks holding the same experts (dp / ep of them); None when dp == ep."""


def expert_groups(mesh: DeviceMesh, ep: int) -> ExpertGroups:
    """Expert groups of ep consecutive ranks along the mesh's "dp" axis, and the replica groups
    across them; the other axes (tp, pp) keep their places. Every rank creates every group, in
    the same order (torch.distributed's rule for new groups)."""
    axis = mesh.mesh_dim_names.index("dp")
    ranks = mesh.mesh.movedim(axis, -1)  # (..., dp): the dp groups in the last dim
    dp = ranks.shape[-1]
    blocks = ranks.reshape(-1, dp // ep, ep)  # (dp groups, expert groups, ep)
    group, _ = dist.new_subgroups_by_enumeration(blocks.reshape(-1, ep).tolist())
    replicas = None
    if dp > ep:
        columns = blocks.transpose(1, 2).reshape(-1, dp // ep).tolist()
        replicas, _ = dist.new_subgroups_by_enumeration(columns)
    me = dist.get_rank()
    members = next(row for row in blocks.reshape(-1, ep).tolist() if me in row)
    return ExpertGroups(
        ep=ep,
        dp=dp,
        position=members.index(me),
        members=tuple(members),
        group=group,
        replicas=replicas,
    )


class RemoteExpert(nn.Module):
    """The place of an expert that another rank of the expert group holds: no parameters."""

    def __init__(self, owner: int) -> None:
        super().__init__()
        self.owner = owner
        """Its holder's position in the expert group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(f"this expert is held by member {self.owner} of the expert group")


@dataclass
class AllToAllTally:
    """Bytes this rank put into the token all-to-alls (each call's whole send buffer, its own
    share included: the core's `n_bytes` convention, core/parallel/timing/comm.py), forward and
    backward, and the calls; the counts' small all-to-alls apart."""

    token_bytes: int = 0
    calls: int = 0
    count_bytes: int = 0
    received_rows: list[int] | None = None
    """While a list (`recorded_rows`): the rows this rank's experts received in each training
    forward of an MoE layer (not in a recomputation during backward), in order -- what its
    expert activations scale with; None: not recorded."""

    def add(self, t: torch.Tensor) -> None:
        self.token_bytes += t.numel() * t.element_size()
        self.calls += 1


class ExpertRunner:
    """One MoE layer's `runner` under EP: its local experts reached by all-to-all (module
    docstring, steps 1-4). x (n_kept, D): this rank's kept assignments grouped by expert,
    counts[e] rows for expert e; returns their outputs in the same rows."""

    def __init__(self, layer: MoE, groups: ExpertGroups, tally: AllToAllTally) -> None:
        self.layer, self.groups, self.tally = layer, groups, tally
        self.n_local = layer.n_experts // groups.ep
        first = groups.position * self.n_local
        self.local = [layer.experts[e] for e in range(first, first + self.n_local)]

    def __call__(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        ep, n_local, group = self.groups.ep, self.n_local, self.groups.group
        send_counts = torch.tensor(counts, dtype=torch.int64, device=x.device)  # (E,)
        recv_counts = torch.empty_like(send_counts)  # (ep * n_local,): by source, then expert
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        self.tally.count_bytes += 2 * send_counts.numel() * send_counts.element_size()
        send_splits = send_counts.view(ep, n_local).sum(1).tolist()  # rows to each member
        recv = recv_counts.view(ep, n_local).tolist()  # recv[s][l]: rows from s for expert l
        recv_splits = [sum(row) for row in recv]
        rows = self.tally.received_rows
        if rows is not None and torch.is_grad_enabled() and torch._C._current_graph_task_id() < 0:
            rows.append(sum(recv_splits))  # a training forward, not a recomputation
        received = self._exchange(x, recv_splits, send_splits)  # (n_recv, D)
        pieces = torch.split(received, [c for row in recv for c in row])
        outputs = []  # (rows of local expert j from every source, D), by j
        for j, expert in enumerate(self.local):
            # every local expert runs, on an empty slice too (model.moe's docstring)
            outputs.append(expert(torch.cat([pieces[s * n_local + j] for s in range(ep)])))
        parts = [torch.split(out, [recv[s][j] for s in range(ep)]) for j, out in enumerate(outputs)]
        back = torch.cat([parts[j][s] for s in range(ep) for j in range(n_local)])  # by source
        return self._exchange(back, send_splits, recv_splits)  # (n_kept, D)

    def _exchange(self, rows: torch.Tensor, out_splits: list[int], in_splits: list[int]):
        """One all-to-all of `rows` (in_splits[j] of them to member j; out_splits[j] come
        from j), differentiable (`_AllToAll`)."""
        return _AllToAll.apply(rows, out_splits, in_splits, self.groups.group, self.tally)


class _AllToAll(torch.autograd.Function):
    """dist.all_to_all_single with variable splits, whose backward is the reverse all-to-all
    of the gradient (what each rank received goes back to where it came from); both
    directions tallied. torch.distributed.nn.functional.all_to_all_single is the same, and
    deprecated in torch 2.13 in favour of a private module."""

    @staticmethod
    def forward(ctx, rows, out_splits, in_splits, group, tally):
        ctx.splits, ctx.group, ctx.tally = (out_splits, in_splits), group, tally
        out = rows.new_empty((sum(out_splits), *rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), out_splits, in_splits, group=group)
        tally.add(rows)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        ctx.tally.add(grad)
        return back, None, None, None, None


@dataclass(kw_only=True, eq=False)
class ExpertParallel:
    """A model's expert layout (`shard_experts`): its groups, the names of the expert
    parameters this rank holds, and the all-to-all tally of all its MoE layers."""

    groups: ExpertGroups
    expert_names: tuple[str, ...]
    """Names (model.named_parameters) of this rank's expert parameters."""
    full_names: tuple[str, ...]
    """Every parameter name of the whole (single-process) model, in its order."""
    tally: AllToAllTally
    fsdp: bool = False
    """FSDP2 holds the experts (`fully_shard_experts`) and averages them over the replicas."""


def shard_experts(model: nn.Module, groups: ExpertGroups) -> ExpertParallel:
    """Keep this rank's experts of every MoE layer (the others become `RemoteExpert`s, their
    memory freed) and route each layer through the all-to-alls. Call before DDP wraps the model
    (`ddp_ignored`) and before the optimizer is built."""
    full_names = tuple(name for name, _ in model.named_parameters())
    tally = AllToAllTally()
    for layer in model.modules():
        if isinstance(layer, MoE):
            n_local = layer.n_experts // groups.ep
            for e in range(layer.n_experts):
                if e // n_local != groups.position:
                    layer.experts[e] = RemoteExpert(e // n_local)
            layer.runner = ExpertRunner(layer, groups, tally)
    expert_names = tuple(name for name, _ in _expert_params(model))
    model.expert_parallel = ExpertParallel(
        groups=groups, expert_names=expert_names, full_names=full_names, tally=tally
    )
    return model.expert_parallel


def of(model: nn.Module) -> ExpertParallel | None:
    """The model's expert layout; None without expert parallelism."""
    return getattr(model, "expert_parallel", None)


def _expert_params(model: nn.Module):
    for name, param in model.named_parameters():
        if ".experts." in name:
            yield name, param


def fully_shard_experts(model: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool) -> None:
    """FSDP2 on each of this rank's experts, over the "edp" mesh of its replicas (dp / ep
    ranks; one when dp == ep), before the blocks are: the blocks' fully_shard then leaves
    them alone. Its reduction averages over the replicas; `sync_expert_grads` divides by ep
    after it (FSDP2's set_gradient_divide_factor would do both in one, but its PREMUL_SUM
    reduction does not exist in gloo)."""
    from torch.distributed.fsdp import fully_shard

    layout = of(model)
    axis = mesh.mesh_dim_names.index("dp")
    ranks = mesh.mesh.movedim(axis, -1)
    dp, ep = ranks.shape[-1], layout.groups.ep
    blocks = ranks.reshape(-1, dp // ep, ep)  # (dp groups, replicas, ep)
    views = DeviceMesh(mesh.device_type, blocks, mesh_dim_names=("rest", "edp", "ep"))
    for layer in model.modules():
        if isinstance(layer, MoE):
            for expert in layer.runner.local:
                fully_shard(expert, mesh=views["edp"], reshard_after_forward=reshard_after_forward)
    layout.fsdp = True


def ddp_ignored(model: nn.Module) -> None:
    """Tell DDP to leave the expert parameters alone: no broadcast from rank 0 at wrapping (each
    rank holds other experts) and no gradient all-reduce (`sync_expert_grads` does theirs)."""
    from torch.nn.parallel import DistributedDataParallel

    names = of(model).expert_names
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, list(names))


def sync_expert_grads(model: nn.Module) -> None:
    """After the step's last backward: each expert gradient summed over its replicas and
    divided by dp -- the global mean loss's gradient (module docstring). One all-reduce of
    all of them, flattened; a no-op without EP."""
    layout = of(model)
    if layout is None:
        return
    grads = [p.grad for _, p in _expert_params(model) if p.grad is not None]
    if layout.fsdp:  # FSDP2 averaged them over the replicas: 1 / (dp / ep) of the sum
        for g in grads:
            g.div_(layout.groups.ep)
        return
    if not grads:
        return
    if layout.groups.replicas is not None:
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=layout.groups.replicas)
        for g, summed in zip(grads, torch.split(flat, [g.numel() for g in grads]), strict=True):
            g.copy_(summed.view_as(g))
    for g in grads:
        g.div_(layout.groups.dp)


def grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """The whole model's gradient L2 norm -- the replicated parameters' part local, the
    experts' summed over the expert group, whose members hold disjoint experts -- and, when
    max_norm > 0, the gradients clipped to it as torch.nn.utils.clip_grad_norm_ does
    (coefficient max_norm / (norm + 1e-6), at most 1)."""
    layout = of(model)
    experts = set(layout.expert_names)
    dense, local = [], []
    for name, p in model.named_parameters():
        if p.grad is not None:
            (local if name in experts else dense).append(p.grad)
    zero = torch.zeros((), device=(dense + local)[0].device) if dense or local else torch.zeros(())
    dense_sq = sum((_norm(g) ** 2 for g in dense), zero.clone())
    experts_sq = sum((_norm(g) ** 2 for g in local), zero.clone())
    dist.all_reduce(experts_sq, group=layout.groups.group)  # disjoint experts: add the parts
    norm = (dense_sq + experts_sq).sqrt()
    if max_norm > 0:
        coef = float(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        for g in dense + local:
            g.mul_(coef)
    return norm


def _norm(grad: torch.Tensor) -> torch.Tensor:
    """A gradient's L2 norm; FSDP2's DTensor shards' norms reduced to the whole tensor's."""
    norm = torch.linalg.vector_norm(grad.float())
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def take_all_to_all_bytes(model: nn.Module) -> AllToAllTally:
    """The token all-to-alls' bytes this rank sent since the last call (forward and backward,
    all MoE layers), and reset; an empty tally without EP. For RUN_DIR/comm.json's measured
    side, beside the core's prediction (`predicted_all_to_all_bytes`)."""
    layout = of(model)
    if layout is None:
        return AllToAllTally()
    taken = AllToAllTally(**vars(layout.tally))
    layout.tally.token_bytes = layout.tally.calls = layout.tally.count_bytes = 0
    return taken


@contextlib.contextmanager
def recorded_rows(model: nn.Module) -> Iterator[list[int] | None]:
    """Within: the rows this rank's experts receive, one entry per MoE layer forward
    (`AllToAllTally.received_rows`), in the list it yields; None without expert parallelism."""
    layout = of(model)
    if layout is None:
        yield None
        return
    layout.tally.received_rows = rows = []
    try:
        yield rows
    finally:
        layout.tally.received_rows = None


def described(model: nn.Module, engine: str, mesh: dict) -> tuple[str, dict]:
    """summary.json's `strategy_engine` and `mesh` with the expert layout, when there is one:
    the expert groups and the experts each member holds."""
    layout = of(model)
    if layout is None:
        return engine, mesh
    g = layout.groups
    engine += f" + expert parallel (ep={g.ep}: all-to-all token dispatch and combine)"
    return engine, {**mesh, "ep": g.ep, "expert_replicas": g.dp // g.ep}
