"""train/checkpointing/checkpoint.py and train/checkpointing/manifest.py: the checkpoint store of
issue 6 -- round trip, listing, retention, atomic replacement, two ranks, a writer's dcp/ sub-
folder (the manifest's names: plain, or dcp/NAME). Kills during a save: test_checkpoint_kill.py;
corrupt and malicious files: test_checkpoint_corruption.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from checkpoint_payloads import edit_manifest, files, flip_middle_byte, loaded_step, steps
from trainbudget.core.errors import SpecError
from trainbudget.train.checkpointing import manifest as manifest_module
from trainbudget.train.checkpointing.checkpoint import (
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    checkpoint_step,
    clean_partial,
    latest_valid_checkpoint,
    list_checkpoints,
    load_file,
    save_checkpoint,
    verify_checkpoint,
)
from trainbudget.train.checkpointing.manifest import read_manifest, valid_file_name, write_manifest
from trainbudget.train.rng import restore_rng_state

pytestmark = pytest.mark.torch

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


# ---------------------------------------------------------------- round trip, listing, retention


def test_names() -> None:
    assert checkpoint_name(120) == "step-00000120"
    assert checkpoint_step(Path("out/checkpoints/step-00000120")) == 120
    assert checkpoint_step("step-123456789") == 123456789
    with pytest.raises(CheckpointError, match="step-XXXXXXXX"):
        checkpoint_step(Path("out/checkpoints/.tmp-step-00000120"))


def test_the_manifest_half_and_the_cli_need_no_torch() -> None:
    code = (
        "import sys, trainbudget.train.checkpointing.manifest, trainbudget.cli.run.eval_cmd\n"
        "assert 'torch' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_round_trip(tmp_path: Path) -> None:
    random.seed(5)
    saved = files(120)
    path = save_checkpoint(tmp_path, 120, files=saved)
    assert path == tmp_path / "step-00000120"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000120"]  # nothing left over
    manifest = verify_checkpoint(path)
    assert manifest["format"] == 1 and manifest["step"] == 120 and manifest["world_size"] == 1
    assert sorted(manifest["files"]) == sorted(saved)
    assert manifest["files"]["state.json"]["bytes"] == (path / "state.json").stat().st_size
    assert json.loads((path / MANIFEST).read_text()) == manifest
    assert load_file(path, "state.json") == saved["state.json"]
    assert torch.equal(load_file(path, "model.pt")["w"], saved["model.pt"]["w"])
    optimizer = load_file(path, "optimizer.pt", map_location="cpu")
    assert torch.equal(optimizer["state"][0]["exp_avg"], torch.full((3,), 120.0))
    expected = random.random()
    restore_rng_state(load_file(path, "rank-00000.pt")["rng"])
    assert random.random() == expected


def test_listing_is_newest_first_and_needs_a_manifest(tmp_path: Path) -> None:
    assert list_checkpoints(tmp_path / "absent") == []
    assert latest_valid_checkpoint(tmp_path / "absent") is None
    for step in (5, 100, 20):
        save_checkpoint(tmp_path, step, files=files(step), keep=5)
    (tmp_path / "step-00000300").mkdir()  # no manifest: not a checkpoint
    (tmp_path / ".tmp-step-00000400").mkdir()
    (tmp_path / "notes").mkdir()
    assert steps(tmp_path) == [100, 20, 5]
    assert latest_valid_checkpoint(tmp_path) == tmp_path / "step-00000100"


@pytest.mark.parametrize("keep", [2, 3])
def test_retention_keeps_the_newest(tmp_path: Path, keep: int) -> None:
    for i, step in enumerate(range(10, 70, 10)):
        save_checkpoint(tmp_path, step, files=files(step), keep=keep)
        assert steps(tmp_path) == list(range(step, 0, -10))[: min(i + 1, keep)]
    # a rollback re-saves an older step: the one just written is never deleted
    save_checkpoint(tmp_path, 20, files=files(20), keep=keep)
    assert steps(tmp_path) == [*[60, 50, 40][:keep], 20]
    assert loaded_step(tmp_path / "step-00000020") == 20
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("keep", [1, 0, -3, True, 2.5])
def test_keep_below_two_is_refused(tmp_path: Path, keep) -> None:
    with pytest.raises(SpecError, match=r"keep = .*must be >= 2"):
        save_checkpoint(tmp_path / "ckpt", 1, files=files(1), keep=keep)
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize(
    "name", ["../x.pt", ".hidden", MANIFEST, "a/b.pt", "", "/abs.pt", "dcp/x.pt", "dcp/../x.pt"]
)
def test_bad_file_names_are_refused(tmp_path: Path, name: str) -> None:
    # `files` are plain names; dcp/ is filled by a `writer` only
    with pytest.raises(SpecError, match="files"):
        save_checkpoint(tmp_path, 1, files={name: 1})


def test_manifest_names_are_plain_or_one_level_in_dcp() -> None:
    for name in ("model.pt", "state.json", "dcp/.metadata", "dcp/__0_0.distcp", "dcp/..x"):
        assert valid_file_name(name), name
    for name in (
        *("", MANIFEST, ".hidden", "..", "../x.pt", "/etc/passwd", "a/b.pt", "other/.metadata"),
        *("dcp/", "dcp/.", "dcp/..", "dcp/a/b", "dcp//x", "/dcp/x", "dcp/a\\b", "a\\b", None, 3),
    ):
        assert not valid_file_name(name), name


def test_json_is_strict(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"state\.json.*JSON"):
        save_checkpoint(tmp_path, 1, files={"state.json": {"loss": float("nan")}})
    assert not tmp_path.joinpath(".tmp-step-00000001").exists()  # failed before writing


def test_a_payload_that_would_not_load_is_refused_at_save(tmp_path: Path) -> None:
    """A numpy array pickles, but torch.load(weights_only=True) refuses it: found when saving,
    not at resume."""
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(tmp_path, 1, files={"extra.pt": {"a": np.zeros(3)}})
    assert caught.value.value == str(tmp_path / ".tmp-step-00000001" / "extra.pt")
    assert "would be refused by torch.load(weights_only=True)" in caught.value.rule
    assert steps(tmp_path) == []


class Crash(Exception):
    pass


def crash_at(target: str):
    def fault(point: str) -> None:
        if point == target:
            raise Crash(point)

    return fault


def test_resaving_a_step_replaces_it_atomically(tmp_path: Path, monkeypatch) -> None:
    save_checkpoint(tmp_path, 100, files=files(100))
    save_checkpoint(tmp_path, 100, files={**files(100), "state.json": {"step": 100, "v": 2}})
    assert load_file(tmp_path / "step-00000100", "state.json")["v"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000100"]
    # a crash just before the rename: the checkpoint in place is untouched
    with pytest.raises(Crash):
        save_checkpoint(tmp_path, 100, files=files(100), fault=crash_at("before-rename"))
    assert load_file(verify_checkpoint_path(tmp_path, 100), "state.json")["v"] == 2
    assert clean_partial(tmp_path) == [tmp_path / ".tmp-step-00000100"]
    # a crash between moving the old one aside and renaming the new one in: the old one is
    # not listed, and clean_partial puts it back instead of deleting it
    real_rename = os.rename

    def rename(src, dst) -> None:
        if Path(src).name.startswith(".tmp-"):
            raise Crash("rename")
        real_rename(src, dst)

    monkeypatch.setattr(manifest_module.os, "rename", rename)
    with pytest.raises(Crash):
        save_checkpoint(tmp_path, 100, files=files(100))
    monkeypatch.undo()
    assert list_checkpoints(tmp_path) == []
    assert clean_partial(tmp_path) == [tmp_path / ".tmp-step-00000100"]
    assert load_file(verify_checkpoint_path(tmp_path, 100), "state.json")["v"] == 2


def test_clean_partial_removes_leftovers_only(tmp_path: Path) -> None:
    for step in (100, 200):
        save_checkpoint(tmp_path, step, files=files(step))
    (tmp_path / ".tmp-step-00000300").mkdir()  # a killed save
    (tmp_path / ".tmp-step-00000300" / "model.pt").write_bytes(b"half a file")
    shutil.copytree(tmp_path / "step-00000100", tmp_path / ".del-step-00000050")  # killed prune
    shutil.copytree(tmp_path / "step-00000200", tmp_path / ".old-step-00000200")  # replaced
    (tmp_path / ".old-step-00000150").mkdir()  # no manifest: nothing to put back
    removed = clean_partial(tmp_path)
    assert sorted(p.name for p in removed) == [
        ".del-step-00000050",
        ".old-step-00000150",
        ".old-step-00000200",
        ".tmp-step-00000300",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000100", "step-00000200"]
    assert clean_partial(tmp_path) == []
    assert clean_partial(tmp_path / "absent") == []


def verify_checkpoint_path(root: Path, step: int) -> Path:
    path = latest_valid_checkpoint(root, log=pytest.fail)
    assert path == root / checkpoint_name(step)
    return path


def test_two_ranks_write_one_checkpoint(tmp_path: Path) -> None:
    """Two threads stand in for two processes on a shared file system."""
    barrier = threading.Barrier(2, timeout=30)
    own = [files(7), {"rank-00001.pt": {"rank": torch.tensor(1)}}]
    results: dict[int, object] = {}

    def rank(r: int) -> None:
        try:
            results[r] = save_checkpoint(
                tmp_path, 7, files=own[r], rank=r, world_size=2, barrier=barrier.wait
            )
        except Exception as err:  # a dead rank breaks the barrier, as a dead process would
            results[r] = err
            barrier.abort()

    run_ranks(rank)
    assert results == {0: tmp_path / "step-00000007", 1: tmp_path / "step-00000007"}
    manifest = verify_checkpoint(tmp_path / "step-00000007")
    assert manifest["world_size"] == 2
    assert {"rank-00000.pt", "rank-00001.pt", "model.pt"} <= set(manifest["files"])
    assert load_file(tmp_path / "step-00000007", "rank-00001.pt")["rank"].item() == 1
    # the same name from both ranks: refused, never silently overwritten
    own[1] = {"state.json": {"rank": 1}}
    results.clear()
    run_ranks(rank)
    errors = [e for e in results.values() if isinstance(e, CheckpointError)]
    assert len(errors) == 1 and "written twice" in str(errors[0]), results
    assert steps(tmp_path) == [7]


def fake_dcp(tmp: Path) -> None:
    """A writer as train.sharded's: DCP's files in tmp/dcp/, a hidden index among them."""
    (tmp / "dcp").mkdir()
    (tmp / "dcp" / "__0_0.distcp").write_bytes(bytes(range(256)) * 64)
    (tmp / "dcp" / ".metadata").write_bytes(b"index")


def test_a_writer_adds_a_dcp_folder_that_the_manifest_covers(tmp_path: Path) -> None:
    points: list[str] = []
    saved = {"state.json": {"step": 5}, "rank-00000.pt": {"rng": 1}}
    path = save_checkpoint(tmp_path, 5, files=saved, writer=fake_dcp, fault=points.append)
    # the writer runs after the ranks' files and before the manifest
    assert points.index("writer-done") == points.index("before-manifest") - 1
    assert points.index("writer-done") > points.index("file-written:state.json")
    manifest = verify_checkpoint(path)
    assert sorted(manifest["files"]) == [
        "dcp/.metadata",
        "dcp/__0_0.distcp",
        "rank-00000.pt",
        "state.json",
    ]
    assert manifest["files"]["dcp/__0_0.distcp"]["bytes"] == 256 * 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000005"]


DCP_CORRUPTIONS = {
    "flipped_bit": (lambda p: flip_middle_byte(p / "dcp" / "__0_0.distcp"), "dcp/__0_0.distcp"),
    "missing_index": (lambda p: (p / "dcp" / ".metadata").unlink(), "dcp/.metadata"),
    "extra_in_dcp": (lambda p: (p / "dcp" / "__1_0.distcp").write_bytes(b"x"), "dcp/__1_0.distcp"),
    "folder_in_dcp": (lambda p: (p / "dcp" / "sub").mkdir(), "dcp/sub"),
    "other_folder": (lambda p: (p / "other").mkdir(), "other"),
}


@pytest.mark.parametrize("case", sorted(DCP_CORRUPTIONS))
def test_a_bad_dcp_file_is_named_and_resume_falls_back(tmp_path: Path, case: str) -> None:
    for step in (100, 200):
        save_checkpoint(tmp_path, step, files=files(step), writer=fake_dcp)
    newer = tmp_path / "step-00000200"
    corrupt, name = DCP_CORRUPTIONS[case]
    corrupt(newer)
    with pytest.raises(CheckpointError) as caught:
        verify_checkpoint(newer)
    assert caught.value.value == str(newer / name), str(caught.value)
    lines: list[str] = []
    assert latest_valid_checkpoint(tmp_path, log=lines.append) == tmp_path / "step-00000100"
    assert lines[0].endswith("falling back to step-00000100")


def test_a_manifest_naming_a_path_outside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, 1, files=files(1), writer=fake_dcp)
    for bad in ("dcp/../../x", "/etc/passwd", "other/x", "dcp/sub/x"):

        def outside(m: dict, bad=bad) -> dict:
            m["files"][bad] = m["files"]["dcp/.metadata"]
            return m

        edit_manifest(path, outside)
        with pytest.raises(CheckpointError, match=f"lists '{bad}', not a valid file name"):
            read_manifest(path)
        (path / MANIFEST).unlink()
        write_manifest(path, 1, 1)


def test_a_writer_may_not_write_outside_dcp(tmp_path: Path) -> None:
    def elsewhere(tmp: Path) -> None:
        (tmp / "shards").mkdir()
        (tmp / "shards" / "x").write_bytes(b"x")

    with pytest.raises(CheckpointError, match="is not a regular file"):
        save_checkpoint(tmp_path, 1, files=files(1), writer=elsewhere)
    assert steps(tmp_path) == []


def run_ranks(target) -> None:
    threads = [threading.Thread(target=target, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
