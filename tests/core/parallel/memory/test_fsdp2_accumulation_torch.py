"""What torch's FSDP2 keeps of a gradient accumulated without sync, checked in torch itself:
the fact `core.spec.engines.Engine.accumulates_in_reduce_dtype` records for the FSDP2 engines.
One process, a one-rank gloo mesh, run in a child so this process keeps no process group."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

_CHILD = """
import sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
for reduce in (torch.float32, torch.bfloat16):
    lin = torch.nn.Linear(8, 16, bias=False).to(torch.bfloat16)  # (out, in) = (16, 8)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
    fully_shard(lin, mesh=mesh, mp_policy=policy)
    lin.set_requires_gradient_sync(False)
    for _ in range(2):  # two micro-batches, no reduction
        lin(torch.randn(4, 8, dtype=torch.bfloat16)).sum().backward()
    (p,) = lin._get_fsdp_state()._fsdp_param_group.fsdp_params
    acc, grad = p.unsharded_accumulated_grad, p._unsharded_param.grad
    kept = acc if acc is not None else grad
    print(str(reduce).rsplit(".")[-1], str(kept.dtype).rsplit(".")[-1], *kept.shape)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2_accumulates_the_unsharded_gradient_in_its_reduce_dtype():
    init = f"tcp://127.0.0.1:{_free_port()}"
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, init], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # fp32 reduce over bf16 compute: an fp32 copy of the whole (16, 8) gradient; a reduce
    # dtype equal to param_dtype is dropped (init_dtype_attrs), so .grad stays bf16
    assert out.stdout.split("\n")[:2] == ["float32 float32 16 8", "bfloat16 bfloat16 16 8"]
