"""train/checkpointing/sharded.py and its place in the checkpoint store (issue 6): FSDP2 runs write
their model and optimizer with torch.distributed.checkpoint (DCP), each rank its shards, into
the dcp/ folder of an atomic, manifest-verified checkpoint, and resume from it exactly.

In one process (fast): every optimizer the trainer builds round-trips through DCP into one that
never stepped; a .metadata pickle or a saved value that would run code is refused; another
model's checkpoint is named. On 2 CPU ranks (gloo; slow): a run whose rank 1 is killed with
SIGKILL resumes to the bitwise state of the uninterrupted run (fp32 AdamW and
bf16-mixed master weights); a flipped bit in a shard is named and passed over; one process
continues a 2-rank checkpoint (DCP stitches the shards); `trainbudget eval` reads one.

"Bitwise": the same computation on the same CPU in the same order gives the same bits, so any
state the shards failed to carry shows up. The 1-process continuation sums over the batch in
another order than the 2 ranks' reduce-scatter: relative 1e-4 on the loss, as
tests/train/test_reliability.py's resharding test. Timing on a 2-core CPU: about 2 minutes
(seven 2-rank runs of 10-15 s, one 1-process run, eval)."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402

import trainrun  # noqa: E402
from clirun import cli  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.model.optim import MasterWeightOptimizer  # noqa: E402
from trainbudget.model.optimizers import build_optimizer  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import CheckpointError, list_checkpoints  # noqa: E402
from trainbudget.train.checkpointing.manifest import DCP_DIR, read_manifest  # noqa: E402
from trainbudget.train.checkpointing.sharded import (  # noqa: E402
    load_sharded,
    model_dtype,
    read_sharded,
    save_sharded,
)
from trainrun import flat, ok, steps  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 12
TINY = (
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "100"),
    *("--no-tensorboard", "--device", "cpu", "--seed", "7"),
    *("--optimizer", "adamw", "--lr", "1e-3", "--schedule", "constant"),
    *("--checkpoint-every", "3", "--keep", "3", "--steps", str(STEPS)),
)
FSDP = ("--strategy", "fsdp", "--micro-batch", "2")  # 2 ranks x 2 rows: global batch 4
FP32, BF16 = ("--precision", "fp32"), ("--precision", "bf16-mixed")
# after step 7 at the earliest, so that two checkpoints (3 and 6) exist when rank 1 dies
KILL_STEP = random.Random(63).randint(7, STEPS - 1)


# ---- in one process ------------------------------------------------------------------------


def tiny_model(seed: int, dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(dtype)


def make_optimizer(model, name: str):
    if name == "bf16-mixed":
        return MasterWeightOptimizer(model, "adamw", 1e-2, weight_decay=0.1)
    return build_optimizer(name, model.parameters(), lr=1e-2, weight_decay=0.1)


def train(model, optimizer, steps: int) -> None:
    dtype = next(model.parameters()).dtype
    for i in range(steps):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(i)).to(dtype)
        model(x).float().pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd", "momentum", "adagrad", "bf16-mixed"])
def test_every_optimizer_round_trips_into_one_that_never_stepped(tmp_path: Path, name) -> None:
    dtype = torch.bfloat16 if name == "bf16-mixed" else torch.float32
    model = tiny_model(0, dtype)
    optimizer = make_optimizer(model, name)
    train(model, optimizer, 3)
    save_sharded(tmp_path / DCP_DIR, model, optimizer)  # no process group: DCP runs alone
    assert model_dtype(tmp_path / DCP_DIR) == dtype
    # a fresh model (other weights) and an optimizer without state: the template comes from
    # the checkpoint's metadata
    other = tiny_model(1, dtype)
    fresh = make_optimizer(other, name)
    load_sharded(tmp_path / DCP_DIR, other, fresh)
    train(model, optimizer, 2)
    train(other, fresh, 2)
    assert_same_state(other.state_dict(), model.state_dict())
    assert_same_state(fresh.state_dict(), optimizer.state_dict())


def assert_same_state(got: dict, want: dict) -> None:
    """The same keys (int state keys included), bitwise the same tensors, equal values."""
    a, b = flat(got), flat(want)
    assert a.keys() == b.keys()
    for key, value in b.items():
        if torch.is_tensor(value):
            assert torch.equal(a[key], value), key
        else:
            assert a[key] == value, key


class Shell:
    """Unpickling this runs a shell command: pickle calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_metadata_pickle_that_runs_a_command_is_refused(tmp_path: Path) -> None:
    model = tiny_model(0)
    optimizer = make_optimizer(model, "adamw")
    save_sharded(tmp_path / DCP_DIR, model, optimizer)
    pwned = tmp_path / "pwned"
    index = tmp_path / DCP_DIR / ".metadata"
    index.write_bytes(pickle.dumps(Shell(f"touch {pwned}")))
    with pytest.raises(CheckpointError) as caught:
        load_sharded(tmp_path / DCP_DIR, model, optimizer)
    assert caught.value.value == str(index)
    assert "refused: it names posix.system" in caught.value.rule  # os.system, on Linux
    assert not pwned.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP alone: meant
