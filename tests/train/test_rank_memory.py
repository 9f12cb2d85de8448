"""train/rank_memory.py in one process: the optimizer-state bytes summary.json reports count the
per-parameter state tensors (AdamW's two moments, not its scalar step; nothing for plain SGD)
and keep bf16-mixed's fp32 masters apart, as the core's ModelState does; the CPU peak meter
measures the second step it wraps and only that one. (Sharded optimizers, FSDP2's DTensors and
ZeroRedundancyOptimizer, are measured under torchrun in tests/train/test_parallelize.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainbudget.model.optim import MasterWeightOptimizer  # noqa: E402
from trainbudget.model.optimizers import build_optimizer  # noqa: E402
from trainbudget.train.distributed import DistInfo  # noqa: E402
from trainbudget.train.rank_memory import (  # noqa: E402
    CPU_PEAK_METHOD,
    PeakMeter,
    gather_records,
    master_weight_bytes,
    optimizer_state_bytes,
    rank_record,
)

pytestmark = pytest.mark.torch

N_PARAMS = 4 * 3 + 3 + 3 * 2 + 2  # two Linear layers' weights and biases: 23


def model(dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(dtype)


def step(net: torch.nn.Module, optimizer, micro_batches: int = 1) -> None:
    x = torch.ones(5, 4, dtype=next(net.parameters()).dtype)
    for _ in range(micro_batches):  # gradient accumulation: one forward of net per micro-batch
        net(x).float().square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize(("name", "states"), [("adamw", 2), ("momentum", 1), ("sgd", 0)])
def test_optimizer_state_is_the_per_parameter_tensors(name, states):
    net = model()
    optimizer = build_optimizer(name, net.parameters(), lr=1e-2)
    assert optimizer_state_bytes(optimizer) == 0  # created at the first step
    step(net, optimizer)
    assert optimizer_state_bytes(optimizer) == N_PARAMS * states * 4  # fp32
    assert master_weight_bytes(optimizer) == 0


def test_master_weights_are_counted_apart():
    net = model(torch.bfloat16)
    optimizer = MasterWeightOptimizer(net, "adamw", 1e-2)
    step(net, optimizer)
    assert optimizer_state_bytes(optimizer) == N_PARAMS * 2 * 4  # fp32 moments of the masters
    assert master_weight_bytes(optimizer) == N_PARAMS * 4


def test_the_cpu_meter_measures_the_second_step_it_wraps():
    net = model()
    optimizer = build_optimizer("adamw", net.parameters(), lr=1e-2)
    meter = PeakMeter(torch.device("cpu"), tracked=True)
    with meter.step(net, optimizer):  # the first step: its update creates the state
        step(net, optimizer)
    assert meter.peak() == (None, None)
    with meter.step(net, optimizer):
        step(net, optimizer, micro_batches=2)  # two forwards of the model in one tracked step
    peak, method = meter.peak()
    assert method == CPU_PEAK_METHOD
    # at least the weights, gradients and moments, all alive at the update
    assert peak >= N_PARAMS * 4 * 4
    with meter.step(net, optimizer):  # later steps run untracked
        step(net, optimizer)
    assert meter.peak() == (peak, method)
    untracked = PeakMeter(torch.device("cpu"), tracked=False)
    with untracked.step(net, optimizer):
        step(net, optimizer)
    assert untracked.peak() == (None, None)
    record = rank_record(DistInfo(0, 0, 1), optimizer, meter)
    assert gather_records(record, DistInfo(0, 0, 1)) == [record]
    assert record["optimizer_state"] == N_PARAMS * 2 * 4 and record["peak"] == peak
