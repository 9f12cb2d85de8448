"""Alpha-beta collective costs: seed examples, limits, hierarchy, auto choice, errors."""

from __future__ import annotations

import math

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.timing.comm import (
    ALGORITHMS,
    KINDS,
    CollectiveCost,
    collective_cost,
    collective_seconds,
    data_parallel_gradient_bytes_per_iteration,
    ring_all_reduce_wire_bytes,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.units import GB, MB, TB

H100 = get_hardware("h100-sxm")
# DGX/HGX H100 cluster, 8 GPUs per node, default link efficiency 0.8 and latencies 5 / 10 us.
CLUSTER = Cluster(hardware=H100, n_gpus=1024)
# Achieved per-GPU one-direction bandwidth: NVLink 4 450 GB/s x 0.8; NDR 400 Gb/s = 50 GB/s x 0.8.
BW_INTRA = 360 * GB
BW_INTER = 40 * GB
A_INTRA = 5e-6  # cluster.DEFAULT_INTRA_NODE_LATENCY_SECONDS
A_INTER = 10e-6  # cluster.DEFAULT_INTER_NODE_LATENCY_SECONDS
N = 1 * GB  # a 1 GB buffer (e.g. 500M bf16 gradients)


def test_cluster_figures_are_what_the_expected_values_assume():
    assert CLUSTER.intra_node_bytes_per_second == pytest.approx(BW_INTRA)
    assert CLUSTER.inter_node_bytes_per_second == pytest.approx(BW_INTER)
    assert CLUSTER.intra_node_latency_seconds == A_INTRA
    assert CLUSTER.inter_node_latency_seconds == A_INTER
    assert CLUSTER.gpus_per_node == 8


# ---- seed 004, B-ring-tree: "ring moves 2(p-1)/p of the data per rank; tree needs O(log p)" --
@pytest.mark.parametrize("p", [2, 3, 4, 8, 16, 64, 1024])
def test_B_ring_tree_ring_moves_2_p_minus_1_over_p(p):
    # one GPU per node: a flat ring over the NICs, 2(p-1) steps, 2(p-1)/p x n bytes per rank
    c = collective_cost("all_reduce", N, p, 1, CLUSTER, "ring")
    assert c.bytes_sent_per_rank == pytest.approx(2 * (p - 1) / p * N)
    assert c.steps == 2 * (p - 1)
    assert c.latency_seconds == pytest.approx(2 * (p - 1) * A_INTER)
    assert c.bandwidth_seconds == pytest.approx(2 * (p - 1) / p * N / BW_INTER)
    assert c.seconds == pytest.approx(c.latency_seconds + c.bandwidth_seconds)
    assert c.algorithm == "ring"


def test_B_ring_tree_ring_factor_values():
    # 2(p-1)/p: p=2 -> 1, p=4 -> 1.5, p=8 -> 1.75, p -> infinity -> 2
    for p, factor in ((2, 1.0), (4, 1.5), (8, 1.75), (1024, 2 * 1023 / 1024)):
        c = collective_cost("all_reduce", N, p, 1, CLUSTER)
        assert c.bytes_sent_per_rank / N == pytest.approx(factor)


def test_B_ring_tree_tree_steps_grow_as_log2_p():
    steps = {p: collective_cost("all_reduce", N, p, 1, CLUSTER, "tree").steps for p in (2, 3, 1024)}
    # double binary tree: 2 ceil(log2 p) steps -> 2, 4, 20
    assert steps == {2: 2, 3: 4, 1024: 20}
    assert steps[1024] / steps[2] == 10  # log2(1024) / log2(2)
    for e in range(1, 11):
        assert collective_cost("all_reduce", N, 2**e, 1, CLUSTER, "tree").steps == 2 * e
    # while the ring's steps grow linearly: 2(p-1) = 2046 at p = 1024
    assert collective_cost("all_reduce", N, 1024, 1, CLUSTER, "ring").steps == 2046


def test_tree_all_reduce_formula_inside_one_node():
    # p = 8 in a node: NCCL's tree is a chain there (src/graph/tuning.cc, ncclTopoTuneModel:
    # latency 2 ((nRanks/nNodes - 1) intraLat + log2i(nNodes) interLat), nNodes = 1):
    # 2 x 7 = 14 steps at 5 us, whole buffer up and down: 2n / beta
    c = collective_cost("all_reduce", N, 8, 8, CLUSTER, "tree")
    assert (c.steps, c.algorithm) == (14, "tree")
    assert c.latency_seconds == pytest.approx(14 * A_INTRA)
    assert c.bytes_sent_per_rank == pytest.approx(2 * N)
    assert c.bandwidth_seconds == pytest.approx(2 * N / BW_INTRA)


# Bekman, ml-engineering network/README.md ("Inter-node speed depends on intra-node speed"):
# all_reduce_bench.py on one P6-B200 node (8 B200, NVLink 5; torch 2.9.1, nccl 2.27.7), bus
# bandwidth in GB/s by payload in MiB
B200_ONE_NODE_BUSBW = {16: 254.96, 32: 325.97, 64: 400.60, 128: 568.38, 256: 646.11}


def test_a_node_times_mid_sized_all_reduces_on_its_ring():
    """With the chain inside a node, 16-256 MiB all-reduces on 8 B200s are timed on the ring:
    within 0.95-1.27 x of the measured bus bandwidth (a binary tree inside the node gave
    1.35-1.50 x at 16-64 MiB)."""
    cluster = Cluster(hardware=get_hardware("b200"), n_gpus=8)
    for mib, measured in B200_ONE_NODE_BUSBW.items():
        n = mib * 2**20
        c = collective_cost("all_reduce", n, 8, 8, cluster, "auto")
        busbw = n * 1.75 / c.seconds / 1e9
        assert c.algorithm == "ring"
        assert 0.95 < busbw / measured < 1.27, (mib, busbw / measured)


# ---- seed 004, B-walls: 128 replicas x 700 GB fp32 gradients = 89.6 TB per iteration ---------
def test_B_walls_gradient_bytes_per_iteration():
    # GPT-3: 175e9 params x 4 bytes (fp32) = 700 GB per replica; x 128 replicas = 89.6 TB
    assert data_parallel_gradient_bytes_per_iteration(175e9, 4, 1) == pytest.approx(700 * GB)
    assert data_parallel_gradient_bytes_per_iteration(175e9, 4, 128) == pytest.approx(89.6 * TB)


def test_ring_all_reduce_wire_bytes():
    # p ranks x 2(p-1)/p x n = 2(p-1) n: for the B-walls case 2 x 127 x 700 GB = 177.8 TB
    assert ring_all_reduce_wire_bytes(700 * GB, 128) == pytest.approx(177.8 * TB)
    assert ring_all_reduce_wire_bytes(N, 1) == 0
    for p in (2, 8, 100):
        per_rank = collective_cost("all_reduce", N, p, 1, CLUSTER).bytes_sent_per_rank
        assert ring_all_reduce_wire_bytes(N, p) == pytest.approx(p * per_rank)


# ---- identities and limits ----------------------------------------------------------------------
@pytest.mark.parametrize(("p", "k"), [(2, 1), (8, 8), (16, 8), (64, 8), (64, 1), (12, 4)])
def test_reduce_scatter_plus_all_gather_is_all_reduce(p, k):
    # Ring all-reduce = reduce-scatter then all-gather (Thakur et al. 2005, sec. 4.4): equal bytes
    # and bandwidth time. Their latencies differ across nodes: the gathers take NCCL's flat ring
    # (p - 1 steps: NCCL has no tree for them), the all-reduce its two-level schedule.
    ar = collective_cost("all_reduce", N, p, k, CLUSTER, "ring")
    rs = collective_cost("reduce_scatter", N, p, k, CLUSTER)
    ag = collective_cost("all_gather", N, p, k, CLUSTER)
    assert rs.bytes_sent_per_rank + ag.bytes_sent_per_rank == pytest.approx(ar.bytes_sent_per_rank)
    assert rs.bandwidth_seconds + ag.bandwidth_seconds == pytest.approx(ar.bandwidth_seconds)
    assert rs.steps == ag.steps == p - 1
    if k in (1, p):  # one node, or one rank per node: the flat ring is the two-level one
        assert rs.steps + ag.steps == ar.steps
        assert rs.seconds + ag.seconds == pytest.approx(ar.seconds)
    # and the two-level schedule moves exactly as many bytes per rank as a flat ring
    assert ar.bytes_sent_per_rank == pytest.approx(2 * (p - 1) / p * N)


def test_alpha_only_limit_for_a_tiny_message():
    # 1 byte on 8 NVLink-connected GPUs: 2 x 7 steps x 5 us = 70 us; the beta term is ~5e-12 s
    c = collective_cost("all_reduce", 1, 8, 8, CLUSTER)
    assert c.seconds == pytest.approx(14 * A_INTRA, rel=1e-6)
    assert c.bandwidth_seconds < 1e-7 * c.seconds


def test_beta_only_limit_for_a_huge_message():
    # 1 TB on 8 GPUs: 2 x 7/8 x 1e12 / 360e9 = 4.861 s; the 70 us latency is < 2e-5 of it
    c = collective_cost("all_reduce", 1 * TB, 8, 8, CLUSTER)
    assert c.seconds == pytest.approx(1.75 * TB / BW_INTRA, rel=2e-5)
    assert c.seconds == pytest.approx(4.8611, rel=1e-4)


def test_all_to_all_send_recv_and_broadcast_formulas():
    # all-to-all in one node, pairwise: (p-1) alpha + (p-1)/p n / beta = 7 x 5 us + 7/8 n / 360e9
    a2a = collective_cost("all_to_all", N, 8, 8, CLUSTER)
    assert (a2a.steps, a2a.algorithm) == (7, "pairwise")
    assert a2a.seconds == pytest.approx(7 * A_INTRA + 7 / 8 * N / BW_INTRA)
    # send/recv: alpha + n / beta, over NVLink inside a node, over the NIC across nodes
    p2p = collective_cost("send_recv", N, 2, 2, CLUSTER)
    assert (p2p.steps, p2p.algorithm) == (1, "direct")
    assert p2p.seconds == pytest.approx(A_INTRA + N / BW_INTRA)
    assert collective_cost("send_recv", N, 2, 1, CLUSTER).seconds == pytest.approx(
        A_INTER + N / BW_INTER
    )
    # broadcast, pipelined: tree ceil(log2 p) alpha + n / beta; chain (ring) (p-1) alpha + n / beta
    tree = collective_cost("broadcast", N, 5, 1, CLUSTER, "tree")
    ring = collective_cost("broadcast", N, 5, 1, CLUSTER, "ring")
    assert (tree.steps, ring.steps) == (3, 4)
    assert tree.seconds == pytest.approx(3 * A_INTER + N / BW_INTER)
    assert ring.seconds == pytest.approx(4 * A_INTER + N / BW_INTER)


# ---- hierarchy ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_group_inside_one_node_uses_only_intra_node_links(kind):
    # Slower NICs and latencies must not change a group that never leaves its node.
    slow_inter = Cluster(hardware=get_hardware("h100-pcie"), n_gpus=1024)  # PCIe intra-node
    assert slow_inter.inter_node_bytes_per_second == CLUSTER.inter_node_bytes_per_second
    worse_nics = Cluster(hardware=H100, n_gpus=1024, inter_node_latency_seconds=1.0)
    for algorithm in ALGORITHMS:
        base = collective_cost(kind, N, 8, 8, CLUSTER, algorithm)
        assert collective_cost(kind, N, 8, 8, worse_nics, algorithm) == base
        assert base.latency_seconds == pytest.approx(base.steps * A_INTRA)
        assert base.bandwidth_seconds == pytest.approx(base.bytes_sent_per_rank / BW_INTRA)


def test_eight_gpu_ring_all_reduce_in_a_node():
    # 2 x 7 x 5 us + 2 x 7/8 x 1 GB / 360 GB/s = 70 us + 4.8611 ms
    c = collective_cost("all_reduce", N, 8, 8, CLUSTER)
    assert c.seconds == pytest.approx(70e-6 + 4.8611e-3, rel=1e-4)


def test_one_gpu_per_node_uses_only_inter_node_links():
    for kind in KINDS:
        c = collective_cost(kind, N, 4, 1, CLUSTER)
        assert c.latency_seconds == pytest.approx(c.steps * A_INTER)
        assert c.bandwidth_seconds == pytest.approx(c.bytes_sent_per_rank / BW_INTER)


def test_two_level_all_reduce_formula():
    # 16 GPUs, 8 per node: intra reduce-scatter (7 steps, 7/8 n) + inter ring all-reduce over 2
    # nodes on n/8 (2 steps, 2 x 1/2 x n/8) + intra all-gather (7 steps, 7/8 n)
    c = collective_cost("all_reduce", N, 16, 8, CLUSTER)
    assert c.steps == 7 + 2 + 7
    assert c.latency_seconds == pytest.approx(14 * A_INTRA + 2 * A_INTER)
    assert c.bandwidth_seconds == pytest.approx(1.75 * N / BW_INTRA + N / 8 / BW_INTER)
    # all-to-all: 7 node-mates at intra, 8 remote peers at inter, n/16 to each
    a2a = collective_cost("all_to_all", N, 16, 8, CLUSTER)
    assert a2a.latency_seconds == pytest.approx(7 * A_INTRA + 8 * A_INTER)
    assert a2a.bandwidth_seconds == pytest.approx(7 / 16 * N / BW_INTRA + 8 / 16 * N / BW_INTER)


@pytest.mark.parametrize("kind", KINDS)
def test_spanning_two_nodes_is_slower_than_one_big_node(kind):
    # 16 GPUs as 2 x 8 vs the same 16 in one hypothetical 16-GPU NVLink node
    big_node = Cluster(hardware=H100, n_gpus=16, gpus_per_node=16)
    two_nodes = Cluster(hardware=H100, n_gpus=16)
    for algorithm in ALGORITHMS:
        split = collective_cost(kind, N, 16, 8, two_nodes, algorithm).seconds
        whole = collective_cost(kind, N, 16, 16, big_node, algorithm).seconds
        assert split > whole


def test_link_efficiency_scales_the_bandwidth_term():
    half = Cluster(hardware=H100, n_gpus=1024, link_efficiency=0.4)
    for kind in KINDS:
        assert collective_cost(kind, N, 64, 8, half).bandwidth_seconds == pytest.approx(
            2 * collective_cost(kind, N, 64, 8, CLUSTER).bandwidth_seconds
        )


# ---- auto ---------------------------------------------------------------------------------------
# Tree beats ring while its fewer alpha steps outweigh its extra bytes (2n vs 2(p-1)/p n on the
# cross-node phase). Crossover n* where (ring steps - tree steps) x alpha = extra bytes / beta:
# - 32 ranks, one per node: (62 - 10) x 10 us = 2 n / (32 x 40 GB/s)  ->  n* = 332.8 MB
# - 64 ranks, 8 per node (8 nodes, n/8 per NIC): (14 - 6) x 10 us = n/32 / 40 GB/s  ->  102.4 MB
# - 1024 ranks, one per node: 1024 x (1023 - 10) x 10 us x 40 GB/s = 414.9 GB (the tree wins
#   almost always at that scale, as NCCL's tree does on large jobs)
@pytest.mark.parametrize(
    ("p", "k", "crossover_bytes"),
    [(32, 1, 332.8 * MB), (64, 8, 102.4 * MB), (1024, 1, 414.9 * GB)],
)
def test_auto_picks_tree_for_tiny_messages_and_ring_for_large(p, k, crossover_bytes):
    def auto(n):
        return collective_cost("all_reduce", n, p, k, CLUSTER, "auto")

    assert auto(1024).algorithm == "tree"  # 1 KB: latency-bound
    assert auto(1024) == collective_cost("all_reduce", 1024, p, k, CLUSTER, "tree")
    assert auto(0.99 * crossover_bytes).algorithm == "tree"
    assert auto(1.01 * crossover_bytes).algorithm == "ring"
    huge = 100 * crossover_bytes  # bandwidth-bound
    assert auto(huge) == collective_cost("all_reduce", huge, p, k, CLUSTER, "ring")


def test_ring_wins_at_every_size_on_two_ranks_and_large_messages_on_two_nodes():
    # p = 2: same 2 steps, ring sends n and the tree 2n. 2 nodes x 8: same 14 + 2 steps, the
    # ring's cross-node phase sends n/8 and the tree's 2n/8.
    for n in (1, 1024, N):
        assert collective_cost("all_reduce", n, 2, 1, CLUSTER, "auto").algorithm == "ring"
        assert collective_cost("all_reduce", n, 16, 8, CLUSTER, "auto").algorithm == "ring"
    # and inside one node the tree is a chain: as many steps as the ring, twice its bytes
    for p in (3, 8):
        assert collective_cost("all_reduce", 1, p, p, CLUSTER, "auto").algorithm == "ring"


def test_auto_is_never_slower_than_either_choice():
    for kind in KINDS:
        for p, k in ((2, 1), (8, 8), (64, 8), (512, 1)):
            for n in (1, 64 * 1024, 64 * MB, 4 * GB):
                auto = collective_seconds(kind, n, p, k, CLUSTER, "auto")
                ring = collective_seconds(kind, n, p, k, CLUSTER, "ring")
                tree = collective_seconds(kind, n, p, k, CLUSTER, "tree")
                assert auto == min(ring, tree)


def test_single_algorithm_kinds_ignore_the_choice():
    single = {"all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "pairwise"}
    for kind, name in (*single.items(), ("send_recv", "direct")):
        costs = {collective_cost(kind, N, 16, 8, CLUSTER, a) for a in ALGORITHMS}
        assert len(costs) == 1 and costs.pop().algorithm == name


# ---- free cases, monotonicity, fast path ---------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_group_of_one_or_empty_buffer_costs_nothing(kind):
    for algorithm in ALGORITHMS:
        for cost in (
            collective_cost(kind, N, 1, 1, CLUSTER, algorithm),
            collective_cost(kind, 0, 64, 8, CLUSTER, algorithm),
        ):
            assert cost == CollectiveCost(0.0, 0.0, 0.0, 0.0, 0, "none")
        assert collective_seconds(kind, N, 1, 1, CLUSTER, algorithm) == 0.0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_monotonic_in_bytes_and_group_size(kind, algorithm):
    sizes = [0, 1, 1000, 1 * MB, 100 * MB, 1 * GB, 10 * GB]
    times = [collective_seconds(kind, n, 64, 8, CLUSTER, algorithm) for n in sizes]
    assert times == sorted(times) and times[-1] > times[1] > 0
    groups = [1, 2, 4, 8, 16, 32, 64, 128, 512, 1024]  # 8 per node once a node is full
    times = [collective_seconds(kind, N, p, min(p, 8), CLUSTER, algorithm) for p in groups]
    assert times == sorted(times)
    flat = [collective_seconds(kind, N, p, 1, CLUSTER, algorithm) for p in range(1, 40)]
    assert flat == sorted(flat)


def test_collective_seconds_matches_collective_cost():
    for kind in KINDS:
        for algorithm in ALGORITHMS:
            for p, k in ((1, 1), (2, 2), (24, 8), (96, 4)):
                c = collective_cost(kind, 3 * MB, p, k, CLUSTER, algorithm)
                assert collective_seconds(kind, 3 * MB, p, k, CLUSTER, algorithm) == c.seconds
                assert c.seconds == c.latency_seconds + c.bandwidth_seconds


# ---- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("allreduce", N, 8, 8), "kind"),
        ((["all_reduce"], N, 8, 8), "kind"),
        (("all_reduce", -1, 8, 8), "n_bytes"),
        (("all_reduce", math.nan, 8, 8), "n_bytes"),
        (("all_reduce", N, 0, 1), "group_size"),
        (("all_reduce", N, 2.0, 1), "group_size"),
        (("all_reduce", N, True, 1), "group_size"),
        (("all_reduce", N, 8, 3), "per_node"),
        (("all_reduce", N, 8, 0), "per_node"),
        (("all_reduce", N, 32, 16), "per_node"),  # 16 > the 8 GPUs of an H100 node
    ],
)
def test_bad_input_names_the_field(args, field):
    with pytest.raises(SpecError) as err:
        collective_cost(*args, CLUSTER)
    assert err.value.field == field
    with pytest.raises(SpecError):
        collective_seconds(*args, CLUSTER)


