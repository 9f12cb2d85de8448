"""Issue 6, must-show 2: SIGKILL at 20 random points of a checkpoint save (every named point of
train.checkpoint.save_checkpoint, byte offsets inside the tensor files) plus time-based kills:
the previous checkpoint survives, the partial one is ignored and cleaned up, and the run goes
on. The kills happen in children of tests/train/checkpoint_kill.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


from checkpoint_payloads import files, loaded_step, steps
from trainbudget.train.checkpointing.checkpoint import (
    checkpoint_name,
    clean_partial,
    latest_valid_checkpoint,
    save_checkpoint,
)

pytestmark = pytest.mark.torch

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


# ---------------------------------------------------------------- must-show 2: kill -9

NAMED_POINTS = [
    "tmp-created",
    *(f"file-written:{n}" for n in ("model.pt", "optimizer.pt", "state.json", "rank-00000.pt")),
    "before-manifest",
    "manifest-written",
    "before-rename",
    "renamed",
    "pruned",
]
KILL_FLOATS = 2**19  # model.pt 2 MiB, optimizer.pt 1 MiB: room to die mid-write


def kill_plan(seed: int) -> list[dict]:
    """20 points drawn by a seeded generator: every named point once and 10 byte offsets inside
    the writes of model.pt and optimizer.pt, shuffled; then 3 kills at random times."""
    rng = random.Random(seed)
    kills = [{"kind": "point", "at": p} for p in NAMED_POINTS]
    for _ in range(20 - len(kills)):
        name, size = rng.choice([("model.pt", 4 * KILL_FLOATS), ("optimizer.pt", 2 * KILL_FLOATS)])
        kills.append({"kind": "write", "file": name, "bytes": rng.randrange(1, size)})
    rng.shuffle(kills)
    return kills + [{"kind": "time", "fraction": rng.uniform(0.0, 1.5)} for _ in range(3)]


def describe(i: int, kill: dict, outcome: dict) -> str:
    what = {k: v for k, v in kill.items() if k != "kind"}
    ended = {k: v for k, v in outcome.items() if k != "root"}
    return f"kill #{i} ({kill['kind']} {what}; child ended {ended})"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")
def test_sigkill_at_random_points_never_loses_the_previous_checkpoint(tmp_path: Path) -> None:
    plan = {"base": str(tmp_path), "n_floats": KILL_FLOATS, "kills": kill_plan(seed=6)}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    proc = subprocess.run(
        [sys.executable, str(HERE / "checkpoint_kill.py"), str(tmp_path / "plan.json")],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    outcomes = json.loads(proc.stdout)["kills"]
    for i, (kill, outcome) in enumerate(zip(plan["kills"], outcomes, strict=True)):
        check_after_kill(Path(outcome["root"]), kill, outcome, describe(i, kill, outcome))
        shutil.rmtree(outcome["root"])  # megabytes each


def check_after_kill(root: Path, kill: dict, outcome: dict, where: str) -> None:
    killed = outcome["signal"] == signal.SIGKILL
    assert not outcome["hung"], where
    assert killed or (kill["kind"] == "time" and outcome["exit"] == 0), where
    published = kill.get("at") in ("renamed", "pruned") or (
        kill["kind"] == "time" and (root / "step-00000200").exists()
    )
    assert steps(root) == ([200, 100] if published else [100]), where
    rejected: list[str] = []
    latest = latest_valid_checkpoint(root, log=rejected.append)
    assert rejected == [], where  # a kill never leaves a listed checkpoint that fails to verify
    assert latest == root / checkpoint_name(200 if published else 100), where
    assert loaded_step(latest) == (200 if published else 100), where
    tmp = root / ".tmp-step-00000200"
    # every named point and write comes after the temporary folder exists; a timed kill may not
    assert tmp.exists() != published or kill["kind"] == "time", where
    if kill["kind"] == "write":  # died inside torch.save: a truncated file was left
        assert (tmp / kill["file"]).stat().st_size == kill["bytes"], where
    partial = [tmp] if tmp.exists() else []
    assert clean_partial(root) == partial, where
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == [], where
    save_checkpoint(root, 300, files=files(300), keep=2)  # the run goes on
    assert steps(root) == [300, 200 if published else 100], where
    assert loaded_step(latest_valid_checkpoint(root, log=pytest.fail)) == 300, where
