"""Pipeline parallelism (train.parallel.pipeline, train.spec.pipeline_split, train.pipeline_step):
the stage split and the schedules' rules (pure), the stages chained in one process equal to the
model, the optimizer state in the whole model's layout, and real runs on several ranks (gloo, CPU)
whose loss, gradient norm and held-out loss follow one process with the same global batch: pp2 under
each schedule (1F1B; GPipe with an uneven split; interleaved 1F1B with 2 virtual stages per
rank, from a plan file), dp2 x pp2 under DDP and FSDP2 on 4 ranks, tp2 (sequence parallel)
x pp2 1F1B on 4 ranks from a plan file (vocabulary 260, split in 2); resumes exact under pp2,
under dp2 x pp2 FSDP2, in one process from a pp2 checkpoint, under dp2 x pp2 FSDP2 from one
process's full checkpoint, and from a tp2 x pp2 checkpoint under tp2 x pp2 and in one process.

Tolerance, fp32: relative 1e-4 (the bound of tests/train/launch/test_distributed.py) on every logged
loss, gradient norm and held-out loss. The pipeline computes the same sums in another order
(the micro-batches' gradients summed, then divided by their number; the tied embedding's two
halves all-reduced; the norm's squares summed over the stages): fp32 rounding, observed
<= 9.2e-8 relative on loss and gradient norm, <= 8e-9 on the held-out loss, over all these
runs. A wrong pipeline fails by far (measured once by breaking the code): the tied halves not
summed change the step-1 gradient norm from 3.26 to 3.08 and the step-2 loss by 1e-3
relative; gradients not divided by the micro-batches (scale_grads=False) leave AdamW's
clipped update as it is but report a norm 4x (13.0 against 3.26), which the norm's check
catches.
The model is GPT-2 shaped (tied embeddings, learned positions), 4 layers of width 32.
The ranks are launched by hand, the one-process runs made in the test's process
(tests/trainrun.py: train_run). Timing on 2 busy cores: ~12-20 s per 2-rank run, ~25-35 s per
4-rank run, ~1 s per one-process run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.pipeline_split import (
    check_schedule,
    pipeline_engine,
    rank_stages,
    stage_layer_counts,
    stage_layers,
)
from trainbudget.train.spec.preflight import apply_plan
from trainbudget.train.spec.strategy import mesh_shape

# -- pure: the split and the rules -----------------------------------------------------------


def test_an_even_split_gives_each_stage_the_same_layers():
    assert stage_layer_counts(8, pp=2) == (4, 4)
    assert stage_layer_counts(8, pp=2, vpp=2) == (2, 2, 2, 2)
    assert stage_layers(4, pp=2) == (range(0, 2), range(2, 4))


def test_an_uneven_split_is_taken_as_given():
    assert stage_layers(6, pp=2, pp_layers="1,5") == (range(0, 1), range(1, 6))
    assert stage_layer_counts(6, pp=2, vpp=2, pp_layers="1,2,2,1") == (1, 2, 2, 1)


@pytest.mark.parametrize(
    ("n_layers", "kw", "field", "words"),
    [
        (6, {"pp": 4}, "n_layers", "divisible by pp (4) * vpp (1) = 4"),
        (6, {"pp": 2, "pp_layers": "1,2,3"}, "pp_layers", "one entry per stage"),
        (6, {"pp": 2, "pp_layers": "2,3"}, "pp_layers", "sums to 5, not the model's n_layers (6)"),
        (6, {"pp": 2, "pp_layers": "3,x"}, "pp_layers", "positive integers"),
        (6, {"pp": 2, "pp_layers": "6,0"}, "pp_layers", "positive integers"),
    ],
)
def test_a_split_that_does_not_fit_is_refused_in_one_line(n_layers, kw, field, words):
    with pytest.raises(SpecError) as err:
        stage_layer_counts(n_layers, **kw)
    assert err.value.field == field and words in err.value.rule
    assert "\n" not in str(err.value)


def test_interleaved_stages_loop_over_the_ranks():
    # Narayanan et al. 2021, Sec. 2.2.2: with 2 ranks and 2 virtual stages each, rank 0 runs
    # stages 0 and 2, rank 1 stages 1 and 3
    assert rank_stages(0, pp=2, vpp=2) == (0, 2)
    assert rank_stages(1, pp=2, vpp=2) == (1, 3)
    assert rank_stages(3, pp=4) == (3,)


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "m", "field", "words"),
    [
        ("1f1b", 4, 1, 2, "grad_accum", "must be >= pp (4)"),
        ("interleaved-1f1b", 2, 1, 4, "vpp", ">= 2"),
        ("gpipe", 2, 2, 4, "vpp", "must be 1 with pp_schedule gpipe"),
        # torch: max(1, 5 // 2) = 2 rounds, 5 micro-batches are not a multiple of them
        ("interleaved-1f1b", 2, 2, 5, "grad_accum", "multiple of max(1, grad_accum // pp) = 2"),
        ("zero-bubble", 2, 1, 4, "pp_schedule", "must be one of gpipe, 1f1b, interleaved-1f1b"),
    ],
)
def test_torch_s_schedule_rules_are_checked_first(schedule, pp, vpp, m, field, words):
    with pytest.raises(SpecError) as err:
        check_schedule(schedule, pp=pp, vpp=vpp, n_microbatches=m)
    assert err.value.field == field and words in err.value.rule


def test_schedules_torch_accepts_pass():
    check_schedule("gpipe", pp=4, vpp=1, n_microbatches=1)  # GPipe has no minimum
    check_schedule("1f1b", pp=2, vpp=1, n_microbatches=2)
    check_schedule("interleaved-1f1b", pp=4, vpp=2, n_microbatches=3)  # torch's own example


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"pp": 0}, "pp", "positive integer"),
        ({"vpp": 2, "pp_schedule": "interleaved-1f1b"}, "vpp", "needs pp > 1"),
        ({"pp_layers": "2,2"}, "pp_layers", "needs pp > 1"),
        ({"pp": 2, "grad_accum": 2, "strategy": "zero1"}, "strategy", "zero1 with pp > 1"),
        ({"pp": 2, "grad_accum": 2, "precision": "bf16-mixed"}, "precision", "bf16-mixed"),
        ({"pp": 2, "grad_accum": 2, "compile": True}, "compile", "pp > 1"),
        ({"pp": 2, "grad_accum": 2, "probes": "p.tsv"}, "probes", "no stage holds"),
        ({"pp": 2, "grad_accum": 1}, "grad_accum", "must be >= pp (2)"),
    ],
)
def test_the_config_refuses_what_the_pipeline_does_not_run(fields, field, words):
    with pytest.raises(SpecError) as err:
        TrainConfig(**fields)
    assert err.value.field == field and words in err.value.rule


MOE_TINY = ("n_layers=2", "d_model=32", "n_heads=2", "n_kv_heads=1", "d_ff=64", "vocab_size=257")


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"pp_layers": "1,2"}, "pp_layers", "sums to 3, not the model's n_layers (4)"),
        ({"overrides": ("n_layers=3",)}, "n_layers", "divisible by pp (2) * vpp (1) = 2"),
        ({"model": "mixtral-8x7b", "overrides": MOE_TINY}, "pp", "does not run MoE models"),
        ({"pp": 4, "grad_accum": 4}, "pp", "must divide the processes (2)"),
    ],
)
def test_preflight_refuses_a_model_the_stages_cannot_hold(tmp_path, fields, field, words):
    from trainbudget.train.spec.preflight import preflight

    base = {"pp": 2, "grad_accum": 2, "out": str(tmp_path / "run")}
    with pytest.raises(SpecError) as err:
        preflight(TrainConfig(**{**base, **fields}), world_size=2)
    assert err.value.field == field and words in err.value.rule


def test_the_mesh_puts_pp_outermost():
    shape = mesh_shape("fsdp", world_size=8, zero_shard=0, pp=2)
    assert (shape.axes, shape.sizes) == (("pp", "dp"), (2, 4))
    shape = mesh_shape("hsdp", world_size=8, zero_shard=2, pp=2)
    assert (shape.axes, shape.sizes) == (("pp", "dp_replicate", "dp_shard"), (2, 2, 2))
    with pytest.raises(SpecError, match="must divide the processes"):
        mesh_shape("ddp", world_size=6, zero_shard=0, pp=4)


def test_a_plan_with_pp_decides_the_pipeline():
    plan = Plan(dp=2, pp=2, pp_layers=(1, 3), zero=3, micro_batch=2, grad_accum=4)
    cfg = apply_plan(TrainConfig(plan="p.json"), plan, world_size=4)
    assert (cfg.pp, cfg.pp_schedule, cfg.vpp, cfg.pp_layers) == (2, "1f1b", 1, "1,3")
    assert (cfg.strategy, cfg.micro_batch, cfg.grad_accum) == ("fsdp", 2, 4)
    plan = Plan(dp=1, pp=2, vpp=2, schedule="interleaved", grad_accum=4)
    cfg = apply_plan(TrainConfig(plan="p.json"), plan, world_size=2)
    assert (cfg.pp, cfg.pp_schedule, cfg.vpp) == (2, "interleaved-1f1b", 2)
    with pytest.raises(SpecError) as err:
        apply_plan(TrainConfig(plan="p.json"), plan, world_size=4)
    assert "dp(1) * tp(1) * pp(2) * cp(1) = 2 processes" in err.value.rule


def test_the_engine_says_what_runs():
    text = pipeline_engine("1f1b", pp=2, vpp=1, dp=2, dp_engine="FSDP2 fully_shard")
    assert text == (
        "torch.distributed.pipelining Schedule1F1B, 2 stages; FSDP2 fully_shard per stage over dp=2"
    )
    text = pipeline_engine("gpipe", pp=2, vpp=1, dp=2, tp=2, dp_engine="FSDP2 + DTensor TP")
    assert text.endswith("; FSDP2 + DTensor TP per stage over dp=2 x tp=2")


def test_tp_inside_the_stages_is_accepted():
    cfg = TrainConfig(pp=2, grad_accum=2, tp=2, sequence_parallel=True)
    assert (cfg.pp, cfg.tp, cfg.sequence_parallel) == (2, 2, True)


# -- in one process: the stages are the model ------------------------------------------------

torch = pytest.importorskip("torch")

from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.model.transformer import build_model  # noqa: E402
from trainbudget.train.parallel.pipeline import (  # noqa: E402
    PipelineOptimizer,
    StageModule,
    whole_model_on_meta,
)

GPT2_TINY = ("n_layers=4", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


def _model(model: str = "gpt2", overrides=GPT2_TINY):
    return build_model(resolve_model(model, overrides), seed=3)


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b"])
def test_the_stages_chained_compute_the_model(model):
    overrides = GPT2_TINY if model == "gpt2" else (*GPT2_TINY, "d_ff=96")
    full = _model(model, overrides)  # llama: RoPE, computed inside each stage
    layers = stage_layers(4, pp=2, vpp=2)
    stages = [StageModule(full, layers[s], first=s == 0, last=s == 3) for s in range(4)]
    x = torch.randint(0, 257, (2, 16))
    out = x
    for stage in stages:
        out = stage(out)
    torch.testing.assert_close(out, full(x)[0], rtol=0, atol=0)


def test_a_stage_keeps_the_model_s_parameter_names():
    full = _model()
    first = StageModule(full, range(0, 2), first=True, last=False)
    last = StageModule(full, range(2, 4), first=False, last=True)
    names = set(first.state_dict()) | set(last.state_dict())
    assert names == set(full.state_dict())  # tied: tok.weight on the first, head.weight last
    assert "blocks.3.attn.qkv.weight" in last.state_dict()


def test_the_optimizer_state_is_in_the_whole_model_s_layout():
    full = _model()
    whole = whole_model_on_meta(full)
    cfg = TrainConfig(optimizer="adamw", pp=2, grad_accum=2)
    last = StageModule(full, range(2, 4), first=False, last=True)
    opt = PipelineOptimizer(last, whole, cfg)
    for p in last.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    state = opt.state_dict()
    # one process's AdamW over the whole model: one group of all its (distinct) parameters
    n_whole = len(list(full.parameters()))
    assert state["param_groups"][0]["params"] == list(range(n_whole))
    # the tied head's state sits under the embedding's index (0): one parameter
    index = {name: i for i, (name, _) in enumerate(full.named_parameters())}
    assert 0 in state["state"] and index["blocks.2.attn.qkv.weight"] in state["state"]
    assert index["blocks.1.attn.qkv.weight"] not in state["state"]
    # and loads back, keeping this rank's entries
    again = PipelineOptimizer(last, whole, cfg)
    again.load_state_dict(state)
    assert len(again.state) == len(list(last.parameters()))


# -- real runs: ranks launched by hand, gloo on loopback -------------------------------------

if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from trainbudget.data.prepare import prepare  # noqa: E402
from trainrun import ok, train_run  # noqa: E402

STEPS = 4
TINY = (
    *(item for o in GPT2_TINY for item in ("--set", o)),
    *("--seq-len", "32", "--log-interval", "1", "--eval-interval", "2", "--no-tensorboard"),
    *("--device", "cpu", "--precision", "fp32", "--seed", "7", "--checkpoint-every", "2"),
    *("--optimizer", "adamw", "--lr", "1e-3", "--schedule", "constant", "--no-memory-check"),
)
RTOL = 1e-4
# every run: a global batch of 8 rows of 32 tokens, 2 rows per micro-batch
SINGLE = ("--micro-batch", "2", "--grad-accum", "4")
PP2 = (*SINGLE, "--pp", "2")
DP2_PP2 = ("--micro-batch", "2", "--grad-accum", "2", "--pp", "2")
RUNS = {
    "single": (1, SINGLE),
    "pp2-1f1b": (2, PP2),
    "pp2-gpipe-uneven": (2, (*PP2, "--pp-schedule", "gpipe", "--pp-layers", "1,3")),
    # the layout from a plan file: `trainbudget plan --json`'s best, made dp1 pp2 vpp2
    "plan-pp2-interleaved": (2, ("--plan", "{plan}")),
    "dp2-pp2-ddp": (4, (*DP2_PP2, "--strategy", "ddp")),
    "dp2-pp2-fsdp": (4, (*DP2_PP2, "--strategy", "fsdp")),
    # tensor parallelism inside the stages: the vocabulary split in 2 (260, not 257)
    "single-v260": (1, (*SINGLE, "--set", "vocab_size=260")),
    # `trainbudget plan --json` for 4 GPUs, made dp1 tp2+sp pp2 1F1B
    "plan-tp2-pp2": (4, ("--set", "vocab_size=260", "--plan", "{plan-tp}")),
}


def _train(out: Path, data: Path, args, *, nproc: int, steps: int = STEPS) -> list[dict]:
    """`trainbudget train` (tests/trainrun.py's train_run: ranks launched by hand, one process
    in this one); metrics.jsonl's steps."""
    ok(train_run(out, data, *TINY, "--steps", str(steps), *args, nproc=nproc))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each named run once per module: {name: (run directory, metrics records)}."""
    root = tmp_path_factory.mktemp("pp-runs")
    data = root / "data"
    prepare(None, data, tokenizer="byte")
    done: dict = {"data": data, "root": root}

    def get(name: str):
        if name not in done:
            nproc, args = RUNS[name]
            plans = {"{plan}": _plan_file, "{plan-tp}": _tp_plan_file}
            args = [str(plans[a](root)) if a in plans else a for a in args]
            done[name] = (root / name, _train(root / name, data, args, nproc=nproc))
        return done[name]

    get.data, get.root = data, root
    return get


def _plan_file(root: Path) -> Path:
    """`trainbudget plan --json` for the tiny model on 2 GPUs (its best layout: dp2), the best
    layout edited to 2 pipeline stages of 2 virtual stages each, interleaved 1F1B."""
    from clirun import cli_json

    model = [item for o in GPT2_TINY for item in ("--set", o)]
    doc = cli_json(
        "plan",
        *("--model", "gpt2", *model, "--gpus", "2", "--gpu", "h100-sxm"),
        *("--global-batch", "8", "--seq-len", "32", "--recompute-options", "none"),
    )
    layout = doc["plans"][0]["plan"]
    layout.update(dp=1, pp=2, vpp=2, schedule="interleaved", zero=0, zero_shard=0)
    layout.update(micro_batch=2, grad_accum=4, global_batch=8)
    path = root / "plan.json"
    path.write_text(json.dumps(doc))
    return path


def _tp_plan_file(root: Path) -> Path:
    """`trainbudget plan --json` for the tiny model (vocabulary 260) on 4 GPUs, its best layout
    edited to tensor parallelism with sequence parallelism inside 2 pipeline stages, 1F1B."""
    from clirun import cli_json

    model = [item for o in (*GPT2_TINY, "vocab_size=260") for item in ("--set", o)]
    doc = cli_json(
        "plan",
        *("--model", "gpt2", *model, "--gpus", "4", "--gpu", "h100-sxm"),
        *("--global-batch", "8", "--seq-len", "32", "--recompute-options", "none"),
    )
    layout = doc["plans"][0]["plan"]
    layout.update(dp=1, tp=2, sp=True, pp=2, vpp=1, schedule="1f1b", zero=0, zero_shard=0)
    layout.update(pp_layers=[], micro_batch=2, grad_accum=4, global_batch=8)
    path = root / "plan-tp.json"
    path.write_text(json.dumps(doc))
    return path


def _assert_follows(got: list[dict], want: list[dict], first_step: int = 1) -> None:
    assert [r["step"] for r in got] == list(range(first_step, STEPS + 1))
    want = [w for w in want if w["step"] >= first_step]
    for g, w in zip(got, want, strict=True):
        for key in ("loss", "grad_norm"):
            assert g[key] == pytest.approx(w[key], rel=RTOL), (key, g["step"], g[key], w[key])
        if "eval" in w:
            assert g["eval"]["val_loss"] == pytest.approx(w["eval"]["val_loss"], rel=RTOL)
    assert want[-1]["loss"] < want[0]["loss"] - 0.1 or first_step > 1  # it trains


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in RUNS if not n.startswith("single")])
def test_the_pipeline_follows_the_single_process_trajectory(runs, name):
    _, want = runs("single-v260" if "tp2" in name else "single")
    out, got = runs(name)
    _assert_follows(got, want)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy_engine"].startswith("torch.distributed.pipelining Schedule")
    if name == "plan-tp2-pp2":
        assert summary["strategy_engine"] == (
            "torch.distributed.pipelining Schedule1F1B, 2 stages; DTensor tensor parallel "
            "(colwise/rowwise, sequence parallel, loss parallel) per stage over tp=2"
        )
        assert summary["mesh"] == {"pp": 2, "dp": 1, "tp": 2}
    elif name.startswith("plan-"):
        assert "ScheduleInterleaved1F1B, 4 stages (2 per rank)" in summary["strategy_engine"]
        assert summary["plan"] == "dp1 tp1 pp2 vpp2 zero0 mb2x4"
    assert summary["mesh"]["pp"] == 2
    assert summary["tokens_per_step"] == 8 * 32


def _resumed(runs, name: str, nproc: int, args) -> list[dict]:
    """A copy of run `name` cut back to its step-2 checkpoint, resumed to the end."""
    src, _ = runs(name)
    out = runs.root / f"{name}-resumed-{nproc}"
    shutil.copytree(src, out)
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["step"] <= 2]
    (out / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    records = _train(out, runs.data, (*args, "--resume"), nproc=nproc)
    return [r for r in records if r["step"] > 2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "nproc", "args"),
    [
        ("pp2-1f1b", 2, PP2),  # the same layout
        ("pp2-1f1b", 1, SINGLE),  # a pp2 checkpoint in one process (DCP: the model's names)
        ("dp2-pp2-fsdp", 4, (*DP2_PP2, "--strategy", "fsdp")),  # FSDP2 shards per stage
        # one process's full checkpoint (model.pt, optimizer.pt) cut into stages and shards
        ("single", 4, (*DP2_PP2, "--strategy", "fsdp")),
    ],
)
def test_a_resume_continues_exactly(runs, name, nproc, args):
    _, want = runs("single")
    _assert_follows(_resumed(runs, name, nproc, args), want, first_step=3)


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [4, 1])
def test_a_tp2_pp2_resume_continues_exactly(runs, nproc):
    # 4: the same layout from its DCP checkpoint (DTensor shards of the stages); 1: that
    # checkpoint in one process (the whole model's names)
    _, want = runs("single-v260")
    plan = ("--plan", str(runs.root / "plan-tp.json")) if nproc == 4 else SINGLE
    args = ("--set", "vocab_size=260", *plan)
    _assert_follows(_resumed(runs, "plan-tp2-pp2", nproc, args), want, first_step=3)
