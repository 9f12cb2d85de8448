"""Context parallelism: every training sequence split over the cp ranks of a "cp" mesh axis.

Each rank holds T / cp tokens of each sequence and runs the embeddings, norms, MLPs, head and
loss on them alone; only attention needs the other ranks' tokens, for their keys and values.

Load balance (what the core assumes, core.parallel.plan: "seq_len must be divisible by
2 * cp"): the sequence is cut into 2 cp chunks of c = T / (2 cp) tokens and rank r holds chunks
r and 2 cp - 1 - r (Megatron-LM's context parallelism; Liu et al. 2023, Ring Attention,
arXiv:2310.01889, with the causal "zig-zag" split of Brandon et al. 2023, arXiv:2311.09431).
Under a causal mask an early chunk's queries see few keys and a late chunk's many: the pair
gives every rank the same number of query-key pairs.

Attention (`ContextAttention`): the local keys and values are all-gathered over the cp group
(with GQA the K kv heads, fewer than the H query heads), the local queries attend to them
under the causal mask of the tokens' global positions, and the backward gathers them again
and reduce-scatters their gradients -- the sum over the ranks of each key's and value's
gradient lands on the rank that holds it. Three passes of K and V per layer and micro-batch,
as the core's ring charges (core.parallel comm_time's CP_RING_PASSES: the forward's keys, the
backward's keys, their gradients), each moving (cp - 1) / cp of the gathered buffer per rank,
the bytes of the ring's cp - 1 hops. Only the local q, k and v are saved for backward -- the
activations the core counts for the trainer's fused attention (train.observe.accounting.run_plan:
flash_attention), less FlashAttention's per-token log-sum-exp --, neither the gathered keys nor
the scores: the backward gathers the keys again and recomputes the attention before taking its
gradients, as a flash kernel recomputes its scores. The attention is torch's SDPA under a mask
of the tokens' global places, so it runs on gloo on a CPU and on NCCL on a GPU alike (whichever
SDPA kernel takes a mask); the attention forward runs twice a step, which the core's step time
does not charge.

The loss: each rank's mean over its tokens. Every rank holds the same number of tokens, so the
mean of the ranks' means is the mean over the whole sequence, and the data-parallel wrapper's
average over the dp x cp ranks (train.parallel.parallelize) gives one process's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

from trainbudget.train.spec.config_checks import CP_CHUNKS_PER_RANK, check_context_parallel


def chunk_positions(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """(seq_len / cp,) int64: the places in the sequence of rank `rank`'s tokens, chunk `rank`
    then chunk 2 cp - 1 - rank."""
    check_context_parallel(seq_len, cp)
    c = seq_len // (CP_CHUNKS_PER_RANK * cp)
    late = CP_CHUNKS_PER_RANK * cp - 1 - rank
    early = torch.arange(rank * c, (rank + 1) * c, device=device)
    return torch.cat((early, torch.arange(late * c, (late + 1) * c, device=device)))


def local_tokens(tokens: torch.Tensor, cp: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s part of (B, T) tokens (or any (B, T, ...) tensor): (B, T / cp, ...)."""
    t = tokens.shape[1]
    return tokens.index_select(1, chunk_positions(t, cp, rank, tokens.device))


