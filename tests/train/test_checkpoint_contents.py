"""Issue 15, item 7 (and item 9's deleted manifest): a checkpoint whose manifest is consistent
but whose tensors are not this run's -- another model's model.pt, a wrong-shape optimizer.pt,
a state.json whose step is not the folder's -- is rejected by name before anything is loaded,
and resume falls back to the previous valid checkpoint (train.checkpointing.contents).

Each case first reproduces what happened without the check: torch's load_state_dict raised a
long size-mismatch traceback for the model, accepted the wrong-shape optimizer state silently
(the crash came at step 1), and nothing looked at state.json's step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainrun  # noqa: E402
from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.model.optim import make_optimizer, weight_dtype  # noqa: E402
from trainbudget.model.transformer import build_model  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import (  # noqa: E402
    CheckpointError,
    latest_valid_checkpoint,
    save_checkpoint,
)
from trainbudget.train.checkpointing.contents import check_contents, checked_state  # noqa: E402
from trainbudget.train.checkpointing.manifest import MANIFEST, write_manifest  # noqa: E402
from trainbudget.train.checkpointing.sharded import save_sharded  # noqa: E402
from trainrun import ok  # noqa: E402

pytestmark = pytest.mark.torch

TINY = trainrun.TINY_MODEL
OTHER = ("n_layers=1", "d_model=64", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


def trained(overrides=TINY, precision: str = "fp32"):
    """A model and its AdamW after one step (so the optimizer has state)."""
    model = build_model(resolve_model("gpt2", overrides), seed=0, dtype=weight_dtype(precision))
    optimizer = make_optimizer(model, precision=precision, optimizer="adamw")
    model(torch.zeros(1, 8, dtype=torch.long))[0].float().sum().backward()
    optimizer.step()
    return model, optimizer


def rehash(folder: Path) -> None:
    """Rewrite the manifest over the folder's files as they now are: consistent again."""
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).unlink()
    write_manifest(folder, manifest["step"], manifest["world_size"])


# ---- the check, in one process ---------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path):
    model, optimizer = trained()
    files = {"model.pt": model.state_dict(), "optimizer.pt": optimizer.state_dict()}
    folder = save_checkpoint(tmp_path, 10, files=files)
    return folder, model, optimizer


def test_the_run_s_own_checkpoint_passes(saved) -> None:
    folder, model, optimizer = saved
    check_contents(folder, {"format": "full"}, model, optimizer)


def test_another_model_s_weights(saved) -> None:
    folder, model, optimizer = saved
    other, _ = trained(OTHER)
    with pytest.raises(RuntimeError) as caught:  # without the check
        model.load_state_dict(other.state_dict())
    assert "size mismatch" in str(caught.value) and str(caught.value).count("\n") >= 5
    torch.save(other.state_dict(), folder / "model.pt")
    with pytest.raises(CheckpointError) as caught:
        check_contents(folder, {"format": "full"}, model, optimizer)
    err = caught.value
    assert err.value == str(folder / "model.pt") and "\n" not in str(err)
    assert (
        "holds another model: " in err.rule
        and "tok.weight is (257, 64) float32, this run's is (257, 32) float32" in err.rule
    )


def test_a_wrong_shape_optimizer_state(saved) -> None:
    folder, model, optimizer = saved
    state = optimizer.state_dict()
    state["state"][0]["exp_avg"] = torch.zeros(3, 5)
    fresh = make_optimizer(model, precision="fp32", optimizer="adamw")
    fresh.load_state_dict(state)  # without the check: accepted, the crash comes at the step
    torch.save(state, folder / "optimizer.pt")
    with pytest.raises(CheckpointError) as caught:
        check_contents(folder, {"format": "full"}, model, optimizer)
    assert caught.value.value == str(folder / "optimizer.pt")
    assert "state.0.exp_avg is (3, 5) float32, its parameter's is" in caught.value.rule


def test_another_model_s_optimizer_with_more_parameters(saved) -> None:
    folder, model, optimizer = saved
    _, big_optimizer = trained(("n_layers=2", *TINY[1:]))
    torch.save(big_optimizer.state_dict(), folder / "optimizer.pt")
    with pytest.raises(CheckpointError, match=r"parameter groups of \[\d+\] parameters"):
        check_contents(folder, {"format": "full"}, model, optimizer)


