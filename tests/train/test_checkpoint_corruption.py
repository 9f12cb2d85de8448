"""Issue 6, must-shows 3 and 4: truncated, flipped, missing and extra files and bad manifests
are named at load and resume falls back to the previous checkpoint; a pickle that would call
os.system is refused by torch.load(weights_only=True)."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch

from checkpoint_payloads import N_WEIGHTS, edit_manifest, files, flip_middle_byte, loaded_step
from trainbudget.train.checkpointing.checkpoint import (
    MANIFEST,
    CheckpointError,
    latest_valid_checkpoint,
    load_file,
    save_checkpoint,
    verify_checkpoint,
)
from trainbudget.train.checkpointing.manifest import write_manifest

pytestmark = pytest.mark.torch

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


# ---------------------------------------------------------------- must-show 3: corrupt files


def edited_hash(m: dict) -> dict:
    m["files"]["state.json"]["sha256"] = "0" * 64
    return m


CORRUPTIONS = {
    "truncated": (
        lambda p: os.truncate(p / "model.pt", (p / "model.pt").stat().st_size // 2),
        "model.pt",
        "truncated: 131,",
    ),
    "grown": (lambda p: (p / "optimizer.pt").open("ab").write(b"x"), "optimizer.pt", "grown"),
    "flipped_bit": (lambda p: flip_middle_byte(p / "model.pt"), "model.pt", "SHA-256 differs"),
    "missing": (lambda p: (p / "optimizer.pt").unlink(), "optimizer.pt", "missing (listed"),
    "extra": (lambda p: (p / "notes.txt").write_text("hi"), "notes.txt", "not in the manifest"),
    "edited_hash": (lambda p: edit_manifest(p, edited_hash), "state.json", "SHA-256 differs"),
    "manifest_not_json": (
        lambda p: (p / MANIFEST).write_text('{"format": 1, "files": {'),
        MANIFEST,
        "cannot be read as JSON",
    ),
    "manifest_without_files": (
        lambda p: edit_manifest(p, lambda m: {k: v for k, v in m.items() if k != "files"}),
        MANIFEST,
        "no 'files'",
    ),
    "manifest_of_another_step": (
        lambda p: edit_manifest(p, lambda m: {**m, "step": 300}),
        MANIFEST,
        "says step 300",
    ),
}


@pytest.fixture
def two_checkpoints(tmp_path: Path) -> tuple[Path, Path, Path]:
    for step in (100, 200):
        save_checkpoint(tmp_path, step, files=files(step, N_WEIGHTS))
    return tmp_path, tmp_path / "step-00000100", tmp_path / "step-00000200"


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corruption_is_named_and_resume_falls_back(two_checkpoints, case: str) -> None:
    root, older, newer = two_checkpoints
    corrupt, name, rule = CORRUPTIONS[case]
    corrupt(newer)
    with pytest.raises(CheckpointError) as caught:
        verify_checkpoint(newer)
    err = caught.value
    assert err.field == "checkpoint" and err.value == str(newer / name), str(err)
    assert rule in err.rule, str(err)
    assert str(err).startswith(f"checkpoint = '{newer / name}': ")
    lines: list[str] = []
    assert latest_valid_checkpoint(root, log=lines.append) == older
    assert lines == [f"checkpoint step-00000200 rejected: {err}; falling back to step-00000100"]
    assert "\n" not in lines[0]
    assert loaded_step(older) == 100
    assert newer.exists()  # resume deletes nothing: the evidence stays


def test_no_valid_checkpoint_left(two_checkpoints) -> None:
    root, older, newer = two_checkpoints
    (newer / "model.pt").unlink()
    flip_middle_byte(older / "model.pt")
    lines: list[str] = []
    assert latest_valid_checkpoint(root, log=lines.append) is None
    assert len(lines) == 2
    assert lines[0].endswith("falling back to step-00000100")
    assert lines[1].startswith("checkpoint step-00000100 rejected: checkpoint = ")
    assert lines[1].endswith(
        "SHA-256 differs from the manifest (file corrupt); no older valid checkpoint"
    )


def test_a_flipped_bit_loads_silently_without_the_hash(two_checkpoints) -> None:
    """Why the manifest: torch.load(weights_only=True) accepts the flipped file."""
    _, _, newer = two_checkpoints
    clean = torch.load(newer / "model.pt", weights_only=True)["w"]
    flip_middle_byte(newer / "model.pt")
    flipped = torch.load(newer / "model.pt", weights_only=True)["w"]
    assert flipped.shape == clean.shape
    assert int((flipped != clean).sum()) == 1  # one weight silently changed
    assert torch.equal(load_file(newer, "model.pt")["w"], flipped)  # load_file trusts verify
    with pytest.raises(CheckpointError, match="SHA-256 differs"):
        verify_checkpoint(newer)


def test_load_file_names_the_file(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, 1, files=files(1))
    (path / "state.json").write_text("{")
    (path / "model.pt").write_bytes(b"not a zip")
    for name, rule in [
        ("state.json", "cannot be read as JSON"),
        ("model.pt", "refused by torch.load(weights_only=True)"),
        ("absent.pt", "missing"),
        ("absent.json", "missing"),
    ]:
        with pytest.raises(CheckpointError) as caught:
            load_file(path, name)
        assert caught.value.value == str(path / name) and rule in caught.value.rule


# ---------------------------------------------------------------- must-show 4: malicious pickle


class Shell:
    """Unpickling this runs a shell command: pickle calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_a_pickle_that_runs_a_command_is_refused(tmp_path: Path, writer: str) -> None:
    path = save_checkpoint(tmp_path / "ckpt", 1, files=files(1))
    pwned = tmp_path / "pwned"
    evil = {"w": Shell(f"touch {pwned}")}
    if writer == "torch.save":
        torch.save(evil, path / "model.pt")
    else:
        (path / "model.pt").write_bytes(pickle.dumps(evil, protocol=2))
    (path / MANIFEST).unlink()  # the attacker rewrites the manifest too
    write_manifest(path, 1, 1)
    verify_checkpoint(path)  # the hashes match: only the loader stands in the way
    with pytest.raises(CheckpointError) as caught:
        load_file(path, "model.pt")
    assert caught.value.value == str(path / "model.pt")
    assert "refused by torch.load(weights_only=True)" in caught.value.rule
    assert "weights_only` set to `False" not in str(caught.value)  # no advice to retry unsafely
    assert not pwned.exists()


def test_the_malicious_pickle_is_armed(tmp_path: Path) -> None:
    """The contrast: plain pickle runs the command (so the refusal above is what saves us)."""
    armed = tmp_path / "armed"
    pickle.loads(pickle.dumps({"w": Shell(f"touch {armed}")}))
    assert armed.exists()


def test_torch_save_payload_round_trips_through_a_buffer() -> None:
    """load_file's path: the payload types save_checkpoint promises all load weights-only."""
    payload = {"t": torch.ones(2), "l": [1, 2.5, "x", None], "d": {"n": 3}}
    buf = io.BytesIO()
    torch.save(payload, buf)
    assert torch.load(io.BytesIO(buf.getvalue()), weights_only=True)["l"] == payload["l"]