def test_a_saved_value_that_runs_a_command_is_refused(tmp_path: Path) -> None:
    # DCP saves a non-tensor value as a torch.save blob; its own planner would load it with
    # weights_only off, which would run the command
    model = tiny_model(0)
    optimizer = make_optimizer(model, "sgd")
    pwned = tmp_path / "pwned"
    groups = [{**optimizer.state_dict()["param_groups"][0], "lr": Shell(f"touch {pwned}")}]
    state = {"model": model.state_dict(), "optimizer": {"param_groups": groups}}
    dcp.save(state, storage_writer=FileSystemWriter(tmp_path / DCP_DIR))
    with pytest.raises(CheckpointError) as caught:
        load_sharded(tmp_path / DCP_DIR, model, optimizer)
    assert "optimizer.param_groups.0.lr refused by torch.load(weights_only=True)" in str(
        caught.value
    )
    assert not pwned.exists()


def test_another_models_checkpoint_is_named(tmp_path: Path) -> None:
    save_sharded(tmp_path / DCP_DIR, tiny_model(0), make_optimizer(tiny_model(0), "sgd"))
    other = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with pytest.raises(CheckpointError, match=r"another model's state \(missing \[\], unexp"):
        load_sharded(tmp_path / DCP_DIR, other)
    wider = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 2))
    with pytest.raises(CheckpointError, match="DCP could not load it"):
        load_sharded(tmp_path / DCP_DIR, wider)


# ---- on 2 ranks ------------------------------------------------------------------------------


def train_cli(out: Path, data: Path, *args: str, nproc: int = 2, **kw):
    """The CLI run of this file's tiny model, on 2 ranks unless told otherwise: under torchrun
    with faults (its agent stops the ranks a SIGKILL leaves waiting), else launched by hand or,
    for one process, in this one (trainrun.train_run)."""
    if not kw:
        return trainrun.train_run(out, data, *TINY, *args, nproc=nproc)
    return trainrun.train_cli(out, data, *TINY, *args, nproc=nproc, **kw)


def final_state(out: Path) -> dict:
    """The newest checkpoint's model and optimizer, gathered from the shards (in this
    process), flattened by path."""
    return flat(read_sharded(list_checkpoints(out / "checkpoints")[0] / DCP_DIR))


def assert_same_run(got: Path, want: Path) -> None:
    """Bitwise the same parameters, optimizer state and logged trajectory, and the same
    batches (each step's global batch CRC-32) at every step."""
    g, w = steps(got), steps(want)
    assert sorted(g) == sorted(w) == list(range(1, STEPS + 1))
    for step in w:
        for key in ("loss", "grad_norm", "lr", "batch_crc32", "tokens_seen"):
            assert g[step][key] == w[step][key], (step, key, g[step][key], w[step][key])
    a, b = final_state(got), final_state(want)
    assert any(key.startswith("/optimizer/") and torch.is_tensor(v) for key, v in a.items())
    assert_same_state(a, b)


def assert_sharded_checkpoints(out: Path) -> None:
    """Every checkpoint holds dcp/ (an index and one shard file per rank), no model.pt or
    optimizer.pt, and lists every dcp/ file in its manifest."""
    found = list_checkpoints(out / "checkpoints")
    assert found
    for path in found:
        names = {p.name for p in (path / DCP_DIR).iterdir()}
        assert names == {".metadata", "__0_0.distcp", "__1_0.distcp"}, path
        assert not (path / "model.pt").exists() and not (path / "optimizer.pt").exists()
        listed = read_manifest(path)["files"]
        assert {f"{DCP_DIR}/{name}" for name in names} <= set(listed), path
        assert json.loads((path / "state.json").read_text())["format"] == "dcp"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "data"
    prepare(None, path, tokenizer="byte")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("reference-fsdp") / "run"
    ok(train_cli(out, data, *FSDP, *FP32))
    return out