def test_mixed_precision_masters_are_checked(tmp_path: Path) -> None:
    model, optimizer = trained(precision="bf16-mixed")
    state = optimizer.state_dict()
    folder = save_checkpoint(
        tmp_path, 1, files={"model.pt": model.state_dict(), "optimizer.pt": state}
    )
    check_contents(folder, {"format": "full"}, model, optimizer)
    state["masters"][2] = state["masters"][2].to(torch.bfloat16)  # a master in 16 bits
    torch.save(state, folder / "optimizer.pt")
    with pytest.raises(
        CheckpointError, match=r"masters\.2 is .* bfloat16, its parameter's is .* float32"
    ):
        check_contents(folder, {"format": "full"}, model, optimizer)


def test_a_sharded_checkpoint_of_another_model(tmp_path: Path) -> None:
    model, optimizer = trained()
    save_sharded(tmp_path / "dcp", model, optimizer)  # one process: DCP without a group
    check_contents(tmp_path, {"format": "dcp"}, model, optimizer)
    other, other_optimizer = trained(OTHER)
    with pytest.raises(CheckpointError) as caught:
        check_contents(tmp_path, {"format": "dcp"}, other, other_optimizer)
    assert caught.value.value == str(tmp_path / "dcp" / ".metadata")
    assert "holds another model" in caught.value.rule


def test_state_json_must_say_the_folder_s_step(tmp_path: Path) -> None:
    state = {"step": 7, "world_size": 1, "spec": {}, "data": {}, "config": {}}
    folder = save_checkpoint(tmp_path, 10, files={"state.json": state})
    with pytest.raises(CheckpointError, match="says step 7; the folder is step-00000010"):
        checked_state(folder)
    folder = save_checkpoint(tmp_path, 7, files={"state.json": state})
    assert checked_state(folder)["step"] == 7
    folder = save_checkpoint(tmp_path, 8, files={"state.json": {"step": 8}})
    with pytest.raises(CheckpointError, match="lacks world_size, spec, data, config"):
        checked_state(folder)


def test_a_folder_whose_manifest_was_deleted_is_named(tmp_path: Path) -> None:
    for step in (1, 2):
        save_checkpoint(tmp_path, step, files={"state.json": {"step": step}})
    (tmp_path / "step-00000002" / MANIFEST).unlink()
    lines: list[str] = []
    assert latest_valid_checkpoint(tmp_path, log=lines.append) == tmp_path / "step-00000001"
    assert lines == [
        f"checkpoint step-00000002 rejected: checkpoint = '{tmp_path / 'step-00000002' / MANIFEST}'"
        ": missing (not a complete checkpoint); falling back to step-00000001"
    ]


# ---- resume falls back, end to end -----------------------------------------------------------

RUN = trainrun.CHECKPOINT_RUN  # its 6-step run: tests/train/conftest.py `six_steps`


def another_model(folder: Path) -> None:
    torch.save(trained(OTHER)[0].state_dict(), folder / "model.pt")


def wrong_shape_optimizer(folder: Path) -> None:
    state = torch.load(folder / "optimizer.pt", weights_only=True)
    state["state"][3]["exp_avg_sq"] = torch.zeros(2, 2)
    torch.save(state, folder / "optimizer.pt")


def edited_step(folder: Path) -> None:
    state = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({**state, "step": 7}))


def deleted_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


@pytest.mark.parametrize(
    ("tamper", "file", "reason"),
    [
        (another_model, "model.pt", "holds another model: "),
        (wrong_shape_optimizer, "optimizer.pt", "state.3.exp_avg_sq is (2, 2) float32"),
        (edited_step, "state.json", "says step 7; the folder is step-00000006"),
        (deleted_manifest, MANIFEST, "missing (not a complete checkpoint)"),
    ],
)
def test_resume_rejects_it_by_name_and_falls_back(tmp_path, data, six_steps, tamper, file, reason):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out)
    newest = out / "checkpoints" / "step-00000006"
    tamper(newest)
    if tamper is not deleted_manifest:
        rehash(newest)  # the manifest agrees with the tampered files
    r = ok(trainrun.train_run(out, data, *RUN, "--steps", "8", "--resume"))
    assert "Traceback" not in r.stderr
    rejected = [line for line in r.stderr.splitlines() if "rejected" in line]
    assert len(rejected) == 1, r.stderr[-3000:]
    assert rejected[0].startswith(
        f"trainbudget train: checkpoint step-00000006 rejected: checkpoint = '{newest / file}': "
    )
    assert reason in rejected[0] and rejected[0].endswith("falling back to step-00000003")
    assert f"resumed from {out / 'checkpoints' / 'step-00000003'} (step 3" in r.stderr
