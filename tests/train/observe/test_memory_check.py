"""train.observe.memory_check: the refusal and its advice, with made-up amounts of free memory (the
check's arithmetic, not this machine's), and where the free memory is read from."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.units import GB, KiB
from trainbudget.train.observe import memory_check
from trainbudget.train.observe.accounting import run_plan
from trainbudget.train.observe.memory_check import (
    Available,
    Step,
    check_memory,
    check_run,
    what_fits,
)
from trainbudget.train.spec.config import TrainConfig

DEFAULT = resolve_model("gpt2", TrainConfig().overrides)  # the trainer's 1M-parameter default


def step_of(spec=DEFAULT, *, micro_batch=16, grad_accum=1, recompute="none", world_size=1):
    plan = run_plan(
        "fsdp" if world_size > 1 else "ddp",
        world_size=world_size,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        recompute=recompute,
    )
    return Step(spec=spec, plan=plan, precision="fp32", optimizer="adamw", seq_len=128)


def apply(step: Step, flags: str) -> Step:
    """`step` changed as the suggested train flags say."""
    words = flags.split()
    spec, plan = step.spec, step.plan
    for name, value in zip(words[::2], words[1::2], strict=True):
        if name == "--model":
            spec = resolve_model(value)
        elif name == "--set":
            key, number = value.split("=")
            spec = spec.replace(**{key: int(number)})
        else:
            field = name[2:].replace("-", "_")
            plan = dataclasses.replace(
                plan, **{field: value if field == "recompute" else int(value)}
            )
    return dataclasses.replace(step, spec=spec, plan=plan)


def room(bytes_: float) -> Available:
    return Available(bytes=bytes_, source="made up")


def test_a_step_that_fits_passes_and_returns_its_peak():
    step = step_of()
    peak = step.peak_bytes()
    assert check_memory(step, room(peak), processes=1, device="cpu") == peak


def test_processes_on_one_machine_share_its_memory():
    step = step_of()
    peak = step.peak_bytes()
    check_memory(step, room(2 * peak), processes=2, device="cpu")
    with pytest.raises(SpecError, match="per process, 3 processes"):
        check_memory(step, room(2 * peak), processes=3, device="cpu")


# the default's peaks (core.parallel.memory.gpu_peak on the trainer's row: fused AdamW, the earlier
# micro-batches' gradients at the last one's backward; 128 tokens a sequence, fp32), in MB:
# micro-batch 16: 88.2; 4: 33.2; 2: 23.5; 1: 18.6; with full recomputation 2: 17.0, 1: 15.5
@pytest.mark.parametrize(
    ("model", "budget_bytes", "advice"),
    [
        ("default", 34e6, "--micro-batch 4 --grad-accum 4 ("),  # a smaller micro-batch
        ("default", 17.5e6, "--micro-batch 2 --grad-accum 8 --recompute full ("),  # and recompute
        ("gpt2", 2 * GB, "--set n_layers="),  # fewer layers
        ("llama-3-8b", 21 * GB, "--model "),  # another preset: 1 layer needs 22.5 GB
    ],
)
def test_the_advice_fits_and_is_the_least_change(model, budget_bytes, advice):
    step = step_of(DEFAULT if model == "default" else resolve_model(model))
    flags, peak = what_fits(step, budget_bytes)
    assert (flags + " (").startswith(advice)
    changed = apply(step, flags)
    assert changed.peak_bytes() == pytest.approx(peak) and peak <= budget_bytes
    # the same sequences per optimizer step
    assert changed.plan.micro_batch * changed.plan.grad_accum == 16


def test_the_advice_keeps_recomputation_off_when_a_micro_batch_suffices():
    step = step_of()
    flags, _ = what_fits(step, 0.9 * step.peak_bytes())
    assert "--recompute" not in flags


def test_the_advice_tries_more_layers_before_fewer():
    step = step_of(resolve_model("gpt2"))
    flags, _ = what_fits(step, 2 * GB)
    layers = int(flags.split()[1].split("=")[1])
    one_more = apply(step, flags).spec.replace(n_layers=layers + 1)
    assert dataclasses.replace(apply(step, flags), spec=one_more).peak_bytes() > 2 * GB


def test_nothing_fits_says_so():
    with pytest.raises(SpecError) as err:
        check_memory(step_of(resolve_model("llama-3-8b")), room(1e6), processes=1, device="cpu")
    assert "no preset fits" in err.value.rule and "--no-memory-check" in err.value.rule


def test_the_refusal_is_one_line_with_the_figures():
    with pytest.raises(SpecError) as err:
        check_memory(step_of(resolve_model("llama-3-8b")), room(23 * GB), processes=1, device="cpu")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("predicted peak memory = '129.5 GB': more than the 23 GB available")


def test_free_memory_is_read_from_meminfo(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   24079276 kB\n")
    monkeypatch.setattr(memory_check, "MEMINFO", meminfo)
    available = memory_check.available_memory_bytes("cpu")
    assert available.bytes == 24079276 * KiB  # the kernel's "kB" are KiB (proc(5))
    assert "MemAvailable" in available.source


def test_without_meminfo_the_free_pages_or_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_check, "MEMINFO", tmp_path / "absent")
    available = memory_check.available_memory_bytes("cpu")
    assert available is None or (available.bytes > 0 and "sysconf" in available.source)
    monkeypatch.setattr(memory_check, "available_memory_bytes", lambda *_: None)
    line = check_run(step_of(), device="cpu", index=None, world_size=1)
    assert line.startswith("memory check skipped")


def test_cpu_processes_counted_from_torchrun(monkeypatch):
    step = step_of()
    peak = step.peak_bytes()
    monkeypatch.setattr(memory_check, "available_memory_bytes", lambda *_: room(3 * peak))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert "x 2 processes" in check_run(step, device="cpu", index=None, world_size=4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(SpecError):
        check_run(step, device="cpu", index=None, world_size=4)
    # a GPU is one process's own
    line = check_run(step, device="cuda", index=0, world_size=4)
    assert "processes" not in line
