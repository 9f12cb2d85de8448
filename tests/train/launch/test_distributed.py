"""Data-parallel training on CPU: 2-rank DDP and FSDP2 runs (gloo, launched by torchrun as a user
would) give the loss trajectory of one process with the same global batch; the global batch is
split, never redrawn, across ranks; checkpoints hold full tensors written by rank 0 only; an
FSDP2 run resumes exactly; bf16-mixed (fp32 master weights) works under FSDP2.

Tolerance, fp32: relative 1e-4 on every logged loss and gradient norm. The runs compute the same
thing with sums in another order -- per-rank partial gradients added by an all-reduce or
reduce-scatter instead of one sum over the batch -- so each step differs by fp32 rounding
(~1e-7 relative), which 8 AdamW/SGD steps of a 1-layer model do not amplify: the observed
difference is <= 2e-7, 500x inside the bound. A wrong split fails it by far: drawing each rank's
rows from its own stream (seeded by the rank) changes the first loss by 1.3e-2 relative, and the
loss moves 1e-2 to 1e-1 per step, so a missing or doubled gradient average fails by step 2.
bf16-mixed: relative 2e-3 on the loss (weights and gradients in bf16, 8 significant bits: the
gradient reduction across ranks rounds to 2^-9 relative; observed <= 2e-4).
Timing on a 2-core CPU: about 5 s per 1-process run and 10 s per 2-rank run, ~85 s in all.
"""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import trainrun  # noqa: E402
from trainbudget.core.errors import SpecError  # noqa: E402
from trainbudget.data.loader import TokenDataset  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.checkpointing.sharded import read_sharded  # noqa: E402
from trainbudget.train.data import TrainBatches  # noqa: E402
from trainbudget.train.spec.preflight import read_plan  # noqa: E402
from trainrun import free_port, ok, run_env  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 8
TINY = (
    *("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"),
    *("--set", "d_ff=64", "--set", "vocab_size=257", "--set", "max_seq_len=64"),
    *("--seq-len", "32", "--log-interval", "1", "--no-tensorboard", "--device", "cpu"),
    *("--precision", "fp32", "--seed", "7"),
)
# a constant learning rate (warm-up 0: a tenth of 8 steps) so a run of 4 steps resumed to 8
# follows the schedule of a run of 8
# follows the schedule of a run of 8; SGD at a rate where it trains in 8 steps (5.98 -> 3.94)
ADAMW = ("--optimizer", "adamw", "--lr", "1e-3", "--schedule", "constant")
SGD = ("--optimizer", "sgd", "--lr", "0.3", "--schedule", "constant", "--grad-clip", "0")
RTOL = 1e-4
RTOL_BF16 = 2e-3  # the loss, in fp32 from bf16 logits
TIMEOUT = 180
CPU = torch.device("cpu")


# -- the global batch, in-process ----------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> TokenDataset:
    # random letters: every window's content is (almost surely) unique, so equal sets of
    # windows mean equal draws
    root = tmp_path_factory.mktemp("two-sources")
    rng = random.Random(0)
    for name, n in (("a", 6000), ("b", 3000)):
        text = "".join(rng.choices(string.ascii_lowercase + " \n", k=n))
        (root / f"{name}.txt").write_text(text, encoding="utf-8")
    prepare([f"a={root / 'a.txt'}:1", f"b={root / 'b.txt'}:3"], root / "data", tokenizer="byte")
    return TokenDataset(root / "data", "train")


def _step_rows(loaders: list[TrainBatches], grad_accum: int) -> list[tuple[int, ...]]:
    """One optimizer step's rows (x) over all ranks and micro-batches, sorted: the multiset of
    windows the step trains on. Each loader draws grad_accum micro-batches."""
    rows = []
    for loader in loaders:
        for _ in range(grad_accum):
            rows += [tuple(row) for row in loader.next_batch(CPU)[0].tolist()]
    return sorted(rows)


@pytest.mark.parametrize(
    ("world_size", "micro_batch", "grad_accum"), [(2, 2, 2), (2, 4, 1), (1, 4, 2), (4, 1, 2)]
)
def test_any_split_of_the_global_batch_sees_the_same_windows(
    dataset, world_size, micro_batch, grad_accum
):
    # the reference: one process, the whole global batch of 8 rows in one micro-batch
    ref = TrainBatches(dataset, 8, 16, seed=3)
    split = [
        TrainBatches(
            dataset,
            micro_batch,
            16,
            seed=3,
            grad_accum=grad_accum,
            rank=r,
            world_size=world_size,
        )
        for r in range(world_size)
    ]
    for _ in range(3):
        expected = _step_rows([ref], 1)
        assert _step_rows(split, grad_accum) == expected
    # and the step's rows really are distinct draws, not one rank's rows repeated
    assert len(set(expected)) == 8