@pytest.fixture(scope="module")
def killed(tmp_path_factory, data) -> Path:
    """A 2-rank FSDP2 run whose rank 1 died by SIGKILL right after step KILL_STEP; tests
    continue copies of it."""
    out = tmp_path_factory.mktemp("killed-fsdp") / "run"
    faults = {"kill_step": KILL_STEP, "kill_rank": 1}
    r = train_cli(out, data, *FSDP, *FP32, faults=faults)
    assert r.returncode != 0, r.stderr[-2000:]
    assert max(steps(out)) == KILL_STEP
    return out


def copy_of(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


@pytest.mark.slow
def test_fsdp_sigkill_of_one_rank_then_resume_is_bitwise_the_uninterrupted_run(
    tmp_path, data, reference, killed
):
    out = copy_of(killed, tmp_path)
    newest = list_checkpoints(out / "checkpoints")[0]
    r = ok(train_cli(out, data, *FSDP, *FP32, "--resume"))
    assert f"resumed from {newest}" in r.stderr, r.stderr[-2000:]
    assert_same_run(out, reference)
    assert_sharded_checkpoints(out)
    assert_sharded_checkpoints(reference)


@pytest.mark.slow
def test_a_flipped_bit_in_a_shard_is_named_and_resume_falls_back(tmp_path, data, reference, killed):
    out = copy_of(killed, tmp_path)
    newest, previous = list_checkpoints(out / "checkpoints")[:2]
    shard = newest / DCP_DIR / "__1_0.distcp"
    blob = bytearray(shard.read_bytes())
    blob[len(blob) // 2] ^= 0x01  # one flipped bit, inside tensor data
    shard.write_bytes(bytes(blob))
    r = ok(train_cli(out, data, *FSDP, *FP32, "--resume"))
    assert f"checkpoint {newest.name} rejected: checkpoint = '{shard}'" in r.stderr, r.stderr
    assert "SHA-256 differs" in r.stderr and f"falling back to {previous.name}" in r.stderr
    assert f"resumed from {previous}" in r.stderr
    assert_same_run(out, reference)


@pytest.mark.slow
def test_bf16_mixed_master_weights_resume_bitwise_under_fsdp(tmp_path, data):
    want, got = tmp_path / "reference", tmp_path / "killed"
    ok(train_cli(want, data, *FSDP, *BF16))
    r = train_cli(got, data, *FSDP, *BF16, faults={"kill_step": KILL_STEP, "kill_rank": 1})
    assert r.returncode != 0, r.stderr[-2000:]
    r = ok(train_cli(got, data, *FSDP, *BF16, "--resume"))
    assert "resumed from" in r.stderr
    assert_same_run(got, want)  # the fp32 masters and their AdamW moments included
    assert any("/optimizer/masters/" in key for key in final_state(got))


@pytest.mark.slow
def test_one_process_continues_a_two_rank_sharded_checkpoint(tmp_path, data, reference, killed):
    # DCP stitches the shards into plain tensors; the same global batch (4 rows in one
    # process) continues the same batch stream
    out = copy_of(killed, tmp_path)
    resumed_at = int(list_checkpoints(out / "checkpoints")[0].name.split("-")[1])
    r = ok(train_cli(out, data, "--micro-batch", "4", *FP32, "--resume", nproc=1))
    assert "resharding" in r.stderr and "resumed from" in r.stderr, r.stderr[-2000:]
    got, want = steps(out), steps(reference)
    for step in range(resumed_at + 1, STEPS + 1):
        assert got[step]["batch_crc32"] == want[step]["batch_crc32"], step
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-4), step


@pytest.mark.slow
def test_eval_reads_a_sharded_checkpoint_in_one_process(reference):
    code, out, err = cli("eval", "--checkpoint", str(reference), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["checkpoint"].endswith("step-00000012") and result["step"] == STEPS
    # the run's own evaluation at its last step, under FSDP2, of the same weights
    last = steps(reference)[STEPS]["eval"]
    assert result["val_loss"] == pytest.approx(last["val_loss"], rel=1e-4)
