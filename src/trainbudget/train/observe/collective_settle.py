"""Collectives whose tensors die when the program drops them, for the measured CPU step
(train.observe.rank_memory).

gloo runs a collective on a worker thread of its own, and that thread keeps its reference to
the finished work -- the work holds the collective's input and output tensors -- until it takes
the process group's lock again: a moment the operating system picks. When the program has
already dropped its references (FSDP2's flat all-gather buffer once copied out, its
reduce-scatter input), the storage then dies on gloo's thread, later than the program freed
it, and MemTracker counts it alive meanwhile. On the shared 2-core CI machine that happened on
one run in four under load: rank 0 of `fsdp` measured 604,736 bytes instead of 570,560 (+6.3 %
against the plan instead of +0.3 %), the extra 34,176 bytes a block's all-gather output freed
on gloo's thread (observed with MemTracker's delete callbacks, 2026-11-23).

Inside `settled_collectives()`, torch.distributed's all-gather, reduce-scatter and all-reduce
(the collectives FSDP2 issues from Python) run to completion and then wait until every other
holder of their tensors (gloo's worker) has let go -- `Tensor._use_count()` back to what it was
before the call -- so each tensor dies on the program's own thread, when the program drops it,
as on CUDA, where the caching allocator frees a block at the program's `del`. A caller that
asked for `async_op=True` gets a work already done, whose future holds the collective's output
as gloo's does (`[tensor]`: DDP's all-reduce hook reads it, FSDP2 waits on it). No tensor is
copied and the order of operations is unchanged: what the step allocates, and when, is the same.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

NAMES = (
    "all_gather_single",
    "all_gather_into_tensor",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "all_reduce",
)
"""The collectives made to settle (those of them this torch has)."""
RELEASE_WAIT_SECONDS = 5.0
"""How long a finished collective waits for gloo's worker to let go of its tensors (it takes
microseconds; a worker starved for longer leaves the tensors to die late, as without this)."""


def _await_release(tensors: list[torch.Tensor], counts: list[int]) -> None:
    """Until each tensor's reference count is back to `counts`, or RELEASE_WAIT_SECONDS."""
    deadline = time.monotonic() + RELEASE_WAIT_SECONDS
    while any(t._use_count() > n for t, n in zip(tensors, counts, strict=True)):
        if time.monotonic() > deadline:
            return
        time.sleep(0.0001)  # the worker needs the core, not the GIL


def _settling(collective: Callable) -> Callable:
    """`collective`, run to completion, returning once gloo has let go of its tensors."""
    signature = inspect.signature(collective)

    @functools.wraps(collective)
    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        asked_async = bool(bound.arguments["async_op"])
        bound.arguments["async_op"] = True  # a handle to wait on, dropped before the wait below
        tensors = [v for v in bound.arguments.values() if isinstance(v, torch.Tensor)]
        counts = [t._use_count() for t in tensors]
        work = collective(*bound.args, **bound.kwargs)
        if work is not None:
            work.wait()
            del work
        _await_release(tensors, counts)
        return _done(tensors[0]) if asked_async and tensors else None

    return call


def _done(output: torch.Tensor):
    """A c10d work already done, its future's value `[output]` as gloo's work gives it."""
    future = torch.futures.Future()
    future.set_result([output])
    return _create_work_from_future(future)


@contextlib.contextmanager
def settled_collectives() -> Iterator[None]:
    """Within: torch.distributed's NAMES settle (see the module docstring); restored after."""
    originals = {name: getattr(dist, name) for name in NAMES if hasattr(dist, name)}
    try:
        for name, collective in originals.items():
            setattr(dist, name, _settling(collective))
        yield
    finally:
        for name, collective in originals.items():
            setattr(dist, name, collective)
