"""One owner per run folder and a metrics.jsonl that survives a full disk, end to end through
`trainbudget train` on CPU (issue 15, items 1 and 2, and the fresh-run part of 9). Each test
first brings about the failure the issue reported -- two runs in one folder at once, a disk
that fills up inside a write, a crash inside a write, a fresh run over an earlier one -- and
then checks what the trainer does instead. The tiny model and the bitwise comparison are
test_reliability's; faults come through train.launch.faults (TRAINBUDGET_FAULTS).
Timing: thirteen 1-process runs of ~3 s; about 2 minutes on a busy 2-core CPU.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainrun  # noqa: E402
from clirun import cli  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainrun import finish, flat, message_lines, ok, steps  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 12
TINY = (  # test_reliability's tiny run: checkpoints at steps 3, 6, 9 and 12
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "100"),
    *("--no-tensorboard", "--device", "cpu", "--precision", "fp32", "--seed", "7"),
    *("--optimizer", "adamw", "--lr", "1e-3", "--schedule", "constant"),
    *("--checkpoint-every", "3", "--keep", "3", "--steps", str(STEPS)),
)
MB = ("--micro-batch", "4")


def train_cli(out: Path, data: Path, *args: str, **kw):
    """The CLI run of this file's tiny model: in a process of its own with faults or not
    waited for (trainrun.train_cli), else in this one (trainrun.train_run)."""
    if not kw:
        return trainrun.train_run(out, data, *TINY, *args)
    return trainrun.train_cli(out, data, *TINY, *args, **kw)


def assert_same_run(got: Path, want: Path) -> None:
    """Bitwise the same logged trajectory, batches, parameters and optimizer state."""
    g, w = steps(got), steps(want)
    assert sorted(g) == sorted(w) == list(range(1, STEPS + 1))
    for step in w:
        for key in ("loss", "grad_norm", "lr", "batch_crc32", "tokens_seen"):
            assert g[step][key] == w[step][key], (step, key)
    for name in ("model.pt", "optimizer.pt"):
        a, b = (
            flat(torch.load(list_checkpoints(o / "checkpoints")[0] / name, weights_only=True))
            for o in (got, want)
        )
        assert a.keys() == b.keys()
        for key in a:
            same = torch.equal(a[key], b[key]) if torch.is_tensor(a[key]) else a[key] == b[key]
            assert same, (name, key)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    ok(train_cli(out, data, *MB))
    return out


def parsed_lines(out: Path) -> list[dict]:
    """Every line of metrics.jsonl as JSON: a torn or glued line fails here."""
    text = (out / "metrics.jsonl").read_text()
    assert text.endswith("\n"), text[-200:]
    return [json.loads(line) for line in text.splitlines()]


def logged_steps(out: Path) -> int:
    """The newest step of metrics.jsonl's complete lines (0: none yet), while a run writes."""
    path = out / "metrics.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return max((json.loads(line)["step"] for line in lines), default=0)


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: (size, mtime in ns) by relative path."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def newest_model_sha256(out: Path) -> str:
    newest = list_checkpoints(out / "checkpoints")[0]
    return hashlib.sha256((newest / "model.pt").read_bytes()).hexdigest()


def plot_draws(out: Path) -> None:
    pytest.importorskip("matplotlib")
    code, text, err = cli("plot", str(out))
    assert code == 0, err
    assert f"{STEPS} logged steps to {STEPS}" in text and "note: " not in text, text
    assert (out / "loss.png").stat().st_size > 0


# ---- item 1: two runs into one folder at once -------------------------------------------


