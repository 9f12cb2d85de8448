"""train.launch.collective_watch (issue 15, points 3 and 8): a rank waiting in a collective for a
rank that hangs exits within --collective-timeout-seconds with code 3, naming the phase and the rank
that did not arrive (before: it blocked without a word for 30 minutes, gloo's default); SIGTERM
while it waits ends it at once with one line (before: the handler could not run inside the
collective, so torchrun's SIGTERM was ignored until SIGKILL); Ctrl-C pressed twice is one line
and exit 130 (before: a KeyboardInterrupt traceback).

The hang is SIGSTOP (train.launch.faults' stop_step) on rank 1 after step 2's update; ranks are
started by hand on a free port. About 60 s on 2 cores (3 runs of ~20 s, mostly start-up).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import trainrun  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.launch.collective_watch import Watch, mark_key  # noqa: E402
from trainbudget.train.launch.exits import ranks_text  # noqa: E402
from trainrun import finish, free_port, kill, message_lines, rank_by_hand  # noqa: E402

pytestmark = pytest.mark.torch

TINY = (
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--micro-batch", "2", "--log-interval", "1", "--eval-interval", "100"),
    *("--no-tensorboard", "--device", "cpu", "--steps", "6", "--checkpoint-every", "0"),
)
STOP_RANK_1 = {"stop_step": 2, "stop_rank": 1}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


def one_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in message_lines(r.stderr) if line.startswith("trainbudget train:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def two_ranks(out: Path, data: Path, timeout_seconds: int, faults: dict):
    port = free_port()
    args = (*TINY, "--collective-timeout-seconds", str(timeout_seconds))
    return [
        rank_by_hand(out, data, *args, rank=r, world_size=2, port=port, faults=faults)
        for r in (0, 1)
    ]


def test_a_stopped_rank_is_named_by_the_rank_waiting_for_it(tmp_path, data):
    rank0, rank1 = two_ranks(tmp_path / "run", data, 3, STOP_RANK_1)
    try:
        r = finish(rank0)
    finally:
        kill(rank1)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "rank 0: the forward and backward of step 3" in line, line
    assert "timed out after 3 s (--collective-timeout-seconds)" in line, line
    last = "the gradient-norm and loss all-reduces of step 2"
    assert f"not arrived: rank 1 (last reached {last})" in line, line


def test_sigterm_while_waiting_for_a_stopped_rank_ends_it_at_once(tmp_path, data):
    # a collective timeout of 10 minutes: only the signal watcher can end rank 0 in time
    rank0, rank1 = two_ranks(tmp_path / "run", data, 600, STOP_RANK_1)
    try:
        _await_stopped(rank1)
        rank0.terminate()  # SIGTERM, as torchrun sends when another worker failed
        r = finish(rank0)
    finally:
        kill(rank1)
        if rank0.poll() is None:
            kill(rank0)
    assert r.returncode == 143, r.stderr
    line = one_line(r)
    assert "rank 0: SIGTERM while waiting in the forward and backward of step 3" in line, line
    assert "not arrived: rank 1" in line and "without a checkpoint" in line, line
    assert not list_checkpoints(tmp_path / "run" / "checkpoints")


def test_ctrl_c_twice_is_one_line_and_130(tmp_path, data):
    out = tmp_path / "run"
    r = trainrun.train_cli(out, data, *TINY, faults={"interrupt_twice_step": 2})
    assert r.returncode == 130, r.stderr
    line = one_line(r)
    assert "second SIGINT at step 2: stopped at once, without a checkpoint" in line, line
    assert not list_checkpoints(out / "checkpoints")


def _await_stopped(proc, seconds: float = 180) -> None:
    """Wait until `proc` is stopped (state T in /proc/PID/stat)."""
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + seconds
    while stat.read_text().rpartition(")")[2].split()[0] != "T":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the rank never stopped"
        time.sleep(0.1)


# -- the marks and the message, over a store in a dict -------------------------------------


class DictStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.values[key]


def test_the_ranks_behind_are_named_with_the_phase_they_last_reached():
    store = DictStore()
    watches = [
        Watch(store, rank=r, world_size=5, timeout_seconds=3, host="rank 0") for r in range(5)
    ]
    for watch in watches:
        store.set(mark_key(watch.rank), "0\trendezvous")
    for watch in watches[:3]:
        watch.arrive("step 1")
    for watch in (watches[0], watches[2]):
        watch.arrive("step 2")
    assert watches[0].missing() == {1: "step 1", 3: "rendezvous", 4: "rendezvous"}
    text = watches[2].who_is_missing(watches[2].missing())
    assert text == "not arrived: rank 1 (last reached step 1); ranks 3, 4 (last reached rendezvous)"
    assert watches[0].who_is_missing({}) == "every rank reached it: one stalled inside it"
    assert "rank 0, which hosts it, is stopped or gone" in watches[1].who_is_missing(None)
    err = watches[0].lost(RuntimeError("[pair.cc:1] Timed out waiting 3000ms for recv"))
    assert str(err).startswith("rank 0: step 2 timed out after 3 s (--collective-timeout-seconds)")


def test_ranks_text():
    assert ranks_text([2]) == "rank 2"
    assert ranks_text([3, 1]) == "ranks 1, 3"
    assert ranks_text([0, 4, 5, 6, 7, 9]) == "ranks 0, 4-7, 9"
