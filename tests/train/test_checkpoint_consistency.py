"""Issue 24, part 4 (train.checkpointing.consistency): two faults a consistent manifest let
through, each now a rejected checkpoint and a fallback to the newest one that passes.

- A malicious or unloadable rank-NNNNN.pt in the newest checkpoint (manifest rehashed): the
  resume failed as a whole ("refuses the whole resume") instead of falling back.
- An edited step counter (state.json's step, the folder renamed to match, the manifest
  rehashed) was resumed from the forged step. It is now checked against the batch stream's
  position and the optimizer's own step count, and the line names both values.

The end-to-end cases resume copies of one 6-step run (checkpoints at steps 3 and 6) of a tiny
model on the CPU: a few seconds each."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainrun  # noqa: E402
from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.model.optim import make_optimizer  # noqa: E402
from trainbudget.model.transformer import build_model  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import (  # noqa: E402
    CheckpointError,
    save_checkpoint,
)
from trainbudget.train.checkpointing.consistency import (  # noqa: E402
    check_rank_files,
    check_step,
    optimizer_steps,
)
from trainbudget.train.checkpointing.manifest import MANIFEST, write_manifest  # noqa: E402
from trainbudget.train.checkpointing.sharded import save_sharded  # noqa: E402
from trainbudget.train.rng import capture_rng_state  # noqa: E402
from trainrun import ok  # noqa: E402

pytestmark = pytest.mark.torch

TINY = trainrun.TINY_MODEL


def state(step: int, data_step: int | None = None, **guard) -> dict:
    """state.json's counters as the loop leaves them (`guard`: the guard's counters)."""
    data_step = step if data_step is None else data_step
    counters = {"skipped_nonfinite": 0, "rollbacks": 0, "skipped_data_steps": [], **guard}
    return {
        "step": step,
        "data_step": data_step,
        "loader": {"step": data_step},
        "guard": counters,
        "scaler": {},
    }


# ---- the step counter against the batch stream and the optimizer ------------------------------


def test_a_consistent_checkpoint_passes(tmp_path: Path) -> None:
    check_step(tmp_path, state(6), 6)
    check_step(tmp_path, state(6), None)  # SGD keeps no count: the stream alone
    # two non-finite steps skipped their updates; a rollback dropped batches 4-6 (0-based 3-5)
    check_step(tmp_path, state(6, skipped_nonfinite=2), 4)
    check_step(tmp_path, state(6, 9, rollbacks=1, skipped_data_steps=[3, 4, 5]), 5)
    # fp16 loss scaling: GradScaler skips overflowing steps without the guard counting them
    check_step(tmp_path, {**state(6), "scaler": {"scale": 1024.0}}, 1)


@pytest.mark.parametrize(
    ("saved", "optimizer", "says"),
    [
        (state(7, 6), 6, "says step 7, but the batch stream is at step 6 (0 batches dropped"),
        (state(5, 6), 6, "says step 5, but the batch stream is at step 6 (0 batches dropped"),
        # the stream's two counters edited too: the optimizer's own count still tells
        (state(7), 6, "says step 7, but the optimizer has taken 6 steps (its own 'step' count"),
        (state(5), 6, "says step 5, but the optimizer has taken 6 steps"),
        (state(6, 6, skipped_nonfinite=1), 4, "taken 4 steps (its own 'step' count; 5 to 6"),
        ({**state(6), "loader": {"step": 5}}, 6, "says data_step 6 but loader step 5"),
        ({**state(6), "guard": {}}, 6, "guard skipped_data_steps is None, not a count"),
        ({"step": 6}, 6, "lacks the batch stream's position or the guard's counters"),
    ],
)
def test_an_edited_step_counter_is_named_with_both_values(tmp_path, saved, optimizer, says):
    with pytest.raises(CheckpointError) as caught:
        check_step(tmp_path, saved, optimizer)
    assert caught.value.value == str(tmp_path / "state.json")
    assert says in caught.value.rule and "\n" not in str(caught.value)


def trained(optimizer: str = "adamw", steps: int = 2):
    model = build_model(resolve_model("gpt2", TINY), seed=0, dtype=torch.float32)
    opt = make_optimizer(model, precision="fp32", optimizer=optimizer)
    for _ in range(steps):
        model(torch.zeros(1, 8, dtype=torch.long))[0].float().sum().backward()
        opt.step()
    return model, opt


def test_the_optimizer_s_own_count_is_read_from_either_format(tmp_path: Path) -> None:
    model, opt = trained(steps=2)
    full = save_checkpoint(tmp_path / "full", 2, files={"optimizer.pt": opt.state_dict()})
    assert optimizer_steps(full, {"format": "full"}) == 2
    save_sharded(tmp_path / "dcp" / "dcp", model, opt)  # one process: DCP without a group
    assert optimizer_steps(tmp_path / "dcp", {"format": "dcp"}) == 2
    _, sgd = trained("sgd", steps=1)
    plain = save_checkpoint(tmp_path / "sgd", 1, files={"optimizer.pt": sgd.state_dict()})
    assert optimizer_steps(plain, {"format": "full"}) is None


# ---- rank files --------------------------------------------------------------------------------


class Shell:
    """Unpickling this runs a shell command: pickle calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_rank_files_are_loaded_and_tried_without_changing_the_generators(tmp_path: Path):
    folder = save_checkpoint(tmp_path, 1, files={"rank-00000.pt": {"rng": capture_rng_state()}})
    random.random()  # this process's generators move on from the saved states
    before = capture_rng_state()
    check_rank_files(folder)
    after = capture_rng_state()
    assert torch.equal(before["torch"], after["torch"])
    assert before["python"]["state"].equal(after["python"]["state"])


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (lambda pwned: {"rng": Shell(f"touch {pwned}")}, "refused by torch.load(weights_only"),
        (lambda _: torch.zeros(3), "holds no RNG states (python, numpy, torch)"),
        (
            lambda _: {"rng": {**capture_rng_state(), "python": {"state": torch.zeros(3)}}},
            "holds RNG states that cannot be restored (",
        ),
    ],
)
def test_a_bad_rank_file_is_named(tmp_path: Path, payload, says) -> None:
    folder = save_checkpoint(tmp_path / "c", 1, files={"rank-00000.pt": capture_rng_state()})
    pwned = tmp_path / "pwned"
    torch.save(payload(pwned), folder / "rank-00000.pt")
    with pytest.raises(CheckpointError) as caught:
        check_rank_files(folder)
    assert caught.value.value == str(folder / "rank-00000.pt")
    assert says in caught.value.rule and "\n" not in str(caught.value)
    assert not pwned.exists()


