"""train.launch.run_lock: one owner per run folder (issue 15, item 1), without torch. The end-to-end
proof -- two `trainbudget train --out X` at once -- is tests/train/test_run_folder.py."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.train.launch import run_lock
from trainbudget.train.launch.run_lock import (
    LOCK_FILE,
    lock_run_folder,
    make_room,
    own_run_folder,
    read_holder,
    refuse_if_locked,
)

SRC = Path(__file__).resolve().parents[3] / "src"


def test_a_second_lock_names_the_holder_and_leaves_its_file_alone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with lock_run_folder(run, "run") as first:
        before = (run / LOCK_FILE).read_bytes()
        # flock conflicts between two open files even in one process
        with pytest.raises(SpecError) as err:
            lock_run_folder(run, "run")
        line = str(err.value)
        assert "\n" not in line and line.startswith("out = 'run': is in use by another run")
        assert f"PID {os.getpid()} on {socket.gethostname()}" in line
        assert (run / LOCK_FILE).read_bytes() == before  # the loser truncates nothing
        with pytest.raises(SpecError, match=f"PID {os.getpid()}"):
            refuse_if_locked(run, "run")
        assert read_holder(run / LOCK_FILE) == first.holder
    with lock_run_folder(run, "run") as again:  # released: free again
        assert again.holder.token != first.holder.token


def test_the_kernel_releases_the_lock_of_a_killed_process(tmp_path: Path) -> None:
    # SIGKILL leaves no chance to clean up: the lock must still be free afterwards
    run = tmp_path / "run"
    code = (
        "import sys; from pathlib import Path; from trainbudget.train.launch.run_lock import "
        "lock_run_folder; lock = lock_run_folder(Path(sys.argv[1]), 'run'); "
        "print('held', flush=True); sys.stdin.read()"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline() == "held\n"  # it holds the lock now
        with pytest.raises(SpecError, match=f"PID {holder.pid} on "):
            lock_run_folder(run, "run")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    with lock_run_folder(run, "run") as lock:
        assert lock.holder.pid == os.getpid()


def test_a_look_creates_nothing(tmp_path: Path) -> None:
    refuse_if_locked(tmp_path / "nowhere", "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_without_flock_the_error_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(run_lock, "fcntl", None)
    with pytest.raises(SpecError, match="cannot be locked on this platform") as err:
        lock_run_folder(tmp_path / "run", "run")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def _ranks(folders: list[Path], out: str = "run") -> list[object]:
    """own_run_folder on len(folders) ranks, each a thread with its own folder, the
    collectives played by a barrier; each rank's result (a lock, None) or error."""
    n = len(folders)
    barrier = threading.Barrier(n, timeout=60)  # a bug here fails instead of hanging
    slots: list[object] = [None] * n
    results: list[object] = [None] * n

    def rank_main(rank: int) -> None:
        def share(value):
            if rank == 0:
                slots[0] = value
            barrier.wait()
            shared = slots[0]
            barrier.wait()  # everyone read it before anyone writes again
            return shared

        def gather(value):
            slots[rank] = value
            barrier.wait()
            values = list(slots)
            barrier.wait()
            return values

        try:
            results[rank] = own_run_folder(
                folders[rank], out, rank=rank, world_size=n, share=share, gather=gather
            )
        except SpecError as err:
            results[rank] = err

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_every_rank_must_see_the_folder_rank_0_locked(tmp_path: Path) -> None:
    same = tmp_path / "shared"
    ok = _ranks([same, same, same])
    assert isinstance(ok[0], run_lock.RunLock) and ok[1] is None and ok[2] is None
    ok[0].release()
    (tmp_path / "elsewhere").mkdir()
    bad = _ranks([same, same, tmp_path / "elsewhere"])
    assert all(isinstance(r, SpecError) for r in bad), bad
    assert "ranks [2] do not see the folder rank 0 locked" in str(bad[0])
    lock_run_folder(same, "run").release()  # rank 0 let its lock go


def test_a_busy_folder_stops_every_rank_with_rank_0s_message(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with lock_run_folder(run, "run"):
        results = _ranks([run, run])
    assert all(isinstance(r, SpecError) and "is in use by another run" in str(r) for r in results)


def test_a_fresh_run_is_refused_over_an_earlier_ones_metrics_or_clears_them(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    (run / "metrics.after-step-00000003.jsonl").write_text('{"step": 4, "loss": 2.0}\n')
    (run / "summary.json").write_text("{}")
    with pytest.raises(SpecError) as err:
        make_room(run, "run", overwrite=False, main=True)
    assert "metrics (" in str(err.value) and "--resume" in str(err.value)
    assert "--overwrite" in str(err.value)
    assert make_room(run, "run", overwrite=True, main=False) == []  # only the main rank deletes
    deleted = make_room(run, "run", overwrite=True, main=True)
    assert {p.name for p in deleted} == {
        "metrics.jsonl",
        "metrics.after-step-00000003.jsonl",
        "summary.json",
    }
    assert sorted(p.name for p in run.iterdir()) == ["data"]  # the prepared data stays
    assert make_room(run, "run", overwrite=False, main=True) == []


def test_a_file_system_without_locks_gets_one_line(tmp_path: Path, monkeypatch) -> None:
    class NoLocks:
        LOCK_EX, LOCK_SH, LOCK_NB = 2, 1, 4

        @staticmethod
        def flock(_fd, _op):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(run_lock, "fcntl", NoLocks)
    with pytest.raises(SpecError, match="cannot be locked \\(No locks available\\)") as err:
        lock_run_folder(tmp_path / "run", "run")
    assert "\n" not in str(err.value)
    refuse_if_locked(tmp_path / "run", "run")  # the look before the start stays quiet


def test_a_folder_named_run_lock_gets_one_line_naming_out(tmp_path: Path) -> None:
    (tmp_path / "run" / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(SpecError, match=r"run\.lock is a folder; the run's lock must be a file"):
        lock_run_folder(tmp_path / "run", "run")
    assert (tmp_path / "run" / LOCK_FILE).is_dir()  # left as it was


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_an_unwritable_out_gets_one_line_naming_out(tmp_path: Path, monkeypatch, code: int) -> None:
    # root writes anywhere, so the read-only folder or file system is the kernel's answer, faked
    def refuse(path, *_args, **_kwargs):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(run_lock.os, "open", refuse)
    with pytest.raises(SpecError) as err:
        lock_run_folder(tmp_path / "run", "ro/t")
    line = str(err.value)
    assert line.startswith(f"out = 'ro/t': cannot be written ({os.strerror(code)}")
    assert "\n" not in line and line.endswith("choose a writable --out")
