"""train/observe/collective_settle.py on a one-process gloo group: inside `settled_collectives()`
the collectives FSDP2 issues return only once gloo's worker thread has let go of their tensors
(each tensor's reference count back to what it was before the call), give the same results,
answer an `async_op=True` caller with a work already done whose future holds the output (DDP's
all-reduce hook reads it; FSDP2 waits on it), and are torch's own again outside. (Why: a
block's all-gather buffer freed on gloo's thread after the program dropped it made rank 0 of an
fsdp run measure +6.3 % instead of +0.3 % on loaded machines;
tests/train/observe/test_rank_memory.py holds every strategy to 3 %.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from trainbudget.train.observe.collective_settle import NAMES, settled_collectives  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def gloo(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed with gloo, not yet initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_collectives_are_wrapped_inside_and_torchs_own_outside():
    originals = {name: getattr(dist, name) for name in NAMES if hasattr(dist, name)}
    assert "all_reduce" in originals  # at least the all-reduce exists in every torch
    with settled_collectives():
        assert all(getattr(dist, name) is not fn for name, fn in originals.items())
    assert all(getattr(dist, name) is fn for name, fn in originals.items())
    with pytest.raises(RuntimeError), settled_collectives():
        raise RuntimeError("restored on the way out of an exception too")
    assert all(getattr(dist, name) is fn for name, fn in originals.items())


@pytest.mark.parametrize("async_op", [False, True])
def test_a_settled_collective_returns_done_and_lets_go_of_its_tensors(gloo, async_op):
    data = torch.arange(6, dtype=torch.float32)
    before = data._use_count()
    with settled_collectives():
        # FSDP2's all-gather: all_gather_single where torch has it (2.13), else the older name
        all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = dist.all_reduce(data, async_op=async_op)
        if async_op:  # done already, its future's value the output, as gloo's work gives it
            assert work.is_completed() and work.wait()
            (value,) = work.get_future().value()
            assert value is data
            del work, value
        else:
            assert work is None
        # no other holder left: gloo's worker has dropped the finished work
        assert data._use_count() == before
        gathered = torch.empty(6)
        work = all_gather(gathered, data, async_op=async_op)
        assert (work is not None) == async_op
        del work
        assert gathered._use_count() == 1 and data._use_count() == before
    assert torch.equal(data, torch.arange(6, dtype=torch.float32))  # a sum over one rank
    assert torch.equal(gathered, data)


def test_ddps_all_reduce_hook_runs_on_a_settled_all_reduce(gloo):
    """DDP's Python communication hook (torch's default_hooks.allreduce_hook, the trainer's
    path while it counts collectives) chains on the all-reduce's future: it must get one,
    holding the reduced tensor."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    ddp = DistributedDataParallel(torch.nn.Linear(3, 2))
    ddp.module.load_state_dict(net.state_dict())
    ddp.register_comm_hook(None, allreduce_hook)
    x = torch.ones(5, 3)
    with settled_collectives():
        ddp(x).square().sum().backward()
    net(x).square().sum().backward()
    for mine, reference in zip(ddp.module.parameters(), net.parameters(), strict=True):
        assert torch.equal(mine.grad, reference.grad)  # one rank: the sum is the gradient
