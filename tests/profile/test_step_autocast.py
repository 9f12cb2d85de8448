"""The profiler runs the trainer's step for the amp-* policies: forward and loss inside the
trainer's torch.autocast (model.optim.mixed_precision), backward and the optimizer step outside,
in each path that runs a step (memory, whole-step timing, phase timing). FLOPs are counted
without autocast, which changes no matmul's shape."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    # the embedding's input (token ids) needs no gradient, which torch warns of
    pytest.mark.filterwarnings("ignore:Full backward hook is firing"),
]

from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.profile.flops import measure_flops  # noqa: E402
from trainbudget.profile.memory import (  # noqa: E402
    measure_step_memory,
    step_autocast,
    time_steps,
)
from trainbudget.profile.phases import time_phases  # noqa: E402

TINY = ("n_layers=1", "d_model=64", "n_heads=2", "d_ff=256", "vocab_size=512")
SPEC = resolve_model("gpt2", TINY)
STEP = {"micro_batch": 2, "seq_len": 16, "optimizer": "sgd"}
RUNS = {
    "memory": lambda precision: measure_step_memory(SPEC, precision=precision, **STEP),
    "steps": lambda precision: time_steps(SPEC, precision=precision, steps=1, warmup=0, **STEP),
    "phases": lambda precision: time_phases(SPEC, precision=precision, steps=1, warmup=0, **STEP),
}


@contextlib.contextmanager
def autocast_seen():
    """(forward, backward): the cpu autocast dtype (None: off) at every module's forward and
    at every module's backward, recorded by global module hooks."""
    forward: list = []
    backward: list = []

    def state():
        on = torch.is_autocast_enabled("cpu")
        return torch.get_autocast_dtype("cpu") if on else None

    hooks = [
        torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, output: forward.append(state())
        ),
        torch.nn.modules.module.register_module_full_backward_hook(
            lambda module, grad_in, grad_out: backward.append(state())
        ),
    ]
    try:
        yield forward, backward
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize(
    ("precision", "dtype"), [("amp-bf16", torch.bfloat16), ("amp-fp16", torch.float16)]
)
def test_amp_forward_runs_under_autocast_and_backward_outside(run, precision, dtype):
    with autocast_seen() as (forward, backward):
        RUNS[run](precision)
    assert forward and set(forward) == {dtype}
    assert backward and set(backward) == {None}


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_other_policies_run_without_autocast(run, precision):
    with autocast_seen() as (forward, backward):
        RUNS[run](precision)
    assert forward and set(forward) == {None}
    assert backward and set(backward) == {None}


def test_step_autocast_is_the_trainers_context():
    for device in ("cpu", "fake-cpu"):
        with step_autocast("amp-bf16", device):
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
            assert torch.is_autocast_enabled("cpu")
        with step_autocast("fp32", device):
            assert not torch.is_autocast_enabled("cpu")


def test_autocast_changes_no_flop_count():
    plain = measure_flops(SPEC, micro_batch=2, seq_len=16, device="cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = measure_flops(SPEC, micro_batch=2, seq_len=16, device="cpu")
    assert (amp.forward, amp.backward) == (plain.forward, plain.backward) != (0, 0)
    assert amp.forward_parts == plain.forward_parts
