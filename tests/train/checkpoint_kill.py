"""Kills checkpoint writes with SIGKILL, for test_checkpoint_store.py (must-show 2).

Run as `python checkpoint_kill.py PLAN.json` in a fresh interpreter (torch imported once). For
each planned kill it writes a valid checkpoint at step 100 into the kill's own root, then forks
a child that saves step 200 into the same root and is killed with SIGKILL:
  {"kind": "point", "at": "before-rename"}   by the `fault` hook at that named point;
  {"kind": "write", "file": "model.pt", "bytes": n}   inside torch.save of that file, once n
      bytes of it have reached the file (a truncated file is left in the temporary folder);
  {"kind": "time", "fraction": f}   by this process, f x (the seconds an unkilled save
      takes) after the fork (with f > 1 the child may have finished).
Prints one JSON object: the measured seconds of an unkilled save and, per kill, how the child
ended. The checks are the test's; this only produces the wreckage.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch

from trainbudget.train.checkpointing.checkpoint import save_checkpoint

CHILD_DEADLINE_SECONDS = 60.0


def payloads(step: int, n_floats: int) -> dict[str, object]:
    """What test_checkpoint_store.py expects back: model.pt holds arange(n) + step."""
    return {
        "model.pt": {"w": torch.arange(n_floats, dtype=torch.float32) + step},
        "optimizer.pt": {"exp_avg": torch.full((n_floats // 2,), float(step))},
        "state.json": {"step": step},
        "rank-00000.pt": {"rank": 0, "step": step},
    }


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KillAfterBytes:
    """A file object that lets `limit` bytes through, flushes them to the file and dies."""

    def __init__(self, f, limit: int) -> None:
        self.f, self.left = f, limit

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        if len(data) >= self.left:
            self.f.write(data[: self.left])
            self.f.flush()
            _die()
        self.left -= len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _arm(kill: dict):
    """The `fault` hook for a kill, patching torch.save for a kill inside a write."""
    if kill["kind"] == "write":
        real_save = torch.save

        def save(obj, f, *args, **kwargs):
            if Path(f.name).name == kill["file"]:
                f = _KillAfterBytes(f, kill["bytes"])
            return real_save(obj, f, *args, **kwargs)

        torch.save = save
    if kill["kind"] == "point":
        return lambda point: _die() if point == kill["at"] else None
    return None


def _child(root: Path, kill: dict, n_floats: int) -> None:
    code = 3
    try:
        save_checkpoint(root, 200, files=payloads(200, n_floats), keep=3, fault=_arm(kill))
        code = 0
    finally:
        os._exit(code)  # never return into the parent's code


def _wait(pid: int) -> dict:
    deadline = time.monotonic() + CHILD_DEADLINE_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return {"hung": True, "signal": None, "exit": None}
        time.sleep(0.002)
    return {
        "hung": False,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
    }


def main(plan_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    base, n_floats = Path(plan["base"]), plan["n_floats"]
    torch.set_num_threads(1)  # fork-safe: no intra-op thread pool in the parent
    t = time.perf_counter()
    save_checkpoint(base / "calibration", 100, files=payloads(100, n_floats))
    results = {"save_seconds": time.perf_counter() - t, "kills": []}
    for i, kill in enumerate(plan["kills"]):
        root = base / f"kill-{i:02d}"
        save_checkpoint(root, 100, files=payloads(100, n_floats))
        pid = os.fork()
        if pid == 0:
            _child(root, kill, n_floats)
        delay = None
        if kill["kind"] == "time":
            delay = kill["fraction"] * results["save_seconds"]
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)  # a finished child is a zombie until waited: harmless
        results["kills"].append({"root": str(root), "delay": delay, **_wait(pid)})
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