def test_unknown_kind_and_algorithm_list_the_choices():
    with pytest.raises(SpecError, match="all_gather, all_reduce, all_to_all") as err:
        collective_cost("gather", N, 8, 8, CLUSTER)
    assert err.value.field == "kind"
    with pytest.raises(SpecError, match="auto, ring, tree") as err:
        collective_cost("all_reduce", N, 8, 8, CLUSTER, "rabenseifner")
    assert err.value.field == "algorithm"


def test_byte_accounting_helpers_reject_bad_input():
    for args, field in (
        ((-1, 4, 128), "n_params"),
        ((175e9, -4, 128), "bytes_per_grad"),
        ((175e9, 4, 0), "replicas"),
    ):
        with pytest.raises(SpecError) as err:
            data_parallel_gradient_bytes_per_iteration(*args)
        assert err.value.field == field
    with pytest.raises(SpecError):
        ring_all_reduce_wire_bytes(-1, 8)
    with pytest.raises(SpecError):
        ring_all_reduce_wire_bytes(N, 0)


def test_gather_latency_is_nccls_flat_ring():
    # NCCL times a ring all-gather / reduce-scatter as nRanks - 1 steps, nNodes - 1 of them
    # through the NIC (src/graph/tuning.cc, ncclTopoTuneModel): 64 ranks on 8 nodes take
    # 56 NVLink steps and 7 network ones, so the latency grows with the ranks, not the nodes
    for kind in ("all_gather", "reduce_scatter"):
        c = collective_cost(kind, N, 64, 8, CLUSTER)
        assert c.steps == 63
        assert c.latency_seconds == pytest.approx(56 * A_INTRA + 7 * A_INTER)