@dataclass(frozen=True, kw_only=True, eq=False)
class ContextShard:
    """This rank's share of each sequence (model.transformer.SequenceShard): what the model
    asks for positions and attention, and what the loop asks for its batch."""

    group: dist.ProcessGroup
    """The cp axis's group: the ranks that hold one sequence between them."""
    cp: int
    """Ranks along the cp axis."""
    rank: int
    """This rank's place along the cp axis."""

    def positions(self, n_local: int, device) -> torch.Tensor:
        return chunk_positions(n_local * self.cp, self.cp, self.rank, device)

    def local(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) of the whole sequences -> (B, T / cp) of this rank's tokens."""
        return local_tokens(tokens, self.cp, self.rank)

    def key_positions(self, n_local: int, device) -> torch.Tensor:
        """(n_local x cp,): the places of the gathered keys, in the gathered order (rank 0's
        tokens, then rank 1's, ...)."""
        seq_len = n_local * self.cp
        return torch.cat([chunk_positions(seq_len, self.cp, r, device) for r in range(self.cp)])

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int
    ) -> torch.Tensor:
        """Causal attention (within `window` keys, 0: all) of the local queries q: (B, H, t, E)
        over every rank's keys k: (B, K, t, E) and values v: (B, K, t, Ev) -> (B, H, t, Ev),
        t = T / cp, as model.transformer.attend computes it on the whole sequence."""
        t = q.shape[-2]
        allowed = attention_mask(
            self.positions(t, q.device), self.key_positions(t, q.device), window
        )
        return ContextAttention.apply(q, k, v, allowed, self.group, self.cp)


def context_shard(mesh) -> ContextShard | None:
    """This rank's shard along the mesh's "cp" axis; None without one (or of one rank)."""
    if mesh is None or "cp" not in mesh.mesh_dim_names or mesh["cp"].size() == 1:
        return None
    cp = mesh["cp"]
    return ContextShard(group=cp.get_group(), cp=cp.size(), rank=cp.get_local_rank())


def gradient_mesh(mesh, data_axes: tuple[str, ...]):
    """The sub-mesh the data-parallel engine averages gradients (and shards state) over: the
    `data_axes`, with "cp" folded into the innermost -- every rank of a dp x cp group computed
    the gradient of other tokens of the same model (torchtitan's dp_shard_cp): "dp_cp", or
    under hsdp ("dp_replicate", "dp_shard_cp"); with one rank along the innermost, the "cp"
    axis itself (DeviceMesh would hand the flattened axis the cp axis's own process group
    anyway). Without a "cp" axis, mesh[data_axes] as it is."""
    if "cp" not in mesh.mesh_dim_names:
        return mesh[data_axes]
    *outer, inner = data_axes
    folded = _folded(mesh, inner) or mesh["cp"]
    if not outer:
        return folded
    # hsdp: the replicas' axis beside the folded shard axis, one 2-D mesh of the same root
    return DeviceMesh._concatenate([mesh[tuple(outer)], folded])


def _folded(mesh, inner: str):
    """mesh[(inner, "cp")] flattened into one axis "<inner>_cp" (the same mesh on a second
    call); None when `inner` has one rank."""
    if mesh[inner].size() == 1:
        return None
    return mesh[(inner, "cp")]._flatten(f"{inner}_cp")


def folded_groups(mesh) -> dict:
    """{"dp_cp" or "dp_shard_cp": its process group} when `gradient_mesh` folds cp into a
    data-parallel axis of more than one rank: what train.observe.comm_count names the
    gradients' collectives."""
    if mesh is None or "cp" not in mesh.mesh_dim_names:
        return {}
    inner = "dp_shard" if "dp_shard" in mesh.mesh_dim_names else "dp"
    folded = _folded(mesh, inner)
    return {} if folded is None else {f"{inner}_cp": folded.get_group()}


