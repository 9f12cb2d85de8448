"""Training that never loses work, end to end on CPU (issue 6, must-show 1, 5 and 6): a run
killed with SIGKILL at a random step, or stopped by SIGTERM, resumes to the bitwise state of a
run that was never interrupted, in one process, under 2-rank DDP and under torchrun's own
restarts; a corrupt newest checkpoint is passed over; NaN steps and loss spikes are handled.
(The checkpoint store's own faults -- kills during a write, flipped bits, malicious pickles --
are tests/train/test_checkpoint_store.py.)

"Bitwise" is exact here: the same computation on the same CPU in the same order gives the same
bits (no tolerance), so any state a checkpoint failed to carry -- the batch position, the
optimizer's step count, the spike detector's window -- shows up as a difference.
Faults are injected through train.launch.faults (TRAINBUDGET_FAULTS for subprocesses).
Timing on a 2-core CPU: about 60 s (six 1-process runs of ~3 s, five 2-rank runs of ~8 s).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainrun  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainrun import flat, ok, steps  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 12
TINY = (
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "100"),
    *("--no-tensorboard", "--device", "cpu", "--precision", "fp32", "--seed", "7"),
    *("--optimizer", "adamw", "--lr", "1e-3", "--schedule", "constant"),
    *("--checkpoint-every", "3", "--keep", "3", "--steps", str(STEPS)),
)


def train_cli(out: Path, data: Path, *args: str, **kw):
    """The CLI run of this file's tiny model (trainrun.train_cli with TINY first); one that
    ends by itself (no faults, no restarts) through trainrun.train_run: in this process, or
    its ranks launched by hand (torchrun's own part is the faults' and restarts')."""
    if set(kw) <= {"nproc"}:
        return trainrun.train_run(out, data, *TINY, *args, **kw)
    return trainrun.train_cli(out, data, *TINY, *args, **kw)


def final_state(out: Path) -> tuple[dict, dict]:
    newest = list_checkpoints(out / "checkpoints")[0]
    model = torch.load(newest / "model.pt", weights_only=True)
    optimizer = torch.load(newest / "optimizer.pt", weights_only=True)
    return model, optimizer


def assert_same_run(got: Path, want: Path) -> None:
    """Bitwise the same parameters, optimizer state and logged trajectory, and the same batches
    (each step's global batch CRC-32) at every step."""
    g, w = steps(got), steps(want)
    assert sorted(g) == sorted(w) == list(range(1, STEPS + 1))
    for step in w:
        for key in ("loss", "grad_norm", "lr", "batch_crc32", "tokens_seen"):
            assert g[step][key] == w[step][key], (step, key, g[step][key], w[step][key])
    for a, b in zip(final_state(got), final_state(want), strict=True):
        fa, fb = flat(a), flat(b)
        assert fa.keys() == fb.keys()
        for key in fa:
            if torch.is_tensor(fa[key]):
                assert torch.equal(fa[key], fb[key]), key
            else:
                assert fa[key] == fb[key], key


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    ok(train_cli(out, data, "--micro-batch", "4"))
    return out


@pytest.fixture(scope="module")
def reference_ddp(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("reference-ddp") / "run"
    ok(train_cli(out, data, "--micro-batch", "2", nproc=2))
    return out


# ---- must-show 1: kill -9 at a random step ------------------------------------------------


def test_sigkill_at_a_random_step_then_resume_is_bitwise_the_uninterrupted_run(
    tmp_path, data, reference
):
    step = random.Random(61).randint(2, STEPS - 1)  # a seeded draw: the failure reproduces
    out = tmp_path / "run"
    r = train_cli(out, data, "--micro-batch", "4", faults={"kill_step": step})
    assert r.returncode == -9, (step, r.stderr[-2000:])
    assert max(steps(out)) == step  # it died right after logging step `step`
    r = ok(train_cli(out, data, "--micro-batch", "4", "--resume"))
    assert "resumed from" in r.stderr
    assert_same_run(out, reference)


@pytest.mark.slow
def test_ddp_sigkill_of_one_rank_then_resume_is_bitwise_the_uninterrupted_run(
    tmp_path, data, reference_ddp
):
    step = random.Random(62).randint(2, STEPS - 1)
    out = tmp_path / "run"
    r = train_cli(
        out, data, "--micro-batch", "2", nproc=2, faults={"kill_step": step, "kill_rank": 1}
    )
    assert r.returncode != 0, r.stderr[-2000:]
    ok(train_cli(out, data, "--micro-batch", "2", "--resume", nproc=2))
    assert_same_run(out, reference_ddp)


# ---- must-show 6: torchrun restarts a dead worker -----------------------------------------


@pytest.mark.slow
def test_torchrun_max_restarts_recovers_a_killed_worker_to_the_same_state(
    tmp_path, data, reference_ddp
):
    out = tmp_path / "run"
    faults = {"kill_step": 7, "kill_rank": 1, "kill_attempt": 0}  # the restarted worker lives
    r = ok(
        train_cli(out, data, "--micro-batch", "2", "--resume", nproc=2, faults=faults, restarts=1)
    )
    assert "resumed from" in r.stderr and "step-00000006" in r.stderr, r.stderr[-3000:]
    assert_same_run(out, reference_ddp)


# ---- SIGTERM, corrupt checkpoints, what a resume refuses ----------------------------------


def test_sigterm_saves_a_checkpoint_and_exits_then_resume_finishes_the_same(
    tmp_path, data, reference
):
    out = tmp_path / "run"
    r = train_cli(out, data, "--micro-batch", "4", faults={"term_step": 4})
    # the step in progress when the signal came (5) finishes, is saved, and the run stops
    assert r.returncode == 128 + 15, r.stderr[-2000:]
    assert "stopped by SIGTERM at step 5" in r.stderr
    assert list_checkpoints(out / "checkpoints")[0].name == "step-00000005"
    ok(train_cli(out, data, "--micro-batch", "4", "--resume"))
    assert_same_run(out, reference)


def test_resume_passes_over_a_corrupt_newest_checkpoint(tmp_path, data, reference):
    out = tmp_path / "run"
    r = train_cli(out, data, "--micro-batch", "4", faults={"kill_step": 10})
    assert r.returncode == -9
    newest = list_checkpoints(out / "checkpoints")[0]
    assert newest.name == "step-00000009"
    blob = bytearray((newest / "model.pt").read_bytes())
    blob[len(blob) // 2] ^= 0x01  # one flipped bit inside the tensor data
    (newest / "model.pt").write_bytes(bytes(blob))
    r = ok(train_cli(out, data, "--micro-batch", "4", "--resume"))
    assert "step-00000009 rejected" in r.stderr and "model.pt" in r.stderr, r.stderr
    assert "resumed from" in r.stderr and "step-00000006" in r.stderr
    assert_same_run(out, reference)


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory, data) -> Path:
    """A 3-step run with its checkpoint at step 3; tests resume copies of it."""
    out = tmp_path_factory.mktemp("three-steps") / "run"
    ok(train_cli(out, data, "--micro-batch", "4", "--steps", "3"))
    return out


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("--set", "d_model=64"), "model d_model"),
        (("--seed", "8"), "seed"),
        (("--optimizer", "sgd"), "optimizer"),
        (("--seq-len", "16"), "seq_len"),
    ],
)
def test_resume_refuses_a_changed_model_or_recipe(tmp_path, data, three_steps, change, field):
    out = tmp_path / "run"
    shutil.copytree(three_steps, out)
    r = train_cli(out, data, "--micro-batch", "4", "--resume", *change)
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"trainbudget train: error: {field} = "), line
    assert "step-00000003" in line


