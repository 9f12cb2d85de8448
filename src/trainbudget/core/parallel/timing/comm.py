"""Alpha-beta cost of collective communication: seconds = steps x alpha + bytes x 1 / beta.

Model (Hockney 1994): one message of n bytes costs alpha + n / beta, alpha the per-step latency
and beta the achieved per-GPU, one-direction link bandwidth (`Cluster` already applies the link
efficiency). Algorithms and their costs follow Thakur, Rabenseifner & Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005; the bandwidth-optimal ring
all-reduce Patarasuk & Yuan, JPDC 69(2), 2009; the pipelined (double) binary tree NCCL uses,
Sanders, Speck & Traeff, Parallel Computing 35(12), 2009.

Conventions:
- `n_bytes` is the full logical buffer: all-reduce the per-rank input; all-gather the gathered
  output; reduce-scatter the per-rank input; all-to-all the bytes each rank sends in total
  (its own 1/p share included, which never crosses a link); send/recv and broadcast the message.
- p = group size, k = members per node (`plan.group_span`), m = p / k nodes.
- A group spanning nodes is modelled as NCCL runs multi-node rings: intra-node reduce-scatter
  (k ranks, intra bandwidth), then the collective over m nodes on n / k bytes per GPU (each GPU
  drives its own NIC, so the per-GPU inter-node bandwidth applies), then intra-node all-gather.
  Phases are summed (no overlap between them): a slight over-estimate. "tree" on such a group
  is the double binary tree over the nodes, between the same intra-node ring phases; inside one
  node NCCL's tree is a chain (2(k-1) steps, the whole buffer up and down), never faster than
  the ring, so "auto" takes the ring there.
  All-gather / reduce-scatter use the same two ring phases (n / k across nodes, n inside),
  and NCCL's flat-ring latency (p - 1 steps, m - 1 of them across nodes);
  all-to-all sends its (k-1)/p share inside the node and its (p-k)/p share across nodes;
  broadcast goes over the nodes, then inside each; send/recv takes the slowest hop.
- `bytes_sent_per_rank` is the numerator of the beta term: what the busiest rank pushes into
  its link(s), summed over phases. `steps` counts the alpha terms.
- "tree" exists for all-reduce (double binary tree over nodes: 2 ceil(log2 m) steps across
  them, a chain of 2(k-1) steps inside each; 2n per rank) and
  broadcast (pipelined binary tree). All-gather and reduce-scatter are ring-only, all-to-all is a
  pairwise exchange, send/recv a direct message, as in NCCL; for them the algorithm argument is
  accepted and ignored, and the result's `algorithm` says what was modelled. "auto" takes the
  faster of ring and tree, as NCCL's tuner does (ties go to ring).
- An empty buffer or a group of one costs nothing (NCCL returns at once for count 0).
- `collective_total` is the same cost for `count` calls, over numbers or over the planner's
  arrays (one element per plan): the phase functions below are written once for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.cluster import Cluster

ALGORITHMS = ("ring", "tree", "auto")


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    seconds: float
    """latency_seconds + bandwidth_seconds."""
    latency_seconds: float
    """Sum of alpha over the steps."""
    bandwidth_seconds: float
    """Sum over phases of bytes / beta."""
    bytes_sent_per_rank: float
    """Bytes the busiest rank sends (the beta term's numerator)."""
    steps: int
    """Number of latency-bound steps (alpha terms)."""
    algorithm: str = "ring"
    """What was modelled: ring, tree, pairwise, direct, or none (free)."""


_FREE = CollectiveCost(0.0, 0.0, 0.0, 0.0, 0, "none")

# Each kind below returns (latency_seconds, bandwidth_seconds, bytes_sent_per_rank, steps) for
# m nodes of k members; (ai, bi) / (ae, be) are the intra- / inter-node alpha and beta. n, k
# and m may be numbers or arrays (`xp`), so `collective_cost` and the planner's grid share them.
_Phases = tuple[Any, Any, Any, Any]


def _all_reduce(n, k, m, ai, bi, ae, be, tree: bool, xp: Ops) -> _Phases:
    one = m == 1
    # one node: the whole collective on NVLink-class links; else intra reduce-scatter and
    # all-gather on n, around the cross-node phase on n / k
    q, s = xp.where(one, k, m), xp.where(one, n, n / k)
    a, b = xp.where(one, ai, ae), xp.where(one, bi, be)
    sent = xp.where(one, 0.0, 2 * (k - 1) / k * n)
    lat, bw = xp.where(one, 0.0, 2 * (k - 1) * ai), xp.where(one, 0.0, sent / bi)
    steps = xp.where(one, 0, 2 * (k - 1))
    if tree:  # pipelined reduce up + broadcast down: the whole buffer once each way (Sanders);
        # a binary tree over the nodes, a chain inside one (NCCL's model, src/graph/tuning.cc
        # ncclTopoTuneModel: 2 ((nRanks/nNodes - 1) intraLat + log2i(nNodes) interLat))
        q_steps = xp.where(one, 2 * (k - 1), 2 * xp.bit_length(q - 1))  # chain; 2 ceil(log2 q)
        q_sent = 2 * s
    else:  # reduce-scatter + all-gather around the ring, 2(q-1) chunks of s/q (Patarasuk & Yuan)
        q_steps = 2 * (q - 1)
        q_sent = q_steps / q * s
    return lat + q_steps * a, bw + q_sent / b, sent + q_sent, steps + q_steps


def _gather(n, k, m, ai, bi, ae, be, tree: bool, xp: Ops) -> _Phases:
    # Ring all-gather (reduce-scatter: the same phases reversed), q-1 chunks of 1/q (Thakur sec. 3):
    # across the m nodes on each rank's node-slice n / k, inside the node on the full n. The
    # latency is NCCL's: one ring through all p = k m ranks, p - 1 steps of which m - 1 cross a
    # NIC and p - m stay on NVLink (NCCL src/graph/tuning.cc ncclTopoTuneModel: nsteps =
    # nRanks - 1, nInterSteps = nNodes - 1), so it grows with the ranks, not the nodes.
    sent_intra = (k - 1) / k * n
    sent_inter = (m - 1) / m * n / k
    latency = (k * m - m) * ai + (m - 1) * ae
    return latency, sent_intra / bi + sent_inter / be, sent_intra + sent_inter, k * m - 1


def _all_to_all(n, k, m, ai, bi, ae, be, tree: bool, xp: Ops) -> _Phases:
    # Pairwise exchange, p-1 steps of n/p (Thakur sec. 4): k-1 peers share the node, p-k are remote.
    p = k * m
    sent_intra = (k - 1) / p * n
    sent_inter = (p - k) / p * n
    latency = (k - 1) * ai + (p - k) * ae
    return latency, sent_intra / bi + sent_inter / be, sent_intra + sent_inter, p - 1


def _send_recv(n, k, m, ai, bi, ae, be, tree: bool, xp: Ops) -> _Phases:
    # One message (Hockney) over the slowest hop of the group.
    one = m == 1
    return xp.where(one, ai, ae), xp.where(one, n / bi, n / be), n, 1


def _broadcast(n, k, m, ai, bi, ae, be, tree: bool, xp: Ops) -> _Phases:
    # Pipelined, the message streams through each level once (n / b); the pipeline is
    # ceil(log2 q) hops deep for a binary tree, q-1 for a chain (ring). Nodes first, then inside.
    lat = bw = sent = 0.0
    steps = 0
    for q, a, b in ((m, ae, be), (k, ai, bi)):
        used = q > 1
        q_steps = xp.bit_length(q - 1) if tree else q - 1
        lat = lat + xp.where(used, q_steps * a, 0.0)
        bw = bw + xp.where(used, n / b, 0.0)
        sent = sent + xp.where(used, n, 0.0)
        steps = steps + xp.where(used, q_steps, 0)
    return lat, bw, sent, steps


# kind -> (phases, name of its single algorithm, or None where ring and tree both exist)
_KINDS = {
    "all_reduce": (_all_reduce, None),
    "all_gather": (_gather, "ring"),
    "reduce_scatter": (_gather, "ring"),
    "all_to_all": (_all_to_all, "pairwise"),
    "send_recv": (_send_recv, "direct"),
    "broadcast": (_broadcast, None),
}
KINDS = tuple(_KINDS)
_TREE = {"ring": False, "tree": True, "auto": None}


def _links(c: Cluster) -> tuple[float, float, float, float]:
    return (
        c.intra_node_latency_seconds,
        c.intra_node_bytes_per_second,
        c.inter_node_latency_seconds,
        c.inter_node_bytes_per_second,
    )


def _validate(kind: str, n: float, p: int, k: int, c: Cluster, algorithm: str) -> None:
    if kind not in KINDS:
        raise unknown_key("kind", kind, KINDS)
    if algorithm not in ALGORITHMS:
        raise unknown_key("algorithm", algorithm, ALGORITHMS)
    if not n >= 0:  # also rejects NaN
        raise SpecError("n_bytes", n, "must be a non-negative number of bytes")
    if type(p) is not int or p < 1:
        raise SpecError("group_size", p, "must be a positive integer")
    if type(k) is not int or k < 1 or p % k or k > c.gpus_per_node:
        raise SpecError(
            "per_node", k, f"must divide group_size ({p}) and fit a node ({c.gpus_per_node})"
        )


def collective_cost(
    kind: str,
    n_bytes: float,
    group_size: int,
    per_node: int,
    cluster: Cluster,
    algorithm: str = "ring",
) -> CollectiveCost:
    """Alpha-beta time of one collective; see the module docstring for `n_bytes` per kind.

    kind: one of KINDS; algorithm: "ring", "tree" or "auto"; per_node: members of the group that
    share a node (group_size: all in one node, 1: one per node), as `plan.group_span` gives it.
    """
    _validate(kind, n_bytes, group_size, per_node, cluster, algorithm)
    if group_size == 1 or n_bytes == 0:  # NCCL returns at once
        return _FREE
    phases, only = _KINDS[kind]
    k, m = per_node, group_size // per_node
    links = _links(cluster)
    if only is not None:
        return _cost(phases(n_bytes, k, m, *links, False, SCALAR), only)
    tree = _TREE[algorithm]
    if tree is not None:
        return _cost(phases(n_bytes, k, m, *links, tree, SCALAR), algorithm)
    ring = phases(n_bytes, k, m, *links, False, SCALAR)
    fast = phases(n_bytes, k, m, *links, True, SCALAR)
    if fast[0] + fast[1] < ring[0] + ring[1]:
        return _cost(fast, "tree")
    return _cost(ring, "ring")


def _cost(r: _Phases, algorithm: str) -> CollectiveCost:
    return CollectiveCost(r[0] + r[1], r[0], r[1], r[2], int(r[3]), algorithm)


def collective_seconds(
    kind: str,
    n_bytes: float,
    group_size: int,
    per_node: int,
    cluster: Cluster,
    algorithm: str = "ring",
) -> float:
    """`collective_cost(...).seconds`."""
    return collective_cost(kind, n_bytes, group_size, per_node, cluster, algorithm).seconds


@dataclass(frozen=True, slots=True)
class CollectiveTotal:
    """`count` calls of one collective in a step (numbers, or arrays over plans)."""

    seconds: Any
    bytes_sent_per_rank: Any
    """None where the caller did not ask for bytes (the planner's grid ranks by time)."""
    kind: str = ""
    n_bytes: Any = 0.0
    """One call's buffer, in the module docstring's convention per kind."""
    count: Any = 0
    """Calls in the step (0 where the collective does not run)."""
    group_size: Any = 1


def collective_total(
    kind: str,
    n_bytes,
    group_size,
    per_node,
    cluster: Cluster,
    count,
    xp: Ops = SCALAR,
    *,
    with_bytes: bool = True,
) -> CollectiveTotal:
    """Time and bytes of `count` calls of `kind` on a group of `group_size` ranks, `per_node` of
    which share a node (clipped to the group; a span that does not divide the group counts as
    one per node), with the faster of ring and tree where both exist (NCCL's tuner, "auto").
    Free for a group of one, an empty buffer or no calls. Serves `step_time` and the grid; on
    arrays the phases are computed only for the plans that use the collective."""
    used = (group_size > 1) & (n_bytes > 0) & (count > 0)
    what = {"kind": kind, "n_bytes": n_bytes, "count": count, "group_size": group_size}
    if not xp.is_array:
        if not used:
            return CollectiveTotal(0.0, 0.0 if with_bytes else None, **what)
        return _total(kind, n_bytes, group_size, per_node, count, cluster, xp, with_bytes, what)
    import numpy as np  # only the grid gets here

    if used.all():
        return _total(kind, n_bytes, group_size, per_node, count, cluster, xp, with_bytes, what)
    if used.ndim > 1:  # a product grid (search.product_grid): its arrays span a few of its
        # axes each, so computing every cell costs about what picking the used ones would
        whole = _total(kind, n_bytes, group_size, per_node, count, cluster, xp, with_bytes, {})
        sent = np.where(used, whole.bytes_sent_per_rank, 0.0) if with_bytes else None
        return CollectiveTotal(np.where(used, whole.seconds, 0.0), sent, **what)
    seconds = np.zeros(used.shape)
    sent = np.zeros(used.shape) if with_bytes else None
    if used.any():
        pick = np.flatnonzero(used)
        args = [x[pick] if np.ndim(x) else x for x in (n_bytes, group_size, per_node, count)]
        part = _total(kind, *args, cluster, xp, with_bytes, {})
        seconds[pick] = part.seconds
        if with_bytes:
            sent[pick] = part.bytes_sent_per_rank
    return CollectiveTotal(seconds, sent, **what)


def _total(
    kind, n_bytes, group_size, per_node, count, cluster, xp, with_bytes, what
) -> CollectiveTotal:
    k = xp.minimum(per_node, group_size)
    k = xp.where(group_size % k == 0, k, 1)
    m = group_size // k
    phases, only = _KINDS[kind]
    links = _links(cluster)
    lat, bw, sent, _ = phases(n_bytes, k, m, *links, False, xp)
    seconds = lat + bw
    if only is None:  # the faster of ring and tree (ties: ring, the same value)
        t_lat, t_bw, t_sent, _ = phases(n_bytes, k, m, *links, True, xp)
        tree = t_lat + t_bw < seconds
        seconds, sent = xp.where(tree, t_lat + t_bw, seconds), xp.where(tree, t_sent, sent)
    return CollectiveTotal(seconds * count, sent * count if with_bytes else None, **what)


def data_parallel_gradient_bytes_per_iteration(
    n_params: float, bytes_per_grad: float, replicas: int
) -> float:
    """replicas x n_params x bytes_per_grad: the large-model article's accounting (seed 004,
    B-walls: GPT-3 175B fp32, 128 replicas -> 128 x 700 GB = 89.6 TB). It counts each replica's
    full gradient once; it is not the bytes on the wire (see `ring_all_reduce_wire_bytes`)."""
    for field, value in (("n_params", n_params), ("bytes_per_grad", bytes_per_grad)):
        if not value >= 0:
            raise SpecError(field, value, "must not be negative")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise SpecError("replicas", replicas, "must be a positive integer")
    return replicas * n_params * bytes_per_grad


def ring_all_reduce_wire_bytes(n_bytes: float, p: int) -> float:
    """Bytes all p ranks send together in a ring all-reduce of an n-byte buffer:
    p x 2(p-1)/p x n = 2(p-1) n (Patarasuk & Yuan 2009)."""
    if not n_bytes >= 0:
        raise SpecError("n_bytes", n_bytes, "must be a non-negative number of bytes")
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise SpecError("group_size", p, "must be a positive integer")
    return p * (2 * (p - 1) / p * n_bytes)
