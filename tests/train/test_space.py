"""Issue 15, items 4 and 6: an unusable checkpoint folder is found before step 1, not at the
first save; a save that fills the disk says "no space left on device" with the file, and the
previous checkpoint stays intact (train.checkpointing.space).

Each test first reproduces the failure the issue reports (a raw OSError, FileExistsError or
torch's zip-writer RuntimeError), then shows the check that replaces it. Read-only folders:
chmod when not root; as root (where chmod does not stop writes) the write itself is made to
fail with EROFS, as a read-only mount fails it. The full disk is /dev/full, whose every write
fails with ENOSPC from the kernel."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainrun  # noqa: E402
from checkpoint_payloads import N_WEIGHTS, files  # noqa: E402
from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.core.single.params import count_params  # noqa: E402
from trainbudget.core.spec.presets import get_preset  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.model.optim import make_optimizer, weight_dtype  # noqa: E402
from trainbudget.model.transformer import build_model  # noqa: E402
from trainbudget.train.checkpointing import space  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import (  # noqa: E402
    latest_valid_checkpoint,
    list_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)
from trainbudget.train.checkpointing.space import (  # noqa: E402
    NoSpaceError,
    open_on_full_disk,
    predicted_checkpoint_bytes,
    prepare_checkpoint_folder,
)
from trainrun import message_lines, ok  # noqa: E402

pytestmark = pytest.mark.torch

HAS_DEV_FULL = space.DEV_FULL.exists()
needs_dev_full = pytest.mark.skipif(not HAS_DEV_FULL, reason="needs /dev/full (Linux)")
MiB = 2**20


def prepare_folder(run_dir: Path, *, size: float = 1.0, keep: int = 3) -> Path:
    return prepare_checkpoint_folder(run_dir, rank=0, checkpoint_size_bytes=size, keep=keep)


# ---- item 4: the folder, before step 1 ------------------------------------------------------


def test_the_folder_and_checkpoints_are_created_and_the_probe_removed(tmp_path: Path) -> None:
    root = prepare_folder(tmp_path / "run")
    assert root == tmp_path / "run" / "checkpoints" and root.is_dir()
    assert list(root.iterdir()) == []  # the probe is gone


def a_file(run: Path) -> None:
    run.mkdir()
    (run / "checkpoints").write_text("not a folder")


def a_link_loop(run: Path) -> None:
    run.mkdir()
    (run / "checkpoints").symlink_to(run / "checkpoints")


def a_dangling_link(run: Path) -> None:
    run.mkdir()
    (run / "checkpoints").symlink_to(run / "nowhere" / "at-all")


@pytest.mark.parametrize("make", [a_file, a_link_loop, a_dangling_link])
def test_something_else_where_checkpoints_should_be(tmp_path: Path, make) -> None:
    run = tmp_path / "run"
    make(run)
    with pytest.raises(FileExistsError):  # what the first save met, after the training
        save_checkpoint(run / "checkpoints", 1, files=files(1, N_WEIGHTS))
    with pytest.raises(SpecError) as caught:
        prepare_folder(run)
    err = caught.value
    assert err.field == "out" and err.value == str(run / "checkpoints")
    assert "exists and is not a folder" in err.rule and "\n" not in str(err)


def test_out_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        (tmp_path / "file" / "run").mkdir(parents=True)
    with pytest.raises(SpecError, match="cannot be created \\(Not a directory\\)"):
        prepare_folder(tmp_path / "file" / "run")


def make_read_only(folder: Path, monkeypatch) -> None:
    """`folder` unwritable: by its mode, or (root ignores modes) by failing the creation of
    any file in it with EROFS, the error of a read-only mount."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    real_open = os.open

    def read_only_open(path, flags, *args, **kw):
        if Path(path).parent == folder and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", read_only_open)


