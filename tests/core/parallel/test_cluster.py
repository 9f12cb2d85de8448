"""Cluster: defaults from the hardware row, validation that names the field, achieved bandwidth."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import (
    DEFAULT_INTER_NODE_LATENCY_SECONDS,
    DEFAULT_INTRA_NODE_LATENCY_SECONDS,
    DEFAULT_LINK_EFFICIENCY,
    Cluster,
)
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.units import GB

H100 = get_hardware("h100-sxm")  # DGX H100: 8 GPUs per node, NVLink 450 GB/s, NDR 50 GB/s
TPU_V5P = get_hardware("tpu-v5p")  # 4 chips per host


def test_gpus_per_node_defaults_to_the_hardware_platform():
    assert Cluster(hardware=H100, n_gpus=64).gpus_per_node == H100.gpus_per_node == 8
    assert Cluster(hardware=TPU_V5P, n_gpus=16).gpus_per_node == TPU_V5P.gpus_per_node == 4


def test_explicit_gpus_per_node_wins_over_the_hardware_row():
    c = Cluster(hardware=H100, n_gpus=64, gpus_per_node=4)
    assert c.gpus_per_node == 4
    assert c.n_nodes == 16  # 64 / 4


def test_other_defaults():
    c = Cluster(hardware=H100, n_gpus=8)
    assert c.link_efficiency == DEFAULT_LINK_EFFICIENCY == 0.8
    assert c.intra_node_latency_seconds == DEFAULT_INTRA_NODE_LATENCY_SECONDS == 5e-6
    assert c.inter_node_latency_seconds == DEFAULT_INTER_NODE_LATENCY_SECONDS == 10e-6
    assert c.price_per_gpu_hour is None


@pytest.mark.parametrize(
    ("n_gpus", "nodes"),
    [(1, 1), (3, 1), (8, 1), (16, 2), (64, 8), (1024, 128)],  # a partial node counts as one
)
def test_n_nodes(n_gpus, nodes):
    assert Cluster(hardware=H100, n_gpus=n_gpus).n_nodes == nodes


def test_fewer_gpus_than_a_node_is_allowed():
    # one partial node: nothing to be a multiple of
    for n in range(1, 9):
        assert Cluster(hardware=H100, n_gpus=n).n_gpus == n


def test_achieved_bandwidth_is_nominal_times_efficiency():
    c = Cluster(hardware=H100, n_gpus=16)
    # 450 GB/s NVLink 4 x 0.8 = 360 GB/s; 400 Gb/s NDR = 50 GB/s x 0.8 = 40 GB/s
    assert c.intra_node_bytes_per_second == pytest.approx(360 * GB)
    assert c.inter_node_bytes_per_second == pytest.approx(40 * GB)
    for eff in (0.25, 0.5, 1.0):
        c = Cluster(hardware=H100, n_gpus=16, link_efficiency=eff)
        assert c.intra_node_bytes_per_second == pytest.approx(
            H100.intra_node_bytes_per_second * eff
        )
        assert c.inter_node_bytes_per_second == pytest.approx(
            H100.inter_node_bytes_per_second * eff
        )


def test_efficiency_one_is_the_datasheet():
    c = Cluster(hardware=H100, n_gpus=8, link_efficiency=1)
    assert c.intra_node_bytes_per_second == H100.intra_node_bytes_per_second


def _field(**kw) -> str:
    with pytest.raises(SpecError) as info:
        Cluster(hardware=H100, **kw)
    return info.value.field


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        # 12 GPUs on 8-GPU nodes: one full node and half of another
        ({"n_gpus": 12}, "gpus"),
        ({"n_gpus": 20}, "gpus"),
        ({"n_gpus": 16, "gpus_per_node": 3}, "gpus"),
        ({"n_gpus": 0}, "gpus"),
        ({"n_gpus": -8}, "gpus"),
        ({"n_gpus": 8.0}, "gpus"),
        ({"n_gpus": True}, "gpus"),
        ({"n_gpus": 8, "gpus_per_node": -1}, "gpus_per_node"),
        ({"n_gpus": 8, "link_efficiency": 0}, "link_efficiency"),
        ({"n_gpus": 8, "link_efficiency": 1.5}, "link_efficiency"),
        ({"n_gpus": 8, "link_efficiency": -0.1}, "link_efficiency"),
        ({"n_gpus": 8, "intra_node_latency_seconds": -1e-6}, "intra_node_latency_seconds"),
        ({"n_gpus": 8, "inter_node_latency_seconds": -1e-6}, "inter_node_latency_seconds"),
        ({"n_gpus": 8, "pcie_bytes_per_second": 0}, "pcie_bytes_per_second"),
        ({"n_gpus": 8, "nvme_bytes_per_second": -1}, "nvme_bytes_per_second"),
    ],
)
def test_validation_names_the_field(kw, field):
    assert _field(**kw) == field


def test_multiple_of_node_message_names_the_node_size():
    with pytest.raises(SpecError, match=r"multiple of gpus_per_node \(8\)"):
        Cluster(hardware=H100, n_gpus=12)


def test_zero_latency_is_allowed():
    c = Cluster(
        hardware=H100, n_gpus=16, intra_node_latency_seconds=0, inter_node_latency_seconds=0
    )
    assert c.intra_node_latency_seconds == c.inter_node_latency_seconds == 0


def test_cluster_is_frozen():
    c = Cluster(hardware=H100, n_gpus=8)
    with pytest.raises(AttributeError):
        c.n_gpus = 16  # type: ignore[misc]