def test_same_micro_rows_over_ranks_means_the_same_micro_batches_row_for_row(dataset):
    ref = TrainBatches(dataset, 4, 16, seed=5, grad_accum=2)
    ranks = [
        TrainBatches(dataset, 2, 16, seed=5, grad_accum=2, rank=r, world_size=2) for r in (0, 1)
    ]
    for _ in range(4):  # 2 steps of 2 micro-batches
        x = ref.next_batch(CPU)[0]
        parts = [loader.next_batch(CPU)[0] for loader in ranks]
        assert torch.equal(torch.cat(parts), x)


def test_resume_is_exact_and_checks_what_the_stream_depends_on(dataset):
    a = TrainBatches(dataset, 2, 16, seed=1, grad_accum=2, rank=1, world_size=2)
    for _ in range(3):
        a.next_batch(CPU)
    state = json.loads(json.dumps(a.state_dict()))  # survives JSON (state.json)
    b = TrainBatches(dataset, 2, 16, seed=1, grad_accum=2, rank=1, world_size=2)
    b.load_state_dict(state)
    for _ in range(3):
        assert torch.equal(a.next_batch(CPU)[0], b.next_batch(CPU)[0])
    # at a step boundary another layout with the same global batch continues the same stream
    boundary = a.state_dict()
    assert boundary["micro"] == 0
    one = TrainBatches(dataset, 8, 16, seed=1)
    one.load_state_dict(boundary)
    two = [TrainBatches(dataset, 2, 16, seed=1, grad_accum=2, rank=r, world_size=2) for r in (0, 1)]
    for loader in two:
        loader.load_state_dict(boundary)
    assert _step_rows([one], 1) == _step_rows(two, 2)
    with pytest.raises(SpecError, match="global_batch"):
        TrainBatches(dataset, 4, 16, seed=1).load_state_dict(boundary)
    with pytest.raises(SpecError, match="seed"):
        TrainBatches(dataset, 8, 16, seed=2).load_state_dict(boundary)
    with pytest.raises(SpecError, match="micro_rows"):
        # inside a step (micro 1 of 2) the rows drawn so far depend on the layout
        TrainBatches(dataset, 8, 16, seed=1).load_state_dict(state)


# -- real runs: torchrun, 2 CPU ranks, gloo on loopback ------------------------------------