def test_a_read_only_checkpoints_folder(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "run" / "checkpoints"
    root.mkdir(parents=True)
    make_read_only(root, monkeypatch)
    try:
        with pytest.raises(SpecError) as caught:
            prepare_folder(tmp_path / "run")
    finally:
        root.chmod(0o755)
    err = caught.value
    assert err.field == "out" and err.value == str(root)
    assert "cannot be written by rank 0" in err.rule
    assert "Read-only file system" in err.rule or "Permission denied" in err.rule


# ---- item 4: free space ---------------------------------------------------------------------


def test_too_little_free_space_names_both_numbers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(space, "free_bytes", lambda path: 300 * MiB)
    with pytest.raises(SpecError) as caught:
        prepare_folder(tmp_path / "run", size=100e6, keep=3)
    rule = caught.value.rule
    assert rule.startswith("has 314.6 MB free; the run needs 400 MB: 4 checkpoints of about")
    assert "100 MB each (--keep 3 + 1 being written)" in rule
    prepare_folder(tmp_path / "run", size=100e6, keep=2)  # 300 MB: fits


def test_checkpoints_already_there_count_as_room(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "run" / "checkpoints"
    for step in (1, 2):
        save_checkpoint(root, step, files=files(step, N_WEIGHTS))
    there = sum(space.folder_bytes(p) for p in list_checkpoints(root))
    size = there  # each "checkpoint" of the run the size of both already there
    monkeypatch.setattr(space, "free_bytes", lambda path: 3 * size)  # 4 needed, 1 there
    prepare_folder(tmp_path / "run", size=size, keep=3)
    monkeypatch.setattr(space, "free_bytes", lambda path: 3 * size - 1)
    with pytest.raises(SpecError, match="already there"):
        prepare_folder(tmp_path / "run", size=size, keep=3)


TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_the_predicted_size_is_what_a_checkpoint_holds(tmp_path: Path, precision: str) -> None:
    """The analytic size (the core's checkpoint_bytes, plus the 16-bit weights under mixed
    precision) against the files torch.save writes after one AdamW step."""
    from trainbudget.core.spec.model_source.model_arg import resolve_model

    spec = resolve_model("gpt2", TINY)
    model = build_model(spec, device="cpu", seed=0, dtype=weight_dtype(precision))
    optimizer = make_optimizer(model, precision=precision, optimizer="adamw")
    model(torch.zeros(1, 8, dtype=torch.long))[0].float().sum().backward()
    optimizer.step()
    folder = save_checkpoint(
        tmp_path,
        1,
        files={"model.pt": model.state_dict(), "optimizer.pt": optimizer.state_dict()},
    )
    measured = sum((folder / n).stat().st_size for n in ("model.pt", "optimizer.pt"))
    predicted = predicted_checkpoint_bytes(spec, precision=precision, optimizer="adamw")
    # torch.save's container: a zip entry and pickle per tensor, about 1.5 kB for each
    assert predicted <= measured <= predicted * 1.02 + 64 * 2**10, (predicted, measured)


def test_bytes_per_parameter_of_a_trainer_checkpoint() -> None:
    """AdamW: fp32 weights + m + v = 12 B per parameter (seed 003's T-ckpt rule); bf16-mixed
    adds the 2-byte model weights model.pt holds beside optimizer.pt's fp32 masters: 14."""
    spec = get_preset("gpt2")
    n_params = count_params(spec).total
    for precision, per_param in (("fp32", 12), ("bf16-mixed", 14)):
        size = predicted_checkpoint_bytes(spec, precision=precision, optimizer="adamw")
        assert size == per_param * n_params, precision


# ---- item 6: a full disk during a save ------------------------------------------------------


@needs_dev_full
def test_the_failure_without_the_check() -> None:
    """torch's writer on a full disk: a RuntimeError without a word about space."""
    f = open(space.DEV_FULL, "wb")  # noqa: SIM115 (its close fails too: the bytes left)
    with pytest.raises(RuntimeError) as caught:
        torch.save({"w": torch.zeros(10_000)}, f)
    with pytest.raises(OSError, match="No space left on device"):
        f.close()
    assert "space" not in str(caught.value).lower()
    assert space.is_no_space(caught.value)  # the OSError it was raised while handling says so


@needs_dev_full
def test_a_full_disk_is_named_and_the_previous_checkpoint_stays(tmp_path: Path) -> None:
    for step in (100, 200):
        save_checkpoint(tmp_path, step, files=files(step, N_WEIGHTS))
    with pytest.raises(NoSpaceError) as caught:
        save_checkpoint(tmp_path, 300, files=files(300, N_WEIGHTS), create=open_on_full_disk)
    err = caught.value
    first = next(iter(files(300, N_WEIGHTS)))  # the first file written
    assert err.value == str(tmp_path / ".tmp-step-00000300" / first)
    assert "no space left on device while writing it" in err.rule
    assert "step-00000200 is intact" in err.rule and "\n" not in str(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000100", "step-00000200"]
    assert latest_valid_checkpoint(tmp_path) == tmp_path / "step-00000200"
    verify_checkpoint(tmp_path / "step-00000200")


def test_other_errors_are_not_called_a_full_disk() -> None:
    assert not space.is_no_space(OSError(errno.EIO, "Input/output error"))
    assert not space.is_no_space(RuntimeError("unexpected pos 704 vs 598"))
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672]") from None
    except RuntimeError as err:
        assert space.is_no_space(err)  # from None hides the cause, not the context


# ---- end to end: the CLI ---------------------------------------------------------------------

RUN = (
    *(a for s in TINY for a in ("--set", s)),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "100", "--micro-batch", "2"),
    *("--no-tensorboard", "--device", "cpu", "--precision", "fp32", "--seed", "7"),
    *("--checkpoint-every", "3", "--keep", "2", "--steps", "9"),
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


def test_cli_refuses_a_file_at_checkpoints_before_step_1(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "run"
    a_file(out)
    r = trainrun.train_cli(out, data, *RUN)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    (line,) = message_lines(r.stderr)
    assert line.startswith(f"trainbudget train: error: out = '{out / 'checkpoints'}': exists")
    assert not (out / "metrics.jsonl").exists()  # not one step was trained


@needs_dev_full
def test_cli_full_disk_at_a_save_halts_with_one_line_and_resume_goes_on(tmp_path, data) -> None:
    out = tmp_path / "run"
    r = trainrun.train_cli(out, data, *RUN, faults={"full_disk_step": 6})
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("trainbudget train: halted: checkpoint = ")
    assert ".tmp-step-00000006/" in line and "no space left on device" in line
    assert "step-00000003 is intact" in line
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-00000003"]
    r = ok(trainrun.train_run(out, data, *RUN, "--resume"))
    assert "resumed from" in r.stderr and "step-00000003" in r.stderr
    assert list_checkpoints(out / "checkpoints")[0].name == "step-00000009"