def test_a_second_run_into_a_busy_folder_is_refused_and_the_first_resumes_bitwise(
    tmp_path, data, reference
):
    # the failure: the second run's start-up deleted the first one's checkpoint in progress,
    # one of them died with a traceback, and metrics.jsonl got records of two learning rates
    out, release = tmp_path / "run", tmp_path / "release"
    # the first run holds after step 5 (checkpoint at 3 written) until `release` exists, then
    # is killed at step 8: the second runs while the first is alive, without racing it
    faults = {"hold_step": 5, "hold_file": str(release), "kill_step": 8}
    first = train_cli(out, data, *MB, faults=faults, wait=False)
    try:
        while logged_steps(out) < 5:  # polls a condition; nothing depends on how long
            assert first.poll() is None, finish(first).stderr[-3000:]
            time.sleep(0.05)
        before = tree(out)
        for again in ((), ("--resume", "--lr", "5e-4")):
            r = train_cli(out, data, *MB, *again)
            assert r.returncode == 2, r.stderr[-3000:]
            (line,) = message_lines(r.stderr)
            assert line.startswith("trainbudget train: error: out = "), line
            assert f"is in use by another run (PID {first.pid} on {socket.gethostname()}" in line
        assert tree(out) == before  # the refused runs changed nothing, deleted nothing
    finally:
        release.touch()
        done = finish(first)
    assert done.returncode == -9, done.stderr[-3000:]  # killed at step 8, as planned
    assert [r["step"] for r in parsed_lines(out) if "event" not in r] == list(range(1, 9))
    # the kernel released the dead run's lock: --resume goes on, to the uninterrupted state
    r = ok(train_cli(out, data, *MB, "--resume"))
    assert "resumed from" in r.stderr and "step-00000006" in r.stderr
    assert "moved to metrics.after-step-00000006.jsonl" in r.stderr  # steps 7 and 8
    parsed_lines(out)
    assert_same_run(out, reference)


# ---- item 2: a full disk, and a crash inside a write ------------------------------------


def test_a_full_disk_halts_the_run_and_resume_ends_with_the_uninterrupted_model(
    tmp_path, data, reference
):
    # the failure: the write of step 8's record failed half way (ENOSPC) with a traceback; the
    # torn line stayed, the resumed run appended onto it, and plot refused the run
    out = tmp_path / "run"
    r = train_cli(out, data, *MB, faults={"metrics_enospc_step": 8})
    assert r.returncode == 1, r.stderr[-3000:]
    (line,) = [x for x in r.stderr.splitlines() if "halted" in x]
    assert "the record of step 8 could not be written (No space left on device)" in line
    assert "cut back to its last complete record" in line and "--resume" in line
    assert "Traceback" not in r.stderr
    assert [r["step"] for r in parsed_lines(out) if "event" not in r] == list(range(1, 8))
    # space freed: resume from step 6; step 7's record (after the checkpoint) is moved aside
    r = ok(train_cli(out, data, *MB, "--resume"))
    assert "resumed from" in r.stderr and "step-00000006" in r.stderr
    aside = out / "metrics.after-step-00000006.jsonl"
    assert [json.loads(x)["step"] for x in aside.read_text().splitlines()] == [7]
    assert newest_model_sha256(out) == newest_model_sha256(reference)
    parsed_lines(out)
    assert_same_run(out, reference)
    plot_draws(out)


def test_a_torn_last_line_is_cut_back_by_resume_and_named(tmp_path, data, reference):
    # the failure: killed inside the write of step 8's record, the run left half a line that
    # the resumed run glued its first record onto ('..."lr": 0.0{"step": 7, ...')
    out = tmp_path / "run"
    r = train_cli(out, data, *MB, faults={"metrics_torn_step": 8})
    assert r.returncode == -9, r.stderr[-3000:]
    assert not (out / "metrics.jsonl").read_text().endswith("\n")  # the torn line is there
    r = ok(train_cli(out, data, *MB, "--resume"))
    (cut,) = [x for x in r.stderr.splitlines() if "is cut short" in x]
    assert "metrics.jsonl:" in cut and "set aside 1 unreadable line" in cut
    assert newest_model_sha256(out) == newest_model_sha256(reference)
    parsed_lines(out)
    assert_same_run(out, reference)
    plot_draws(out)


# ---- item 9 (part): a fresh run over an earlier one -------------------------------------


