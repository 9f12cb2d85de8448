"""Issue 13, point 10, on the real `trainbudget profile` command: a device it does not know is
refused before torch is loaded (it took 12.6 s to say so), and real steps on the CPU say each
phase as it starts (a run of 220 s printed nothing until its table)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cli

SRC = str(Path(__file__).resolve().parents[3] / "src")
TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257")
TINY_FLAGS = [arg for o in TINY for arg in ("--set", o)]


def test_profile_unknown_device_is_refused_before_torch_loads():
    # a fresh interpreter: this one may have imported torch for an earlier test
    probe = (
        "import contextlib, io, sys\n"
        "from trainbudget.cli.main import main\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        "    code = main(['profile', '--model', 'gpt2', '--device', 'tpu'])\n"
        "print(code, 'torch' in sys.modules, 'trainbudget.model.transformer' in sys.modules)\n"
        "print(err.getvalue(), end='')\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    status, message = done.stdout.split("\n", 1)
    assert status == "2 False False"  # exit 2; torch never loaded, no model built
    assert message == (
        "trainbudget profile: error: device = 'tpu': must be one of fake-cpu, fake-cuda, cpu, "
        "cuda\n"
    )


@pytest.mark.torch
def test_profile_on_the_cpu_says_each_phase_as_it_starts():
    argv = ("profile", "--model", "gpt2", *TINY_FLAGS, "--seq-len", "16", "--device", "cpu")
    code, out, err = cli(*argv)
    assert code == 0, err
    said = err.splitlines()
    phases = (
        "loading PyTorch",
        "measuring memory: two training steps under MemTracker on cpu",
        "counting FLOPs",
        "timing whole steps on cpu: 2 warm-up steps, then the median of 5",
        "timing each phase on cpu",
        "done",
    )
    assert len(said) == len(phases), said
    for phase, line in zip(phases, said, strict=True):
        assert line.startswith("trainbudget profile: " + phase), line
        assert line.endswith(" s]")  # the seconds since the command started
    assert "peak" in out and "phase" in out  # the table still goes to stdout


@pytest.mark.torch
def test_profile_on_fake_tensors_prints_only_its_table_when_captured():
    code, out, err = cli("profile", "--model", "gpt2", *TINY_FLAGS, "--seq-len", "16")
    assert code == 0 and err == ""  # not a terminal, seconds-long: no progress lines
    assert out.startswith("gpt2[")


def test_profile_of_too_many_layers_is_refused_and_names_the_override():
    # the failure: `--set n_layers=100000` stepped every layer for days, without a word
    code, out, err = cli(
        "profile", "--model", "gpt2", "--set", "n_layers=100000", "--seq-len", "16"
    )
    assert code == 2 and out == ""
    assert err == (
        "trainbudget profile: error: n_layers = 100000: profiling steps every layer, so at most "
        "128 (every preset fits); give --allow-large to profile it anyway\n"
    )


@pytest.mark.torch
def test_allow_large_lifts_the_layer_bound(monkeypatch):
    from trainbudget.cli.run import profile_cmd

    monkeypatch.setattr(profile_cmd, "MAX_PROFILE_LAYERS", 1)
    argv = ("profile", "--model", "gpt2", *TINY_FLAGS, "--set", "n_layers=2", "--seq-len", "8")
    assert cli(*argv)[0] == 2
    code, _, err = cli(*argv, "--allow-large")
    assert code == 0, err
