"""Expert parallelism (train.parallel.expert_parallel): refusals; the MoE layer's all-to-all round
trip against the whole model in one process (an expert that gets no token anywhere included), with
its all-to-all bytes and per-rank expert parameters against the core's predictions; and 2-rank
ep2 runs (launched by hand, tests/trainrun.py's train_run) against one process -- same losses,
exact resume, a checkpoint that resumes in one process.

Tolerance, fp32: relative 1e-4 on the logged losses and gradient norms, as in
test_distributed.py (the same computation, sums in another order). Observed on this machine:
<= 1.2e-7. The comparison is against the one-process run with the same micro-batches (micro_batch
4, grad_accum 2 = the 2 ranks' micro-batches), so the capacity rule (1.25, applied per
micro-batch on the source rank) drops the same assignments: the dropped counts are equal too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.preflight import apply_plan, preflight

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import trainrun  # noqa: E402
from trainbudget.core.parallel.cluster import Cluster  # noqa: E402
from trainbudget.core.parallel.memory.parallel_memory import stage_params  # noqa: E402
from trainbudget.core.parallel.timing.step_time import step_time  # noqa: E402
from trainbudget.core.spec.hardware import get_hardware  # noqa: E402
from trainbudget.core.spec.precision import get_optimizer, get_precision  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainrun import ok, run_env, steps  # noqa: E402

pytestmark = pytest.mark.torch

RANKS = Path(__file__).with_name("expert_ranks.py")
MOE = ("n_layers=2", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")
MOE_EXPERTS = (*MOE, "n_experts=4", "experts_per_token=2")
RTOL = 1e-4


# -- refusals, before anything starts --------------------------------------------------------


def test_ep_must_be_positive_and_refuses_zero1_and_hsdp():
    with pytest.raises(SpecError, match=r"ep = 0: must be a positive integer"):
        TrainConfig(ep=0)
    with pytest.raises(SpecError, match=r"ep = 2: runs with .* not zero1: ZeroRedundancy"):
        TrainConfig(ep=2, strategy="zero1")
    with pytest.raises(SpecError, match=r"ep = 2: runs with .* not hsdp: the expert groups"):
        TrainConfig(ep=2, strategy="hsdp", zero_shard=1)
    with pytest.raises(SpecError, match=r"ep = 2: does not run with amp-fp16"):
        TrainConfig(ep=2, precision="amp-fp16")


@pytest.mark.parametrize(
    ("overrides", "world", "rule"),
    [
        (MOE, 2, r"ep = 2: needs an MoE model"),
        ((*MOE, "n_experts=3", "experts_per_token=1"), 2, r"must divide n_experts \(3\)"),
        (MOE_EXPERTS, 3, r"must divide the data-parallel processes \(3\)"),
    ],
)
def test_preflight_refuses_an_ep_that_does_not_fit(tmp_path, overrides, world, rule):
    cfg = TrainConfig(ep=2, overrides=overrides, seq_len=32, out=str(tmp_path / "run"))
    with pytest.raises(SpecError, match=rule):
        preflight(cfg, world_size=world)


def test_a_plan_with_ep_decides_it():
    cfg = TrainConfig(overrides=MOE_EXPERTS, plan="p.json")
    plan = Plan(dp=2, ep=2, micro_batch=4, grad_accum=1)
    assert apply_plan(cfg, plan, world_size=2).ep == 2
    with pytest.raises(SpecError, match=r"ep = 4: conflicts with the plan"):
        apply_plan(TrainConfig(overrides=MOE_EXPERTS, plan="p.json", ep=4), plan, world_size=2)


# -- the layer's round trip, 2 ranks by hand over a file store ---------------------------------


CASES = ("balanced", "idle", "recompute")


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory) -> dict[str, list[dict]]:
    """{case: each rank's result} of expert_ranks.py on 2 ranks, ep 2: every case in one launch
    (the interpreters' start-up is most of a launch's ~12 s)."""
    return _ranks(tmp_path_factory.mktemp("ep-ranks"), ",".join(CASES))


def _ranks(tmp_path: Path, cases: str, world: int = 2, ep: int = 2) -> dict[str, list[dict]]:
    store = tmp_path / "store"
    outs = [tmp_path / f"rank-{r}.json" for r in range(world)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANKS), str(r), str(world), str(ep), str(store), str(out), cases],
            env=run_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for r, out in enumerate(outs)
    ]
    for proc in procs:
        ok(trainrun.finish(proc, timeout=180))
    ranks = [json.loads(out.read_text()) for out in outs]
    return {case: [rank[case] for rank in ranks] for case in cases.split(",")}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["balanced", "idle"])
def test_the_all_to_all_round_trip_is_the_whole_model(round_trips, case):
    # "idle": every token goes to expert 0; rank 1's experts (2, 3) get no row from anyone,
    # and still run (an empty slice), with zero gradients, and nothing hangs
    results = round_trips[case]
    for r in results:
        assert r["output_diff"] < 1e-5
        assert r["expert_grad_diff"] < 1e-5
    assert results[1]["expert_grads_all_zero"] == (case == "idle")
    assert not results[0]["expert_grads_all_zero"]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "calls_per_layer"), [("balanced", 4), ("recompute", 6)])
def test_all_to_all_bytes_and_expert_memory_match_the_core(round_trips, case, calls_per_layer):
    # dropless top-2: the core's buffers (core/parallel/timing/comm_time.py: tokens x k x d_model x
    # bytes per call, 4 calls per MoE layer and micro-batch, 6 with full recomputation) are
    # what is sent, on average over the ranks (each rank sends its own N x k rows forward; what
    # it sends back depends on the routing)
    sys.path.insert(0, str(RANKS.parent))
    from expert_ranks import ROWS, SEQ, spec_for

    results = round_trips[case]
    spec = spec_for(case)
    recompute = "full" if case == "recompute" else "none"
    plan = Plan(dp=2, ep=2, micro_batch=ROWS, grad_accum=1, recompute=recompute)
    t = step_time(
        spec,
        plan,
        Cluster(hardware=get_hardware("h100-sxm"), n_gpus=2),
        seq_len=SEQ,
        precision=get_precision("fp32"),
        optimizer=get_optimizer("adamw"),
    )
    # the core's bytes_sent_per_rank leaves out the 1/ep share a rank keeps: (ep - 1) / ep of n
    predicted_buffers = t.comm_bytes["ep"] * plan.ep / (plan.ep - 1)
    measured = sum(r["token_bytes"] for r in results) / len(results)
    assert measured == pytest.approx(predicted_buffers, rel=1e-12)
    assert all(r["calls"] == calls_per_layer * spec.n_layers for r in results)
    # each rank holds n_experts / ep experts of every layer: parallel_memory's expert share
    assert all(r["expert_params"] == stage_params(spec, plan, "only").experts for r in results)


# -- whole runs, the ranks launched by hand ------------------------------------------------


def _train(out: Path, data: Path, *args: str, nproc: int) -> dict[int, dict]:
    model = [a for item in MOE_EXPERTS for a in ("--set", item)]
    common = (*model, "--seq-len", "32", "--log-interval", "1", "--no-tensorboard")
    common += ("--device", "cpu", "--precision", "fp32", "--seed", "7", "--optimizer", "adamw")
    common += ("--lr", "1e-3", "--schedule", "constant", "--eval-interval", "3")
    common += ("--eval-batches", "1")
    ok(trainrun.train_run(out, data, *common, *args, nproc=nproc))
    return steps(out)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ep") / "data"
    prepare(None, folder, tokenizer="byte")
    return folder


@pytest.fixture(scope="module")
def single(tmp_path_factory, data) -> dict[int, dict]:
    """The one-process run with the 2 ranks' micro-batches: micro_batch 4, grad_accum 2."""
    out = tmp_path_factory.mktemp("single") / "one"
    return _train(out, data, "--micro-batch", "4", "--grad-accum", "2", "--steps", "6", nproc=1)


def _assert_follows(got: dict[int, dict], want: dict[int, dict]) -> None:
    assert sorted(got) == sorted(want) == list(range(1, 7))
    for s, w in want.items():
        assert got[s]["loss"] == pytest.approx(w["loss"], rel=RTOL), s
        assert got[s]["grad_norm"] == pytest.approx(w["grad_norm"], rel=RTOL), s
        assert got[s]["moe_dropped_tokens"] == w["moe_dropped_tokens"], s
    assert got[3]["eval"]["val_loss"] == pytest.approx(want[3]["eval"]["val_loss"], rel=RTOL)
    assert want[6]["loss"] < want[1]["loss"] - 0.1  # it trains


@pytest.mark.slow
def test_two_ranks_with_ep2_follow_one_process_and_resume_exactly(tmp_path, data, single):
    run = tmp_path / "ep2"
    _train(run, data, "--micro-batch", "4", "--ep", "2", "--steps", "3", nproc=2)
    # the step-3 checkpoint, continued in one process (a copy, before the ep2 run goes on)
    alone = tmp_path / "alone"
    (alone / "checkpoints").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl"):
        (alone / name).write_bytes((run / name).read_bytes())
    step3 = next((run / "checkpoints").glob("step-00000003"))
    subprocess.run(["cp", "-r", str(step3), str(alone / "checkpoints")], check=True)
    resumed = _train(
        run, data, "--micro-batch", "4", "--ep", "2", "--steps", "6", "--resume", nproc=2
    )
    one = _train(
        alone, data, "--micro-batch", "4", "--grad-accum", "2", "--steps", "6", "--resume", nproc=1
    )
    _assert_follows(resumed, single)
    _assert_follows(one, single)
    summary = json.loads((run / "summary.json").read_text())
    assert "expert parallel (ep=2" in summary["strategy_engine"]
    assert summary["mesh"] == {"dp": 2, "ep": 2, "expert_replicas": 1}
    # each rank's optimizer state: its share of the experts, as parallel_memory predicts
    state = summary["optimizer_state_bytes_per_rank"]
    assert state["measured"] == [state["predicted"]] * 2


@pytest.mark.slow
def test_fsdp2_with_ep2_follows_one_process_and_resumes_exactly(tmp_path, data, single):
    # the experts sharded by FSDP2 over their replicas (one rank here), the rest over both
    run, args = tmp_path / "fsdp-ep2", ("--micro-batch", "4", "--ep", "2", "--strategy", "fsdp")
    _train(run, data, *args, "--steps", "3", nproc=2)
    _assert_follows(_train(run, data, *args, "--steps", "6", "--resume", nproc=2), single)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["strategy_engine"].startswith("FSDP2 fully_shard + expert parallel (ep=2")
    # FSDP2's shards are uneven by a few elements: the mean over ranks is the prediction
    state = summary["optimizer_state_bytes_per_rank"]
    assert sum(state["measured"]) / 2 == pytest.approx(state["predicted"], rel=1e-12)