def _train(out: Path, data: Path, *args: str, nproc: int = 1, steps: int = STEPS) -> list[dict]:
    """Train with the CLI: under torchrun, as a user would, when nproc > 1; the one-process
    reference in this process (trainrun.train_in_process: torch and the trainer are loaded
    already, and one thread sums as the subprocess's one would); metrics.jsonl's records."""
    train = [*TINY, "--steps", str(steps), "--eval-interval", "100", *args]
    if nproc == 1:
        ok(trainrun.train_in_process(out, data, *train))
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if "event" not in r]
    train = ["-m", "trainbudget", "train", *train, "--data", str(data), "--out", str(out)]
    for attempt in range(2):
        # a free port now; another process may take it first: then retry once
        launch = ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
        launch += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
        r = subprocess.run(
            [sys.executable, *launch, *train],
            env=run_env(None),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=out.parent,
        )
        if r.returncode == 0 or "address already in use" not in r.stderr.lower() or attempt:
            break
    ok(r)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r]  # steps, not checkpoints


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each named run once per module: {name: (run directory, metrics records)}."""
    root = tmp_path_factory.mktemp("runs")
    data = root / "data"
    prepare(None, data, tokenizer="byte")  # the embedded corpus, shared by every run
    specs = {
        # AdamW, gradient clipping at 1.0 (active: norms ~2): global batch 8 rows
        "single-adamw": (1, ("--micro-batch", "8", *ADAMW)),
        "ddp-adamw": (2, ("--micro-batch", "2", "--grad-accum", "2", *ADAMW)),
        # SGD without clipping (the norm-only path); eval every 2 steps, FSDP2's forward
        # outside training included
        "single-sgd": (
            1,
            ("--micro-batch", "4", "--grad-accum", "2", "--eval-interval", "2", *SGD),
        ),
        "ddp-sgd": (2, ("--micro-batch", "4", "--eval-interval", "2", *SGD)),
        "fsdp-sgd": (2, ("--micro-batch", "4", "--eval-interval", "2", "--strategy", "fsdp", *SGD)),
        "single-bf16": (1, ("--micro-batch", "8", *ADAMW, "--precision", "bf16-mixed")),
        "fsdp-bf16": (
            2,
            ("--micro-batch", "4", "--strategy", "fsdp", *ADAMW, "--precision", "bf16-mixed"),
        ),
    }
    done: dict = {}

    def get(name: str):
        if name not in done:
            if name == "fsdp-adamw":  # 4 steps, then resumed from the checkpoint to 8
                out, args = root / name, ("--micro-batch", "2", "--grad-accum", "2")
                args = (*args, "--strategy", "fsdp", *ADAMW)
                _train(out, data, *args, nproc=2, steps=4)
                done[name] = (out, _train(out, data, *args, "--resume", nproc=2))
            else:
                nproc, args = specs[name]
                done[name] = (root / name, _train(root / name, data, *args, nproc=nproc))
        return done[name]

    return get


def _assert_same_trajectory(got: list[dict], want: list[dict], rtol: dict[str, float]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(1, STEPS + 1))
    for g, w in zip(got, want, strict=True):
        for key, tol in rtol.items():
            assert g[key] == pytest.approx(w[key], rel=tol), (key, g["step"], g[key], w[key])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_two_ranks_follow_the_single_process_trajectory(runs, strategy, optimizer):
    _, want = runs(f"single-{optimizer}")
    _, got = runs(f"{strategy}-{optimizer}")
    _assert_same_trajectory(got, want, {"loss": RTOL, "grad_norm": RTOL, "lr": 1e-12})
    # the loss goes down: the comparison is of a run that trains
    assert got[-1]["loss"] < got[0]["loss"] - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fsdp-sgd", "ddp-sgd"])
def test_ranks_evaluate_like_one_process_between_steps(runs, name):
    # FSDP2: every rank scores every held-out batch (each forward is a collective); DDP: the
    # ranks split the batches and add up their sums. The held-out windows are the same whatever
    # the micro-batch (ddp-sgd runs 4 rows per rank, single-sgd 4 x 2 accumulated)
    _, want = runs("single-sgd")
    _, got = runs(name)
    evals = [
        (g["eval"]["val_loss"], w["eval"]["val_loss"])
        for g, w in zip(got, want, strict=True)
        if "eval" in w
    ]
    assert len(evals) == STEPS // 2
    for g, w in evals:
        assert g == pytest.approx(w, rel=RTOL)


@pytest.mark.slow
def test_bf16_mixed_master_weights_work_under_fsdp(runs):
    # MasterWeightOptimizer keeps fp32 masters of FSDP2's bf16 DTensor shards: it works, so the
    # combination is allowed (not rejected)
    _, want = runs("single-bf16")
    _, got = runs("fsdp-bf16")
    # the gradient norm is computed in bf16 (clip_grad_norm_ works in the gradients' dtype):
    # norms here are ~2, where a bf16 ulp is 2^-6 (0.4 to 0.8 % relative); observed 1 ulp
    _assert_same_trajectory(got, want, {"loss": RTOL_BF16, "grad_norm": 2**-5, "lr": 1e-12})


def _newest(out: Path) -> Path:
    return list_checkpoints(out / "checkpoints")[0]


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=True, map_location="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ddp-adamw", "fsdp-sgd", "fsdp-adamw"])
def test_checkpoints_hold_the_single_process_state_and_the_summary_is_written_once(runs, name):
    out, records = runs(name)
    optimizer = name.split("-")[1]
    ref_out, _ = runs(f"single-{optimizer}")
    # one writer: metrics.jsonl is appended to, so two writers would log every step twice
    assert len(records) == STEPS
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["tokens_per_step"] == 8 * 32  # the global batch, as in the 1-process run
    assert summary["loss_final"] == records[-1]["loss"]
    state = json.loads((_newest(out) / "state.json").read_text())
    assert state["step"] == STEPS
    assert state["loader"]["global_batch"] == 8 and state["loader"]["micro"] == 0
    # DDP: rank 0 writes model.pt/optimizer.pt; FSDP2: every rank writes its shards with DCP
    # (dcp/). Either way the state reads back in the single-process format (no DDP "module."
    # prefix, no FSDP2 DTensor shards)
    if name.startswith("fsdp"):
        assert not (_newest(out) / "model.pt").exists()
        full = read_sharded(_newest(out) / "dcp")
        model, opt = full["model"], full["optimizer"]
    else:
        model, opt = _load(_newest(out) / "model.pt"), _load(_newest(out) / "optimizer.pt")
    ref = _load(_newest(ref_out) / "model.pt")
    assert list(model) == list(ref)
    for key, value in model.items():
        assert type(value) is torch.Tensor and value.shape == ref[key].shape, key
    if optimizer == "sgd":  # the update is linear in the gradient: parameters agree closely
        for key, value in model.items():
            torch.testing.assert_close(value, ref[key], rtol=0, atol=1e-6)
    # the optimizer: full state tensors, the same as the 1-process run's (AdamW's moments; under
    # Adam, parameters whose gradient is ~0, such as attention's key bias, move by ~lr on
    # rounding noise, so the moments are compared rather than those parameters)
    ref_opt = _load(_newest(ref_out) / "optimizer.pt")
    assert opt["param_groups"] == ref_opt["param_groups"]
    assert sorted(opt["state"]) == sorted(ref_opt["state"])
    for index, per_param in opt["state"].items():
        for key, value in per_param.items():
            assert type(value) is torch.Tensor
            torch.testing.assert_close(value, ref_opt["state"][index][key], rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_the_summary_predicts_the_layout_that_runs(runs):
    # the same model, batch and optimizer on 2 ranks: DDP keeps a full replica of the model
    # state on each, FSDP2 (ZeRO-3) a half (ZeRO, arXiv 1910.02054, Sec. 5.1); every log line
    # carries the same per-rank prediction as the summary
    summaries = {}
    for name in ("ddp-sgd", "fsdp-sgd"):
        out, records = runs(name)
        summaries[name] = json.loads((out / "summary.json").read_text())
        predicted = {k: v for k, v in summaries[name]["memory_bytes"].items() if "predicted" in k}
        for r in records:
            assert {k: r["memory_bytes"][k] for k in predicted} == predicted
            assert r["predicted_step_seconds"] == summaries[name]["step_seconds"]["predicted"]
    ddp, fsdp = summaries["ddp-sgd"], summaries["fsdp-sgd"]
    assert ddp["plan"] == "dp2 tp1 pp1 zero0 mb4x1"
    assert fsdp["plan"] == "dp2 tp1 pp1 zero3 mb4x1"
    ddp_state = ddp["memory_bytes"]["predicted_model_state"]
    fsdp_state = fsdp["memory_bytes"]["predicted_model_state"]
    assert fsdp_state == pytest.approx(ddp_state / 2)
    assert fsdp["memory_bytes"]["predicted_peak"] < ddp["memory_bytes"]["predicted_peak"]
    assert any("zero3" in note for note in fsdp["notes"])


@pytest.mark.slow
def test_the_plan_from_trainbudget_plan_decides_the_layout(tmp_path):
    # issue 5: "the plan (DP/ZeRO degree) can come from trainbudget plan"
    from clirun import cli_json

    model = [arg for arg in TINY[: TINY.index("--seq-len")]]
    plan = cli_json(
        "plan",
        "--model",
        "gpt2",
        *model,
        "--gpus",
        "2",
        "--gpu",
        "h100-sxm",
        "--global-batch",
        "8",
        "--seq-len",
        "32",
        "--zero-stages",
        "3",
        "--recompute-options",
        "none",
    )
    layout = plan["plans"][0]["plan"]
    assert (layout["dp"], layout["zero"]) == (2, 3)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    data = tmp_path / "data"
    prepare(None, data, tokenizer="byte")
    records = _train(tmp_path / "run", data, "--plan", str(path), *ADAMW, nproc=2, steps=4)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["strategy"] == "fsdp"
    assert (config["micro_batch"], config["grad_accum"]) == (
        layout["micro_batch"],
        layout["grad_accum"],
    )
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    # and the predictions are the plan's own layout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["plan"] == read_plan(str(path)).describe()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads in /proc (Linux)")
# one data-parallel wrapper and one sharded optimizer: the process group's threads are the
# same under every strategy (zero1 and fsdp were dropped to keep the suite within CI's time)
@pytest.mark.parametrize("strategy", ["ddp", "zero2"])
def test_no_thread_of_the_process_group_outlives_train(tmp_path, strategy):
    # Regression: destroy_process_group alone left gloo's threads running into interpreter
    # exit (DDP and FSDP2 held the group, and DTensor's caches held FSDP2's DeviceMesh), where a
    # worker still freeing its last collective's tensors aborted the rank ("terminate called
    # without an active exception") now and then under load. Deterministic: the threads are
    # there or not when train() returns. 3 steps: a checkpoint (DCP under FSDP2), an
    # evaluation and clipped gradients (DTensor collectives) all come before the exit.
    data = tmp_path / "data"
    prepare(None, data, tokenizer="byte")
    args = (*TINY, "--steps", "3", "--checkpoint-every", "3", "--micro-batch", "2", *ADAMW)
    r = ok(
        trainrun.train_cli(
            tmp_path / "run",
            data,
            *args,
            "--strategy",
            strategy,
            nproc=2,
            script=Path(__file__).with_name("rank_exit.py"),
        )
    )
    files = sorted((tmp_path / "run").glob("rank-exit-*.json"))
    reports = [json.loads(f.read_text()) for f in files]
    assert sorted(report["rank"] for report in reports) == [0, 1], r.stdout
    for report in reports:
        assert report["code"] == 0
        assert not [name for name in report["threads"] if "gloo" in name], report
