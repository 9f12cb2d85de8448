"""Issue 24, part 4: a rank killed or stopped *inside* a phase is named by the ranks waiting for
it (train.launch.collective_watch). Its mark says it arrived like everyone's, so the survivors said
"every rank reached it: one stalled inside it" and no more. Each mark now names the process
that left it; a rank on the same machine looks it up in /proc and says which rank's process is
gone or stopped.

The unit tests use real processes (a `sleep`, stopped or killed) behind marks in a dict store.
The end-to-end tests start two gloo ranks by hand, freeze rank 1 (SIGSTOP) until both marks
show the same phase -- rank 1 frozen inside the phase rank 0 waits in -- and then kill it, or
leave it stopped: rank 0 exits 3 with one line naming rank 1. About 15 s each on 2 cores."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from trainbudget.train.launch import collective_watch
from trainbudget.train.launch.collective_watch import Watch, mark_key, process_state, this_process


class DictStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.values[key]


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _process_of(proc: subprocess.Popen) -> str:
    """The mark's PROCESS field for `proc`, as that process would write it."""
    start = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[19]
    return f"{this_process().split()[0]} {proc.pid} {start}"


def _await_state(pid: int, states: str) -> None:
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in states:
        assert time.monotonic() < deadline
        time.sleep(0.01)


needs_proc = pytest.mark.skipif(not this_process(), reason="needs Linux's /proc")


@needs_proc
def test_a_process_is_running_stopped_or_gone(sleeper) -> None:
    process = _process_of(sleeper)
    assert process_state(this_process()) is None
    assert process_state(process) is None
    os.kill(sleeper.pid, signal.SIGSTOP)
    _await_state(sleeper.pid, "Tt")
    assert process_state(process) == f"pid {sleeper.pid} is stopped (SIGSTOP or a debugger)"
    sleeper.kill()
    _await_state(sleeper.pid, "ZX")  # dead, not yet reaped
    gone = f"pid {sleeper.pid} is gone (killed, crashed or exited)"
    assert process_state(process) == gone
    sleeper.wait()
    assert process_state(process) == gone
    machine, pid, start = process.split()
    assert process_state(f"{machine} {os.getpid()} {start}") == f"pid {os.getpid()} is gone " + (
        "(killed, crashed or exited)"
    )  # a PID reused since: another start time
    assert process_state(f"another-machine {pid} {start}") is None  # cannot be looked up
    assert process_state("") is None  # the rendezvous's first mark names none


def _watches(store: DictStore, n: int) -> list[Watch]:
    watches = [
        Watch(store, rank=r, world_size=n, timeout_seconds=3, host="rank 0") for r in range(n)
    ]
    for watch in watches:
        watch.arrive("start-up")
    return watches


@needs_proc
def test_a_rank_stopped_inside_the_phase_is_named(sleeper) -> None:
    store = DictStore()
    watches = _watches(store, 3)
    for watch in watches:
        watch.arrive("the forward and backward of step 3")
    # rank 1's mark, as the process `sleeper` would have left it; then it stops
    seq, label, _ = store.get(mark_key(1)).decode().split("\t")
    store.set(mark_key(1), f"{seq}\t{label}\t{_process_of(sleeper)}")
    assert watches[0].who_is_missing({}) == "every rank reached it: one stalled inside it"
    os.kill(sleeper.pid, signal.SIGSTOP)
    _await_state(sleeper.pid, "Tt")
    stopped = f"rank 1: pid {sleeper.pid} is stopped (SIGSTOP or a debugger)"
    assert watches[0].who_is_missing({}) == f"every rank reached it; inside it, {stopped}"
    err = watches[0].lost(RuntimeError("[pair.cc:1] Timed out waiting 3000ms for recv"))
    assert str(err).startswith(
        "rank 0: the forward and backward of step 3 timed out after 3 s "
        f"(--collective-timeout-seconds); every rank reached it; inside it, {stopped}. "
    )
    sleeper.kill()
    sleeper.wait()
    err = watches[2].lost(RuntimeError("[pair.cc:1] Connection closed by peer [1.2.3.4]:5"))
    assert (
        "failed (Connection closed by peer [1.2.3.4]:5); every rank reached it; inside it, "
        f"rank 1: pid {sleeper.pid} is gone (killed, crashed or exited)."
    ) in str(err)


@needs_proc
def test_a_peer_still_exiting_is_waited_for(sleeper) -> None:
    """A killed peer's sockets close while it exits, a moment before /proc shows it dead: the
    rank whose collective failed looks again for up to EXIT_SETTLE_SECONDS."""
    store = DictStore()
    watches = _watches(store, 2)
    seq, label, _ = store.get(mark_key(1)).decode().split("\t")
    store.set(mark_key(1), f"{seq}\t{label}\t{_process_of(sleeper)}")
    killer = threading.Timer(0.3, sleeper.kill)
    killer.start()
    err = watches[0].lost(RuntimeError("[pair.cc:1] Connection reset by peer"))
    killer.join()
    assert f"inside it, rank 1: pid {sleeper.pid} is gone" in str(err)


@needs_proc
def test_a_rank_behind_says_what_became_of_it(sleeper) -> None:
    store = DictStore()
    watches = _watches(store, 2)
    seq, label, _ = store.get(mark_key(1)).decode().split("\t")
    store.set(mark_key(1), f"{seq}\t{label}\t{_process_of(sleeper)}")
    watches[0].arrive("the checkpoint at step 2")
    sleeper.kill()
    sleeper.wait()
    assert watches[0].who_is_missing(watches[0].missing()) == (
        f"not arrived: rank 1 (last reached start-up); rank 1: pid {sleeper.pid} is gone "
        "(killed, crashed or exited)"
    )


