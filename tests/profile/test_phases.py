"""Phase timing of a real training step (data loading to logging) on the CPU, the token-window
sampler, the gradient all-reduce path under a one-process gloo group, and the phase times in
`trainbudget profile --device cpu`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from clirun import cli, cli_json  # noqa: E402
from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.profile.phases import (  # noqa: E402
    PHASES,
    PhaseTimes,
    make_tokens,
    random_batch,
    time_phases,
)

TINY = ("n_layers=1", "d_model=64", "n_heads=2", "d_ff=256", "vocab_size=512")
TINY_ARGS = [a for kv in TINY for a in ("--set", kv)]
SPEC = resolve_model("gpt2", TINY)
TIMER_SLACK_SECONDS = 5e-3  # the clock reads, and a busy CI machine's scheduling noise


def _check(times: PhaseTimes) -> None:
    assert tuple(times.phases) == PHASES
    assert all(v >= 0 for v in times.phases.values())
    assert times.total > 0
    # medians per phase vs the median of per-step sums: about equal, never far above
    assert times.phase_sum <= times.total * 1.5 + TIMER_SLACK_SECONDS


def test_phases_sum_to_about_the_total():
    lines: list[str] = []
    t = time_phases(
        SPEC,
        micro_batch=2,
        seq_len=32,
        precision="fp32",
        optimizer="adamw",
        steps=5,
        warmup=1,
        log=lines.append,
    )
    _check(t)
    assert (t.steps, t.warmup, t.device, t.world_size, t.distributed) == (5, 1, "cpu", 1, False)
    assert t.forward > 0 and t.backward > 0 and t.optimizer > 0
    assert len(lines) == 6 and all("loss" in line for line in lines)
    assert np.isfinite(float(lines[-1].split("loss")[1].split("|")[0]))
    assert set(t.as_dict()["phases_seconds"]) == set(PHASES)


def test_phases_mixed_precision_with_recompute():
    _check(
        time_phases(
            SPEC,
            micro_batch=1,
            seq_len=16,
            precision="bf16-mixed",
            optimizer="sgd",
            recompute="full",
            steps=2,
            warmup=1,
        )
    )


def test_gradient_sync_runs_when_distributed_is_initialised(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        t = time_phases(
            SPEC, micro_batch=1, seq_len=16, precision="fp32", optimizer="sgd", steps=1, warmup=0
        )
    finally:
        dist.destroy_process_group()
    assert t.distributed and t.world_size == 1 and t.grad_sync > 0
    _check(t)


def test_random_batch_shapes_dtypes_range_and_seed():
    tokens = make_tokens(512, 1000, seed=1)
    assert tokens.dtype == np.uint16 and tokens.shape == (1000,) and tokens.max() < 512
    assert make_tokens(100_000, 10).dtype == np.uint32  # ids beyond uint16
    x, y = random_batch(tokens, 4, 32, np.random.default_rng(0))
    assert x.shape == y.shape == (4, 32)
    assert x.dtype == y.dtype == torch.int64 and x.device.type == "cpu"
    assert int(x.min()) >= 0 and int(x.max()) < 512
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    flat = torch.from_numpy(tokens.astype(np.int64))
    for row_x, row_y in zip(x, y, strict=True):  # every row is a window of the stream
        starts = [i for i in range(len(tokens) - 32) if torch.equal(flat[i : i + 32], row_x)]
        assert starts and torch.equal(flat[starts[0] + 1 : starts[0] + 33], row_y)
    again = random_batch(tokens, 4, 32, np.random.default_rng(0))
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    other = random_batch(tokens, 4, 32, np.random.default_rng(1))
    assert not torch.equal(x, other[0])
    edge = random_batch(np.arange(9, dtype=np.uint16), 3, 8, np.random.default_rng(0))[0]
    assert torch.equal(edge, torch.arange(8).expand(3, 8))  # the only window there is


def test_random_batch_rejects_bad_input():
    with pytest.raises(SpecError):
        random_batch(np.zeros(8, dtype=np.uint16), 1, 8, np.random.default_rng(0))
    with pytest.raises(SpecError):
        random_batch(np.zeros(100, dtype=np.uint16), 0, 8, np.random.default_rng(0))


def test_fake_devices_are_refused():
    with pytest.raises(SpecError, match="fake"):
        time_phases(
            SPEC, micro_batch=1, seq_len=8, precision="fp32", optimizer="sgd", device="fake-cpu"
        )


def test_profile_command_reports_phases_on_cpu():
    args = ["profile", "--model", "gpt2", *TINY_ARGS, "--seq-len", "32", "--device", "cpu"]
    j = cli_json(*args)
    assert j["device"] == "cpu"
    assert list(j["phases_seconds"]) == list(PHASES)
    assert all(v >= 0 for v in j["phases_seconds"].values())
    assert j["phases_total_seconds"] > 0 and j["step_seconds"] > 0
    assert j["achieved_flops_per_second"] > 0 and j["model_flops_per_step"] > 0
    assert "mfu" not in j and "max_memory_allocated" not in j  # CUDA only
    assert j["timing_notes"]


def test_profile_command_fake_device_has_no_timing():
    j = cli_json("profile", "--model", "gpt2", *TINY_ARGS, "--seq-len", "32")
    assert j["device"] == "fake-cpu"
    assert not {"phases_seconds", "step_seconds", "mfu", "timing_notes"} & set(j)


def test_profile_command_text_prints_phases():
    args = ["profile", "--model", "gpt2", *TINY_ARGS, "--seq-len", "16", "--device", "cpu"]
    code, out, _ = cli(*args)
    assert code == 0
    for phase in PHASES:
        assert phase in out
    assert "total (synced)" in out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_phases_and_profile_on_cuda():
    t = time_phases(
        SPEC, micro_batch=2, seq_len=64, precision="bf16-mixed", optimizer="adamw", device="cuda"
    )
    _check(t)
    x, _ = random_batch(make_tokens(512), 2, 8, np.random.default_rng(0), "cuda")
    assert x.device.type == "cuda"
    j = cli_json("profile", "--model", "gpt2", *TINY_ARGS, "--seq-len", "64", "--device", "cuda")
    assert list(j["phases_seconds"]) == list(PHASES)
    assert j["max_memory_allocated"] > 0 and j["max_memory_reserved"] >= j["max_memory_allocated"]
    assert "mfu" in j and "catalog_key" in j
    if j["catalog_key"] is not None:
        assert 0 < j["mfu"] < 1
    else:
        assert j["mfu"] is None