def test_resume_under_another_world_size_with_the_same_global_batch(tmp_path, data, reference_ddp):
    # a 2-rank checkpoint (2 rows per rank) continued by one process with 4 rows: full tensors
    # and a batch stream that does not depend on the split make this exact up to the order of
    # sums; the resume says so
    out = tmp_path / "run"
    r = train_cli(out, data, "--micro-batch", "2", nproc=2, faults={"kill_step": 8, "kill_rank": 0})
    assert r.returncode != 0
    r = ok(train_cli(out, data, "--micro-batch", "4", "--resume"))
    assert "resharding" in r.stderr
    got, want = steps(out), steps(reference_ddp)
    for step in range(7, STEPS + 1):
        assert got[step]["batch_crc32"] == want[step]["batch_crc32"]
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-4)


def test_a_fresh_run_never_overwrites_checkpoints(tmp_path, data, reference):
    out = tmp_path / "run"
    ok(train_cli(out, data, "--micro-batch", "4", "--steps", "3"))
    before = (out / "metrics.jsonl").read_bytes()
    r = train_cli(out, data, "--micro-batch", "4")
    assert r.returncode == 2
    assert "pass --resume" in r.stderr
    assert (out / "metrics.jsonl").read_bytes() == before


def test_resume_may_train_longer_with_another_learning_rate(tmp_path, data):
    # what a resume may change: steps (and so the default warm-up, a tenth of them), the
    # learning rate and its schedule, for the steps to come
    out = tmp_path / "run"
    ok(train_cli(out, data, "--micro-batch", "4", "--steps", "3", "--warmup-steps", "-1"))
    r = ok(
        train_cli(
            out,
            data,
            "--micro-batch",
            "4",
            "--resume",
            "--steps",
            "6",
            "--warmup-steps",
            "-1",
            "--lr",
            "5e-4",
            "--schedule",
            "cosine",
        )
    )
    assert "resumed from" in r.stderr and "step-00000003" in r.stderr
    assert sorted(steps(out)) == list(range(1, 7))
    assert steps(out)[6]["lr"] < 5e-4  # the new cosine, decayed by the last step