@needs_proc
def test_a_signal_ends_the_wait_when_a_rank_inside_is_gone(sleeper, monkeypatch) -> None:
    """torchrun's SIGTERM after a worker died: a survivor waiting in the phase the dead rank
    had reached ended only at the collective timeout; now at once, naming it."""
    ended: list[tuple[str, int]] = []
    monkeypatch.setattr(collective_watch, "abandon", lambda line, code: ended.append((line, code)))
    store = DictStore()
    watches = _watches(store, 2)
    collective_watch._end_if_peers_gone(watches[0], signal.SIGTERM)
    assert ended == []  # every rank in the phase and running: the step ends as usual
    seq, label, _ = store.get(mark_key(1)).decode().split("\t")
    store.set(mark_key(1), f"{seq}\t{label}\t{_process_of(sleeper)}")
    sleeper.kill()
    sleeper.wait()
    collective_watch._end_if_peers_gone(watches[0], signal.SIGTERM)
    ((line, code),) = ended
    assert code == 143 and line.startswith(
        "trainbudget train: rank 0: SIGTERM while waiting in start-up; every rank reached it; "
        f"inside it, rank 1: pid {sleeper.pid} is gone (killed, crashed or exited)"
    )


def test_gloo_s_reason_is_its_first_sentence_without_source_paths() -> None:
    text = (
        "Got the following error when running the callback: RuntimeError: [/__w/pytorch/"
        "third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:142: "
        "Connection reset by peer. This is typically caused by ..."
    )
    assert collective_watch._reason(text) == "Read error [127.0.0.1]:142: Connection reset by peer"
    assert collective_watch._reason("[pair.cc:1] Timed out waiting") == "Timed out waiting"


# ---- two gloo ranks, end to end ---------------------------------------------------------------

TINY = (
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--micro-batch", "2", "--log-interval", "1000", "--eval-interval", "1000"),
    *("--no-tensorboard", "--device", "cpu", "--steps", "100000", "--checkpoint-every", "0"),
    # above the probe's freezes of rank 1 (0.6 s each) on a loaded machine, and above the
    # rendezvous wait for the other rank's start-up (one full suite at load 8 saw rank 1 take
    # over 8 s to import torch and arrive: rank 0 gave up before the probe began)
    *("--collective-timeout-seconds", "20"),
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from trainbudget.data.prepare import prepare

    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


def _marks(port: int):
    """A client of rank 0's store: each rank's (SEQ, LABEL)."""
    import torch.distributed as dist

    deadline = time.monotonic() + 120
    while True:
        try:
            store = dist.TCPStore(
                "127.0.0.1",
                port,
                is_master=False,
                timeout=datetime.timedelta(seconds=30),
                wait_for_workers=False,
            )
            break
        except RuntimeError:
            assert time.monotonic() < deadline, "rank 0's store never answered"
            time.sleep(0.2)
    prefixed = dist.PrefixStore("trainbudget/attempt-0", store)

    def read(rank: int) -> tuple[int, str]:
        seq, _, rest = prefixed.get(mark_key(rank)).decode().partition("\t")
        return int(seq), rest.partition("\t")[0]  # the rendezvous's mark names no process

    return read


def _freeze_inside_a_step(rank1: subprocess.Popen, read) -> str:
    """SIGSTOP rank 1 at moments until it is frozen inside a step's phase that rank 0 is in too
    (rank 0 then waits in that phase's collective); the phase's label."""
    deadline = time.monotonic() + 120
    while not all("step" in read(rank)[1] for rank in (0, 1)):  # start-up is not probed
        assert time.monotonic() < deadline, "the ranks never reached step 1"
        time.sleep(0.1)
    for attempt in range(200):
        os.kill(rank1.pid, signal.SIGSTOP)
        _await_state(rank1.pid, "Tt")
        time.sleep(0.3)  # rank 0 runs on to the first collective that needs rank 1 (ms)
        (seq0, label0), (seq1, _) = read(0), read(1)
        time.sleep(0.3)
        if seq0 == seq1 and "step" in label0 and read(0)[0] == seq0:  # and it stays there
            return label0
        os.kill(rank1.pid, signal.SIGCONT)
        time.sleep(0.01 * (attempt % 5))
    pytest.fail("rank 1 was never frozen inside rank 0's phase")


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["killed", "stopped"])
def test_the_survivor_names_the_rank_that_failed_inside_the_phase(tmp_path, data, fault):
    pytest.importorskip("torch")
    from trainrun import finish, free_port, kill, message_lines, rank_by_hand

    port = free_port()
    rank0, rank1 = (
        rank_by_hand(tmp_path / "run", data, *TINY, rank=r, world_size=2, port=port) for r in (0, 1)
    )
    try:
        try:
            label = _freeze_inside_a_step(rank1, _marks(port))
        except Exception as err:  # rank 0 ended early: say why
            kill(rank1)
            pytest.fail(f"{err!r}; rank 0: {finish(rank0, timeout=30).stderr[-3000:]}")
        if fault == "killed":
            os.kill(rank1.pid, signal.SIGKILL)
        r = finish(rank0, timeout=60)
    finally:
        kill(rank1)
        if rank0.poll() is None:
            kill(rank0)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and ".cc:" not in r.stderr  # no gloo source paths
    lines = [x for x in message_lines(r.stderr) if x.startswith("trainbudget train:")]
    assert len(lines) == 1, r.stderr[-3000:]
    what = "is gone (killed, crashed or exited)" if fault == "killed" else "is stopped (SIGSTOP"
    assert f"rank 0: {label} " in lines[0], lines[0]
    assert f"every rank reached it; inside it, rank 1: pid {rank1.pid} {what}" in lines[0]
