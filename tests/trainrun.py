"""Running `trainbudget train` from a test, and reading what the run wrote.

- train_cli: `python -m trainbudget train` in a process of its own, under torchrun for several
  ranks: for what only a real process and launcher show (faults that kill a rank, restarts,
  signals, a run left running).
- train_run: a run that ends by itself, made the quickest faithful way -- one process in the
  test's own (train_in_process), several ranks launched by hand (train_ranks). Start-up is most
  of a tiny run's cost on a loaded 2-core machine: an interpreter importing torch and the
  trainer is ~8 s, torchrun's agent one more such interpreter before any rank starts.
- The observe tests' runs, one per layout (OBSERVED_LAYOUTS), and the checkpoint tests' run
  (CHECKPOINT_RUN), each made once per session by tests/train/conftest.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
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


def train_in_process(out: Path, data: Path, *args: str) -> subprocess.CompletedProcess:
    """`trainbudget train --data DATA --out OUT ARGS` through the CLI's `main` in this process:
    the one-process reference runs the layout tests compare against. A fresh interpreter spends
    ~8 s of a loaded 2-core machine importing torch and the trainer before a 1-second run of the
    tiny model; here they are loaded once. What a process of its own would set is set around the
    call: one intra-op thread (run_env's OMP_NUM_THREADS=1, so the sums run in the same order,
    bit for bit), the run folder's parent as the working directory, no launch or fault variables
    (the caller's environment is checked). Returns what train_cli returns, with the CLI's exit
    code and what it wrote to stdout and stderr."""
    import torch

    from clirun import cli

    inherited = [n for n in (*LAUNCH_VARIABLES, "TRAINBUDGET_FAULTS") if n in os.environ]
    assert not inherited, f"an in-process run would inherit {inherited}"
    threads, cwd = torch.get_num_threads(), Path.cwd()
    torch.set_num_threads(1)
    os.chdir(out.parent)
    try:
        argv = ["train", "--data", str(data), "--out", str(out), *args]
        code, stdout, stderr = cli(*argv)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["trainbudget", *argv], code, stdout, stderr)


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


HAND_GRACE_SECONDS = 30.0
"""How long the other ranks of a launch by hand get to exit once one rank has failed (each
rank names the lost peer at its next collective; `collective_timeout_seconds` is 600 s)."""


def train_run(
    out: Path, data: Path, *args: str, nproc: int = 1, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    """`trainbudget train --data DATA --out OUT ARGS` the quickest faithful way, for runs that
    end by themselves (no faults, no restarts): in this process when `nproc` is 1
    (train_in_process), else `nproc` ranks launched by hand (train_ranks)."""
    if nproc == 1:
        return train_in_process(out, data, *args)
    return train_ranks(out, data, *args, nproc=nproc, timeout=timeout)


def train_ranks(
    out: Path, data: Path, *args: str, nproc: int, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    """`python -m trainbudget train --data DATA --out OUT ARGS` as `nproc` ranks launched by
    hand (train.launch.launch_env: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT; rank 0 hosts the store), one process per rank and no launcher. For the
    layout tests, whose runs end cleanly: torchrun's agent is one more interpreter importing
    torch before any rank starts (~2.5 s of a loaded 2-core machine, a fifth of a 2-rank run).
    What torchrun itself does (its agent store, restarts, a killed worker) is tested under
    torchrun: tests/train/launch/test_distributed.py, tests/train/test_reliability.py.
    Returns one CompletedProcess: the first failing rank's exit code (else 0), the ranks'
    stdout and stderr joined in rank order."""
    port = free_port()
    cmd = [sys.executable, "-m", "trainbudget", "train", "--data", str(data), "--out", str(out)]
    cmd += args
    with contextlib.ExitStack() as stack:
        # files, not pipes: a rank blocked on a full pipe would stall the collectives
        files = [
            (
                stack.enter_context(tempfile.TemporaryFile("w+")),
                stack.enter_context(tempfile.TemporaryFile("w+")),
            )
            for _ in range(nproc)
        ]
        procs = []
        for rank, (stdout, stderr) in enumerate(files):
            env = run_env(None)
            env.update(WORLD_SIZE=str(nproc), RANK=str(rank), LOCAL_RANK=str(rank))
            env.update(LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1")
            env["MASTER_PORT"] = str(port)
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    text=True,
                    cwd=out.parent,
                    start_new_session=True,
                )
            )
        codes = _wait_ranks(procs, timeout)
        texts = []
        for stdout, stderr in files:
            stdout.seek(0)
            stderr.seek(0)
            texts.append((stdout.read(), stderr.read()))
    joined_err = "".join(err for _, err in texts)
    if codes is None:
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{joined_err[-3000:]}")
    code = next((c for c in codes if c != 0), 0)
    return subprocess.CompletedProcess(cmd, code, "".join(o for o, _ in texts), joined_err)


def _wait_ranks(procs: list[subprocess.Popen], timeout: float) -> list[int] | None:
    """Every rank's exit code, or None past `timeout` (every rank then killed). Once a rank
    has failed, the others get HAND_GRACE_SECONDS to exit, then are killed (-9), as torchrun's
    agent stops the rest of a failed group."""
    deadline, failed = time.monotonic() + timeout, False
    while any(p.poll() is None for p in procs):
        if not failed and any(p.returncode not in (None, 0) for p in procs):
            failed, deadline = True, min(deadline, time.monotonic() + HAND_GRACE_SECONDS)
        if time.monotonic() > deadline:
            for p in procs:
                kill(p)
            return [p.returncode for p in procs] if failed else None
        time.sleep(0.05)
    return [p.returncode for p in procs]


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

# The observe tests' runs (tests/train/observe: test_comm_count, test_rank_memory) of the same
# tiny model: 3 steps of 2 micro-batches of one row, fp32. Each layout runs once per session
# (tests/train/conftest.py: `observed_run`) and serves both: comm.json counts the 3rd step's
# collectives, summary.json holds each rank's peak on the 2nd.
OBSERVED_RUN = (
    *(a for s in TINY_MODEL for a in ("--set", s)),
    *("--seq-len", "32", "--log-interval", "1", "--no-tensorboard", "--device", "cpu"),
    *("--precision", "fp32", "--seed", "7", "--optimizer", "adamw", "--lr", "1e-3"),
    *("--steps", "3", "--micro-batch", "1", "--grad-accum", "2", "--eval-interval", "100"),
)
_TP_VOCAB = ("--set", "vocab_size=258")  # tp must divide the vocabulary
_TWO_STAGES = ("--set", "n_layers=2", "--pp", "2", "--no-memory-check")  # a layer per stage
_DROPLESS_EP2 = (
    *("--set", "n_experts=4", "--set", "experts_per_token=2", "--ep", "2"),
    *("--moe-capacity-factor", "0"),
)
OBSERVED_LAYOUTS = {  # name: (processes, arguments after OBSERVED_RUN)
    "single": (1, ()),
    "ddp": (2, ("--strategy", "ddp")),
    "zero1": (2, ("--strategy", "zero1")),
    "zero2": (2, ("--strategy", "zero2")),
    "fsdp": (2, ("--strategy", "fsdp")),
    "hsdp": (4, ("--strategy", "hsdp", "--zero-shard", "2")),
    "dp2-tp2-sp": (4, (*_TP_VOCAB, "--tp", "2", "--sequence-parallel")),
    "tp2": (2, (*_TP_VOCAB, "--tp", "2")),
    "pp2": (2, _TWO_STAGES),
    "tp2-sp-pp2": (4, (*_TP_VOCAB, *_TWO_STAGES, "--tp", "2", "--sequence-parallel")),
    "dp2-pp2": (4, (*_TWO_STAGES, "--strategy", "ddp")),
    "ep2": (2, _DROPLESS_EP2),
    "dp4-ep2": (4, _DROPLESS_EP2),
}