def test_a_fresh_run_refuses_an_earlier_runs_metrics_and_overwrite_starts_afresh(tmp_path, data):
    # the failure: a run killed before its first checkpoint left metrics only, and a fresh
    # run into the folder silently replaced them
    out = tmp_path / "run"
    r = train_cli(out, data, *MB, "--checkpoint-every", "0", faults={"kill_step": 2})
    assert r.returncode == -9 and not list_checkpoints(out / "checkpoints")
    before = (out / "metrics.jsonl").read_bytes()
    r = train_cli(out, data, *MB, "--steps", "3")
    assert r.returncode == 2, r.stderr[-3000:]
    (line,) = message_lines(r.stderr)
    assert "holds metrics (" in line and "--resume" in line and "--overwrite" in line
    assert (out / "metrics.jsonl").read_bytes() == before
    r = ok(train_cli(out, data, *MB, "--steps", "3", "--overwrite"))
    assert "--overwrite: deleted" in r.stderr and "metrics.jsonl" in r.stderr
    assert [r["step"] for r in parsed_lines(out) if "event" not in r] == [1, 2, 3]
    # over checkpoints too: the earlier run's are deleted, so a later --resume cannot pick one
    ok(train_cli(out, data, *MB, "--steps", "2", "--overwrite"))
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-00000002"]


# ---- "A trainer a newcomer can walk": refused and finishing resumes ------------------------


def _copy(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    return out


def test_a_refused_resume_changes_nothing_in_the_run_folder(tmp_path, data, reference):
    # the failure: a resume refused for another model rewrote config.json with its settings
    out = _copy(reference, tmp_path)
    before = {k: v for k, v in tree(out).items() if k != "run.lock"}
    config = (out / "config.json").read_bytes()
    r = train_cli(out, data, *MB, "--resume", "--steps", "15", "--set", "n_layers=2")
    assert r.returncode == 2, r.stderr[-3000:]
    (line,) = message_lines(r.stderr)
    assert "n_layers = 2: differs from 1" in line and "resume needs the same model" in line
    assert (out / "config.json").read_bytes() == config
    assert {k: v for k, v in tree(out).items() if k != "run.lock"} == before


@pytest.mark.parametrize("damage", ["missing", "torn"])
def test_a_run_killed_after_its_last_checkpoint_is_finished_by_resume(
    tmp_path, data, reference, damage
):
    # the failure: killed after its final checkpoint (or while writing summary.json), the run
    # had no summary, and `--resume` refused it: "already at step 12"
    out = _copy(reference, tmp_path)
    if damage == "missing":
        (out / "summary.json").unlink()
        (out / "comm.json").unlink()
    else:
        text = (out / "summary.json").read_text()
        (out / "summary.json").write_text(text[: len(text) // 2])
    checkpoints = {k: v for k, v in tree(out).items() if k.startswith("checkpoints")}
    r = ok(train_cli(out, data, *MB, "--resume"))
    assert f"the run is at its last step ({STEPS}) without its summary: writing it" in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    want = json.loads((reference / "summary.json").read_text())
    assert summary["loss_final"] == want["loss_final"]
    assert json.loads((out / "comm.json").read_text())
    assert {k: v for k, v in tree(out).items() if k.startswith("checkpoints")} == checkpoints
    assert_same_run(out, reference)
    # finished: a further --resume has nothing to do and says so
    r = train_cli(out, data, *MB, "--resume")
    assert r.returncode == 2 and f"already at step {STEPS}" in r.stderr


def test_a_second_signal_while_a_checkpoint_is_written_waits_for_it(tmp_path, data, reference):
    # the failure: the second SIGTERM raised inside torch.save, which turned it into a
    # RuntimeError traceback, and the checkpoint being written was lost
    out = tmp_path / "run"
    r = train_cli(out, data, *MB, faults={"term_twice_in_save_step": 6})
    assert r.returncode == 143, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    (line,) = [x for x in message_lines(r.stderr) if not x.startswith("step ")]
    assert line == (
        "trainbudget train: second SIGTERM at step 6: stopped once the checkpoint of step 6 "
        "was whole; continue with --resume"
    )
    assert list_checkpoints(out / "checkpoints")[0].name == "step-00000006"
    ok(train_cli(out, data, *MB, "--resume"))
    assert_same_run(out, reference)
