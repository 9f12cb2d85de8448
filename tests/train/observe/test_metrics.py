"""train.observe.metrics: metrics.jsonl written whole record by record, cut back when a write fails,
and healed by a resume (issue 15, item 2), without torch (no TensorBoard here). The end-to-end proof
-- a full disk mid-run, then --resume to the uninterrupted run's model -- is
tests/train/test_run_folder.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from trainbudget.train.launch.faults import Faults
from trainbudget.train.observe import metrics
from trainbudget.train.observe.metrics import MetricsWriteError, MetricsWriter, resume_metrics
from trainbudget.train.spec.run_files import read_run


def _writer(run: Path, **kw) -> MetricsWriter:
    return MetricsWriter(run, tensorboard=False, **kw)


def _lines(run: Path) -> list[dict]:
    """Every line of metrics.jsonl parsed: any torn or mixed line fails here."""
    text = (run / "metrics.jsonl").read_text()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_each_record_is_one_write_of_a_whole_line(tmp_path: Path, monkeypatch) -> None:
    calls = []
    real_write = os.write
    monkeypatch.setattr(
        metrics.os, "write", lambda fd, b: calls.append(bytes(b)) or real_write(fd, b)
    )
    w = _writer(tmp_path)
    w.write({"step": 1, "loss": 2.5, "mfu": float("nan")})
    w.write({"step": 2, "loss": 2.25, "eval": {"val_loss": 2.0}})
    w.close()
    assert len(calls) == 2 and all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in calls)
    assert _lines(tmp_path) == [
        {"step": 1, "loss": 2.5, "mfu": None},
        {"step": 2, "loss": 2.25, "eval": {"val_loss": 2.0}},
    ]


def test_a_short_write_is_continued(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write
    monkeypatch.setattr(metrics.os, "write", lambda fd, b: real_write(fd, bytes(b)[:7]))
    w = _writer(tmp_path)
    w.write({"step": 1, "loss": 2.5})
    w.close()
    assert _lines(tmp_path) == [{"step": 1, "loss": 2.5}]


def test_a_full_disk_cuts_the_file_back_to_its_last_complete_record(tmp_path: Path) -> None:
    # Faults.metrics_write writes half of step 3's line, then fails as a full disk does
    w = _writer(tmp_path, faults=Faults(metrics_enospc_step=3))
    w.write({"step": 1, "loss": 2.5})
    w.write({"step": 2, "loss": 2.4})
    with pytest.raises(MetricsWriteError) as err:
        w.write({"step": 3, "loss": 2.3})
    w.close()
    line = str(err.value)
    assert "\n" not in line and "step 3" in line and os.strerror(errno.ENOSPC) in line
    assert "cut back to its last complete record" in line
    assert [r["step"] for r in _lines(tmp_path)] == [1, 2]


def test_records_are_fsynced_at_checkpoints(tmp_path: Path, monkeypatch) -> None:
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(metrics.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    w = _writer(tmp_path)
    w.write({"step": 3, "loss": 2.5})
    assert synced == []
    w.write({"step": 3, "event": "checkpoint", "path": "x"})
    assert len(synced) == 1
    w.close()


# ---- resume ---------------------------------------------------------------------------------


def _log(run: Path, steps: list[int], tail: str = "") -> Path:
    run.mkdir(exist_ok=True)
    lines = [json.dumps({"step": s, "loss": 3.0 - s / 10}) for s in steps]
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines) + tail)
    return run


def test_resume_cuts_a_torn_last_line_and_names_it(tmp_path: Path) -> None:
    # the failure: a run killed inside a write left half a line; the resumed run appended onto
    # it ('..."loss": 2.2{"step": 7, ...'), and plot/report refused the whole file
    run = _log(tmp_path / "run", [1, 2, 3, 4, 5, 6], tail='{"step": 7, "loss": 2.2')
    done = resume_metrics(run, 6)
    assert len(done) == 1 and "\n" not in done[0]
    assert "metrics.jsonl:7 is cut short" in done[0] and "set aside 1 unreadable line" in done[0]
    assert "metrics.after-step-00000006.jsonl" in done[0]
    assert [r["step"] for r in _lines(run)] == [1, 2, 3, 4, 5, 6]
    assert (run / "metrics.after-step-00000006.jsonl").read_text() == '{"step": 7, "loss": 2.2\n'
    w = _writer(run, append=True)  # the resumed run's records go on clean lines
    w.write({"step": 7, "loss": 2.3})
    w.close()
    assert [r["step"] for r in _lines(run)] == [1, 2, 3, 4, 5, 6, 7]


def test_resume_moves_the_records_after_its_checkpoint_aside(tmp_path: Path) -> None:
    # the failure: the records of steps 7-8 from before the crash and those of the resumed run
    # were mixed in one file (with another learning rate, two curves in one)
    run = _log(tmp_path / "run", [1, 2, 3, 4, 5, 6, 7, 8])
    done = resume_metrics(run, 6)
    assert done == [
        "metrics.jsonl: 2 records logged after step 6 (the checkpoint resumed from) moved to "
        "metrics.after-step-00000006.jsonl"
    ]
    assert [r["step"] for r in _lines(run)] == [1, 2, 3, 4, 5, 6]
    aside = run / "metrics.after-step-00000006.jsonl"
    assert [json.loads(x)["step"] for x in aside.read_text().splitlines()] == [7, 8]
    _log(run, [1, 2, 3, 4, 5, 6, 7])  # a second resume from the same step: another file
    resume_metrics(run, 6)
    assert (run / "metrics.after-step-00000006.2.jsonl").exists()


def test_resume_of_a_clean_file_changes_nothing(tmp_path: Path) -> None:
    run = _log(tmp_path / "run", [1, 2, 3])
    before = (run / "metrics.jsonl").read_bytes()
    assert resume_metrics(run, 3) == []
    assert resume_metrics(tmp_path / "none", 3) == []
    assert (run / "metrics.jsonl").read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]


def test_a_damaged_line_inside_the_file_is_set_aside_alone(tmp_path: Path) -> None:
    # the failure: a garbage line in the middle moved every valid record after it aside
    run = _log(tmp_path / "run", [1, 2], tail='{"step": 3, "lo{"step": 3, "loss": 1}\n')
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 4, "loss": 2.0}) + "\n")
    done = resume_metrics(run, 6)
    assert done == [
        f"{run / 'metrics.jsonl'}:3 is not JSON (Expecting ':' delimiter, column 18): set "
        "aside 1 unreadable line in metrics.after-step-00000006.jsonl; every whole record is kept"
    ]
    assert [r["step"] for r in _lines(run)] == [1, 2, 4]
    aside = (run / "metrics.after-step-00000006.jsonl").read_text()
    assert aside == '{"step": 3, "lo{"step": 3, "loss": 1}\n'
    assert read_run(run).skipped is None


def test_tensorboard_gets_every_number_and_the_per_source_losses_by_name() -> None:
    record = {
        "step": 10,
        "loss": 2.5,
        "skipped": True,  # a flag, not a scalar
        "train_loss_by_source": {"web": 2.0, "code": 3.0},
        "phases_seconds": {"forward": 0.1},
        "eval": {"val_loss": 2.4, "per_source": {"web": 2.2, "code": 2.9}},
    }
    assert metrics.tensorboard_scalars(record) == {
        "loss": 2.5,
        "train_loss/web": 2.0,
        "train_loss/code": 3.0,
        "phases_seconds/forward": 0.1,
        "eval/val_loss": 2.4,
        "val_loss/web": 2.2,  # nested two deep: dropped before
        "val_loss/code": 2.9,
    }
