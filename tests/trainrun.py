"""Running `python -m trainbudget train` (under torchrun for several ranks) from a test, and
reading what the run wrote: shared by the reliability and sharded-checkpoint tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_env(faults: dict | None) -> dict:
    """The test's environment for a run: the source tree, one thread per rank (two ranks on
    two cores), no GPU, gloo on loopback, nothing torchrun-ish inherited; faults, if any."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    env.pop("TRAINBUDGET_FAULTS", None)
    if faults:
        env["TRAINBUDGET_FAULTS"] = json.dumps(faults)
    return env


def train_cli(
    out: Path,
    data: Path,
    *args: str,
    nproc: int = 1,
    faults=None,
    restarts=None,
    script: Path | None = None,
    wait: bool = True,
) -> subprocess.CompletedProcess | subprocess.Popen:
    """`python -m trainbudget train --data DATA --out OUT ARGS` (under torchrun when nproc > 1,
    with --max-restarts when `restarts` is given; `script` instead of `-m trainbudget train`
    when given); the finished process, or with `wait=False` the running one (see `finish`)."""
    program = [str(script)] if script is not None else ["-m", "trainbudget", "train"]
    cmd = [*program, "--data", str(data), "--out", str(out), *args]
    if nproc > 1:
        launch = ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
        launch += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
        if restarts is not None:
            launch += ["--max-restarts", str(restarts), "--monitor-interval", "0.2"]
        cmd = [*launch, *cmd]
    cmd = [sys.executable, *cmd]
    # a session of its own: on a timeout the whole tree (torchrun and its workers) is killed
    proc = subprocess.Popen(
        cmd,
        env=run_env(faults),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=out.parent,
        start_new_session=True,
    )
    return finish(proc) if wait else proc


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A run that succeeded: exit 0 (under torchrun: every rank exited 0) and no rank aborted
    on its way out ("terminate called ..." is what a C++ thread of the process group left
    running into interpreter exit prints; see train.launch.distributed.shutdown)."""
    assert r.returncode == 0, f"{' '.join(r.args)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "terminate called" not in r.stderr, f"{' '.join(r.args)}\n{r.stderr[-3000:]}"
    return r


def steps(out: Path) -> dict[int, dict]:
    """metrics.jsonl's step records, the last record of each step winning (the contract)."""
    last = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "event" not in record:
            last[record["step"]] = record
    return last


def flat(tree, prefix: str = "") -> dict:
    """Every tensor and value of a nested state dict, by path."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in flat(sub, f"{prefix}/{i}").items()}
    return {prefix: tree}


def rank_by_hand(
    out: Path,
    data: Path,
    *args: str,
    rank: int,
    world_size: int,
    port: int,
    faults=None,
    torchrun_env: dict | None = None,
) -> subprocess.Popen:
    """`python -m trainbudget train` as one rank of a launch by hand (no torchrun): WORLD_SIZE,
    RANK, MASTER_ADDR and MASTER_PORT set by the caller's arguments, plus `torchrun_env`;
    stdout and stderr piped, in a session of its own. The caller waits for it (`finish`)."""
    env = run_env(faults)
    env.update(WORLD_SIZE=str(world_size), RANK=str(rank), LOCAL_RANK=str(rank))
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **(torchrun_env or {}))
    cmd = [sys.executable, "-m", "trainbudget", "train", "--data", str(data), "--out", str(out)]
    return subprocess.Popen(
        [*cmd, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=out.parent,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Wait for `proc` (killed, with its session, after `timeout`: the test then fails)."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(proc.args)}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL `proc`'s session (a stopped process included) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


PROGRESS = re.compile(r"^trainbudget train: (loading PyTorch|.* \[t = [0-9.]+ s\])$")
"""A start-up progress line (train.observe.startup.Say, and the line before torch loads)."""


def message_lines(stderr: str) -> list[str]:
    """stderr without the start-up progress lines: what a test of a message looks at."""
    return [line for line in stderr.strip().splitlines() if not PROGRESS.match(line)]


# the checkpoint tests' tiny model and the 6-step run they resume copies of
# (tests/train/conftest.py: `six_steps`, checkpoints at steps 3 and 6, kept 3)
TINY_MODEL = (
    "n_layers=1",
    "d_model=32",
    "n_heads=2",
    "d_ff=64",
    "vocab_size=257",
    "max_seq_len=64",
)
CHECKPOINT_RUN = (
    *(a for s in TINY_MODEL for a in ("--set", s)),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "100", "--micro-batch", "2"),
    *("--no-tensorboard", "--device", "cpu", "--precision", "fp32", "--seed", "7"),
    *("--checkpoint-every", "3", "--keep", "3"),
)
