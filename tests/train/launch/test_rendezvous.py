"""train.launch.rendezvous (issue 15, point 3): a rank whose peers never come exits within
--collective-timeout-seconds with code 3 and one line naming the ranks that did not arrive.
Each case hung silently before: `WORLD_SIZE=2 RANK=0` alone waited 30 minutes (torch's default
for gloo) in init_process_group; two processes told WORLD_SIZE=3 waited for rank 2 as long.
Ctrl-C during the wait: one line, exit 130, no traceback.

Ranks are started by hand (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), as torchrun would set
them, on a free port (trainrun.free_port); timeouts of 3 s keep the file at ~30 s on 2 cores.
"""

from __future__ import annotations

import datetime
import signal
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from trainbudget.data.prepare import prepare  # noqa: E402
from trainrun import finish, free_port, message_lines, rank_by_hand  # noqa: E402

pytestmark = pytest.mark.torch

ARGS = ("--device", "cpu", "--no-tensorboard", "--steps", "2", "--seq-len", "32")
SHORT = ("--collective-timeout-seconds", "3")


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


def test_a_lone_rank_0_names_the_rank_that_never_came(tmp_path, data):
    out = tmp_path / "run"
    proc = rank_by_hand(out, data, *ARGS, *SHORT, rank=0, world_size=2, port=free_port())
    r = finish(proc)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "rendezvous" in line and "timed out after 3 s" in line, line
    assert "rank 1 of WORLD_SIZE 2 did not arrive" in line, line
    assert not out.exists()  # nothing written before the ranks met


def test_two_processes_told_world_size_3_name_rank_2(tmp_path, data):
    port = free_port()
    procs = [
        rank_by_hand(tmp_path / "run", data, *ARGS, *SHORT, rank=r, world_size=3, port=port)
        for r in (0, 1)
    ]
    for rank, proc in enumerate(procs):
        r = finish(proc)
        assert r.returncode == 3, r.stderr
        line = one_line(r)
        assert line.startswith(f"trainbudget train: rank {rank}: rendezvous"), line
        assert "rank 2 of WORLD_SIZE 3 did not arrive" in line, line


def test_a_lone_rank_1_names_rank_0_which_hosts_the_store(tmp_path, data):
    proc = rank_by_hand(
        tmp_path / "run", data, *ARGS, *SHORT, rank=1, world_size=2, port=free_port()
    )
    r = finish(proc)
    assert r.returncode == 3, r.stderr
    line = one_line(r)
    assert "nothing listens there; rank 0, which hosts the store, did not arrive" in line, line


def test_ctrl_c_while_waiting_at_rendezvous_is_one_line_and_130(tmp_path, data):
    port = free_port()
    long = ("--collective-timeout-seconds", "120")
    proc = rank_by_hand(tmp_path / "run", data, *ARGS, *long, rank=0, world_size=2, port=port)
    try:
        _await_mark(port, rank=0, proc=proc)  # rank 0 is up and waiting for rank 1
        proc.send_signal(signal.SIGINT)
        r = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert r.returncode == 130, r.stderr
    line = one_line(r)
    assert "interrupted by SIGINT" in line and "start-up" in line, line


def _await_mark(port: int, *, rank: int, proc, seconds: float = 120) -> None:
    """Wait until `rank` has left its rendezvous mark in the store it hosts at `port`."""
    deadline = time.monotonic() + seconds
    store = None
    while store is None:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the rank never opened its store"
        try:
            store = torch.distributed.TCPStore(
                "127.0.0.1", port, None, is_master=False, timeout=datetime.timedelta(seconds=60)
            )
        except RuntimeError:
            time.sleep(0.2)
    store = torch.distributed.PrefixStore("trainbudget/attempt-0", store)
    store.wait([f"at/{rank}"])
