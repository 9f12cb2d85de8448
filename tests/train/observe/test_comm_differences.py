"""The named differences' helpers (train.observe.comm_differences): the mesh axis of each core
collective category, and the bytes FSDP2's padding adds. The differences themselves are checked
through the report they explain (test_comm_report.py)."""

from __future__ import annotations

from trainbudget.train.observe.comm_differences import mesh_axis, padded_ratio

# a 257-row embedding of width 32 and a 32-wide norm, fp32: 257 rows pad to 258 on 2 ranks
SHAPES = (((257, 32), 4), ((32,), 4))


def test_mesh_axes():
    assert mesh_axis("dp_grad_reduce", {"dp": 4}) == "dp"
    assert mesh_axis("dp_param_gather", {"dp_replicate": 2, "dp_shard": 2}) == "dp_shard"
    assert mesh_axis("dp_replica_all_reduce", {"dp_replicate": 2, "dp_shard": 2}) == "dp_replicate"
    assert mesh_axis("tp", {"dp": 2, "tp": 2}) == "tp"


def test_padded_ratio():
    assert padded_ratio(SHAPES, 1) == 1.0
    assert padded_ratio(SHAPES, 2) == (258 * 32 + 32) / (257 * 32 + 32)
    assert padded_ratio(SHAPES, 4) == (260 * 32 + 32) / (257 * 32 + 32)
    assert padded_ratio((((), 4),), 2) == 2.0  # a scalar: one row, padded to two