# ---- resume falls back, end to end -------------------------------------------------------------

RUN = trainrun.CHECKPOINT_RUN  # its 6-step run: tests/train/conftest.py `six_steps`


def rehash(folder: Path, step: int) -> None:
    """Rewrite the manifest over the folder's files as they now are: consistent again."""
    (folder / MANIFEST).unlink()
    write_manifest(folder, step, 1)


def malicious_rank_file(checkpoints: Path, pwned: Path) -> Path:
    newest = checkpoints / "step-00000006"
    torch.save({"rng": Shell(f"touch {pwned}")}, newest / "rank-00000.pt")
    rehash(newest, 6)
    return newest / "rank-00000.pt"


def forge_step(checkpoints: Path, edit_stream: bool) -> Path:
    """step-00000006 made to say step 7 (the folder renamed, the manifest rehashed); with
    `edit_stream`, the batch stream's two counters edited alike."""
    forged = checkpoints / "step-00000007"
    os.rename(checkpoints / "step-00000006", forged)
    saved = json.loads((forged / "state.json").read_text())
    saved["step"] = 7
    if edit_stream:
        saved["data_step"] = saved["loader"]["step"] = 7
    (forged / "state.json").write_text(json.dumps(saved))
    rehash(forged, 7)
    return forged / "state.json"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("malicious_rank_file", "refused by torch.load(weights_only=True)"),
        ("forged_step", "says step 7, but the batch stream is at step 6"),
        ("forged_step_and_stream", "says step 7, but the optimizer has taken 6 steps"),
    ],
)
def test_resume_rejects_it_by_name_and_falls_back(tmp_path, data, six_steps, fault, reason):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out)
    checkpoints, pwned = out / "checkpoints", tmp_path / "pwned"
    if fault == "malicious_rank_file":
        file, name = malicious_rank_file(checkpoints, pwned), "step-00000006"
    else:
        file, name = forge_step(checkpoints, fault == "forged_step_and_stream"), "step-00000007"
    r = ok(trainrun.train_run(out, data, *RUN, "--steps", "8", "--resume"))
    assert "Traceback" not in r.stderr and not pwned.exists()
    rejected = [line for line in r.stderr.splitlines() if "rejected" in line]
    assert len(rejected) == 1, r.stderr[-3000:]
    assert rejected[0].startswith(
        f"trainbudget train: checkpoint {name} rejected: checkpoint = '{file}': "
    )
    assert reason in rejected[0] and rejected[0].endswith("falling back to step-00000003")
    assert f"resumed from {checkpoints / 'step-00000003'} (step 3" in r.stderr
    assert trainrun.steps(out)[8]  # and it trained on to the end