def local_batch(model, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A micro-batch's (B, T) tensors cut to this rank's tokens when `model` (the loop's
    model) is context parallel; as given otherwise."""
    shard = getattr(model, "sequence_shard", None)
    return tensors if shard is None else tuple(shard.local(t) for t in tensors)


def attention_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """(t, T) bool: query i may see key j -- causal, and within the window if one is set."""
    offset = q_pos[:, None] - k_pos[None, :]  # query place minus key place
    allowed = offset >= 0
    return allowed & (offset < window) if window else allowed


def _collective(name: str, older: str):
    """torch.distributed's `name` (torch 2.13; the `older` one warns there, and is all torch <
    2.13 has), looked up at each call: train.observe.collective_settle swaps them while memory is
    measured."""
    return getattr(dist, name, None) or getattr(dist, older)


def _gather(local: torch.Tensor, group, cp: int) -> torch.Tensor:
    """(B, K, t, D) on each rank -> (B, K, cp t, D): every rank's, rank 0's first."""
    b, heads, t, d = local.shape
    out = local.new_empty((cp * b, heads, t, d))
    all_gather = _collective("all_gather_single", "all_gather_into_tensor")
    all_gather(out, local.contiguous(), group=group)
    # (cp, B, K, t, D) -> (B, K, cp, t, D) -> (B, K, cp t, D)
    return out.view(cp, b, heads, t, d).permute(1, 2, 0, 3, 4).reshape(b, heads, cp * t, d)


def _reduce_scatter(grads: list, group, cp: int) -> torch.Tensor:
    """The inverse of `_gather`'s layout, summed: [grad k (B, K, cp t, E), grad v (B, K, cp t,
    Ev)] -> (B, K, t, E + Ev), this rank's keys' and values' gradients summed over every rank's
    queries. Each gradient is written into the collective's buffer and dropped from `grads` at
    once: no concatenated copy beside them."""
    b, heads, n, _ = grads[0].shape
    t, widths = n // cp, [g.shape[-1] for g in grads]
    blocks = grads[0].new_empty((cp, b, heads, t, sum(widths)))  # rank r's block first
    into = blocks.permute(1, 2, 0, 3, 4)  # (B, K, cp, t, D), a view of the buffer
    start = 0
    for i, width in enumerate(widths):
        into[..., start : start + width].copy_(grads[i].view(b, heads, cp, t, width))
        grads[i], start = None, start + width
    out = blocks.new_empty((b, heads, t, sum(widths)))
    reduce_scatter = _collective("reduce_scatter_single", "reduce_scatter_tensor")
    reduce_scatter(out, blocks.view(cp * b, heads, t, -1), op=dist.ReduceOp.SUM, group=group)
    return out


class ContextAttention(torch.autograd.Function):
    """Attention over K and V all-gathered on the cp group (the module docstring). Saves the
    local q, k and v only; the backward gathers k and v again and recomputes the attention (a
    flash kernel's backward recomputes its scores too) to take its gradients."""

    @staticmethod
    def forward(ctx, q, k, v, allowed, group, cp: int):
        with torch.no_grad():
            k_all, v_all = _gather_kv(k, v, group, cp)  # (B, K, T, E), (B, K, T, Ev)
            out = _sdpa(q, k_all, v_all, allowed)
        ctx.save_for_backward(q, k, v, allowed)
        ctx.group, ctx.cp = group, cp
        return out  # (B, H, t, Ev)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, allowed = ctx.saved_tensors
        with torch.no_grad():
            k_all, v_all = _gather_kv(k, v, ctx.group, ctx.cp)
        q, k_all, v_all = (t.detach().requires_grad_() for t in (q, k_all, v_all))
        with torch.enable_grad():
            out = _sdpa(q, k_all, v_all, allowed)
        grad_q, *grads = torch.autograd.grad(out, (q, k_all, v_all), grad_out)
        del out, k_all, v_all
        # each key's and value's gradient, summed over every rank's queries, to its own rank
        grad_kv = _reduce_scatter(grads, ctx.group, ctx.cp)
        grad_k, grad_v = grad_kv.split([k.shape[-1], v.shape[-1]], dim=-1)
        return grad_q, grad_k, grad_v, None, None, None


def _gather_kv(k: torch.Tensor, v: torch.Tensor, group, cp: int) -> tuple:
    """Every rank's keys and values, in one all-gather of [k | v] along the head dim."""
    kv = _gather(torch.cat((k, v), dim=-1), group, cp)  # (B, K, T, E + Ev)
    return kv.split([k.shape[-1], v.shape[-1]], dim=-1)


def _sdpa(q, k_all, v_all, allowed) -> torch.Tensor:
    """torch's SDPA under the (t, T) mask of the tokens' places: whichever kernel takes a mask
    on the device (CPU: the flash or math path; CUDA: memory-efficient), GQA's K kv heads as
    they are."""
    gqa = k_all.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=allowed, enable_gqa=gqa)
