"""preflight: the model, the data folder, the probes and the parallel plan, checked against the
config before torch is imported and before anything is written; a plan from a real
`trainbudget plan --json` resolved into the run's micro-batching and strategy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cli_json
from trainbudget.core.errors import SpecError
from trainbudget.data.prepare import prepare
from trainbudget.data.tokenizers import BYTE_VOCAB_SIZE
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.preflight import apply_plan, preflight, read_plan, read_probes

SRC = str(Path(__file__).resolve().parents[3] / "src")
PLAN_ARGS = ("--model", "gpt2", "--gpus", "2", "--gpu", "h100-sxm", "--global-batch", "32")


@pytest.fixture(scope="module")
def plan_doc() -> dict:
    """A real plan for 2 GPUs: data parallel, ZeRO 0-2 (the planner's pick), its micro-batch
    below the trainer's default 16 (so that giving that default is a conflict)."""
    return cli_json(
        "plan", *PLAN_ARGS, "--seq-len", "1024", "--zero-stages", "1", "--max-micro-batch", "8"
    )


@pytest.fixture(scope="module")
def plan3_doc() -> dict:
    return cli_json("plan", *PLAN_ARGS, "--seq-len", "1024", "--zero-stages", "3")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    text = root / "tiny.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 100, encoding="utf-8")
    prepare([str(text)], root / "prepared", tokenizer="byte")
    return root / "prepared"


def write_json(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def config(tmp_path: Path, **kw) -> TrainConfig:
    return TrainConfig(out=str(tmp_path / "run"), **kw)


def refused(cfg: TrainConfig, **kw) -> SpecError:
    with pytest.raises(SpecError) as err:
        preflight(cfg, **kw)
    return err.value


# ---- the plan -------------------------------------------------------------------------------


def test_plan_decides_micro_batching_and_strategy(tmp_path, plan_doc):
    layout = plan_doc["plans"][0]["plan"]
    assert (layout["dp"], layout["tp"], layout["zero"]) == (2, 1, 1)
    pre = preflight(config(tmp_path, plan=write_json(tmp_path / "p.json", plan_doc)), world_size=2)
    cfg = pre.config
    assert (cfg.micro_batch, cfg.grad_accum, cfg.strategy) == (
        layout["micro_batch"],
        layout["grad_accum"],
        "zero1",  # ZeRO 1: DDP with the optimizer state sharded (train.spec.strategy)
    )
    # the run's global batch is the plan's: micro_batch x grad_accum x processes
    assert cfg.micro_batch * cfg.grad_accum * pre.world_size == layout["global_batch"]
    assert pre.plan is not None and pre.plan.describe() == layout["description"]
    # the loop calls preflight again on the resolved config: nothing changes, nothing conflicts
    assert preflight(cfg, world_size=2).config == cfg


def test_zero3_plan_runs_fsdp(tmp_path, plan3_doc):
    assert plan3_doc["plans"][0]["plan"]["zero"] == 3
    path = write_json(tmp_path / "p.json", plan3_doc)
    assert preflight(config(tmp_path, plan=path), world_size=2).config.strategy == "fsdp"


@pytest.mark.parametrize(("zero", "strategy"), [(0, "ddp"), (1, "zero1"), (2, "zero2")])
def test_each_zero_stage_runs_its_own_strategy(tmp_path, plan_doc, zero, strategy):
    # issue 14: a ZeRO-1/2 plan never runs as plain DDP
    path = write_json(tmp_path / "p.json", edited(plan_doc, zero=zero))
    cfg = preflight(config(tmp_path, plan=path), world_size=2).config
    assert (cfg.strategy, cfg.zero_shard) == (strategy, 0)


def test_a_zero3_plan_with_a_shard_group_runs_hsdp(tmp_path, plan3_doc):
    path = write_json(tmp_path / "p.json", edited(plan3_doc, zero_shard=1))
    cfg = preflight(config(tmp_path, plan=path), world_size=2).config
    assert (cfg.strategy, cfg.zero_shard) == ("hsdp", 1)
    # the loop calls preflight again on the resolved config: it stands
    assert preflight(cfg, world_size=2).config == cfg


def test_hsdp_shard_group_must_divide_the_processes(tmp_path):
    cfg = config(tmp_path, strategy="hsdp", zero_shard=3)
    err = refused(cfg, world_size=4)
    assert err.field == "zero_shard" and "divide the processes (4)" in err.rule


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_plan_decides_recomputation(tmp_path, plan_doc, recompute):
    path = write_json(tmp_path / "p.json", edited(plan_doc, recompute=recompute))
    assert preflight(config(tmp_path, plan=path), world_size=2).config.recompute == recompute


@pytest.mark.parametrize("recompute", ["selective", "selective-op"])
def test_selective_recomputation_is_refused(tmp_path, plan_doc, recompute):
    path = write_json(tmp_path / "p.json", edited(plan_doc, recompute=recompute))
    err = refused(config(tmp_path, plan=path), world_size=2)
    assert err.field == "plan" and f"recompute={recompute} " in err.rule
    assert "--recompute-options none,full" in err.rule


def test_recomputing_only_every_kth_layer_is_refused(tmp_path, plan_doc):
    path = write_json(tmp_path / "p.json", edited(plan_doc, recompute="full", recompute_every=2))
    err = refused(config(tmp_path, plan=path), world_size=2)
    assert err.field == "plan" and "recomputes one layer in 2" in err.rule


def test_plan_dp_must_match_the_processes(tmp_path, plan_doc, monkeypatch):
    cfg = config(tmp_path, plan=write_json(tmp_path / "p.json", plan_doc))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    err = refused(cfg)  # alone: one process
    assert err.field == "plan"
    assert (
        "dp(2) * tp(1) * pp(1) * cp(1) = 2 processes" in err.rule
        and "torchrun --nproc-per-node 2" in err.rule
    )
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it
    assert preflight(cfg).world_size == 2
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert refused(cfg).field == "WORLD_SIZE"


@pytest.mark.parametrize(
    ("given", "explicit", "conflict"),
    [
        ({"micro_batch": 4}, {"micro_batch"}, "micro_batch"),
        ({"grad_accum": 3}, {"grad_accum"}, "grad_accum"),
        ({"strategy": "fsdp"}, {"strategy"}, "strategy"),
        ({"micro_batch": 4}, None, "micro_batch"),  # not the default: taken as given
        ({"strategy": "zero1"}, {"strategy"}, None),  # the plan's own value: no conflict
        ({}, {"micro_batch"}, "micro_batch"),  # the default 16, given explicitly
        ({}, None, None),  # defaults: the plan replaces them
    ],
)
def test_plan_conflicts_with_values_the_user_gave(tmp_path, plan_doc, given, explicit, conflict):
    cfg = config(tmp_path, plan=write_json(tmp_path / "p.json", plan_doc), **given)
    if conflict is None:
        resolved = preflight(cfg, world_size=2, explicit=explicit).config
        assert resolved.micro_batch == plan_doc["plans"][0]["plan"]["micro_batch"]
        return
    err = refused(cfg, world_size=2, explicit=explicit)
    assert err.field == conflict
    assert "conflicts with the plan" in err.rule and "dp2" in err.rule


def test_plan_with_context_parallelism_is_taken(tmp_path):
    """Every axis runs (test_tensor_parallel, test_pipeline, test_expert_parallel,
    test_context_parallel): the plan's cp becomes the run's."""
    doc = cli_json(
        "plan",
        *("--model", "llama-2-70b", "--gpus", "16", "--gpu", "h100-sxm"),
        *("--global-batch", "64", "--seq-len", "4096"),
    )
    # the same 16 GPUs as dp8 cp2 (cp's ranks count in ZeRO's shard group: no HSDP group)
    doc = edited(doc, dp=8, tp=1, sp=False, pp=1, vpp=1, schedule="1f1b", cp=2, zero_shard=0)
    doc = edited(doc, micro_batch=1, grad_accum=8, pp_layers=None)  # global batch 64
    cfg = config(tmp_path, plan=write_json(tmp_path / "p.json", doc), seq_len=4096)
    err = refused(cfg, world_size=16)
    assert err.field != "plan"  # what stops it is the tiny data's vocabulary, after the plan
    plan = read_plan(cfg.plan, seq_len=4096)
    assert apply_plan(cfg, plan, world_size=16).cp == 2


def test_a_plan_with_tensor_parallel_pipeline_stages_is_taken(tmp_path):
    """tp inside pipeline stages runs (tests/train/parallel/test_pipeline.py): the planner's
    twenty best plans for Llama 2 70B on 16 GPUs hold some with both (dp1 tp8+sp pp2, dp4
    tp2+sp pp2 vpp4, ...), and the plan check takes the first of them as the file's first
    plan; what stops this run is the tiny data's vocabulary, after the plan is taken."""
    doc = cli_json(
        "plan",
        *("--model", "llama-2-70b", "--gpus", "16", "--gpu", "h100-sxm"),
        *("--global-batch", "64", "--seq-len", "4096", "--top", "20"),
    )
    both = [p for p in doc["plans"] if p["plan"]["tp"] > 1 and p["plan"]["pp"] > 1]
    both = [p for p in both if p["plan"]["cp"] == 1]
    assert both, [p["plan"] for p in doc["plans"]]
    doc["plans"] = both[:1]
    err = refused(config(tmp_path, plan=write_json(tmp_path / "p.json", doc)), world_size=16)
    assert err.field != "plan"


def edited(doc: dict, **changes) -> dict:
    doc = json.loads(json.dumps(doc))
    for key, value in changes.items():
        if value is None:
            del doc["plans"][0]["plan"][key]
        else:
            doc["plans"][0]["plan"][key] = value
    return doc


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: {"plan": d["plans"][0]["plan"]}, '"plans" list'),
        (lambda d: [d], '"plans" list'),
        (lambda d: {**d, "plans": []}, "no plans"),
        (lambda d: {**d, "plans": [{"fits": True}]}, '"plan" object'),
        (lambda d: edited(d, dp=None), 'no "dp"'),
        (lambda d: edited(d, grad_accum=None), 'no "grad_accum"'),
        (lambda d: edited(d, global_batch=None), 'no "global_batch"'),
        (lambda d: edited(d, dp="2"), "plans[0].plan.dp"),
        (lambda d: edited(d, global_batch=48), "global_batch (48)"),
        (lambda d: edited(d, zero=4), "zero (4)"),
        (lambda d: edited(d, cp=3, dp=1, global_batch=16), "cp(3) = 3 processes"),
        (lambda d: edited(d, zero_shard=1), "HSDP) with ZeRO-3 only"),  # a zero 1 plan
        (lambda d: edited(d, offload_optimizer="cpu"), "offload_optimizer=cpu"),
        (lambda d: {**d, "plans": [{**d["plans"][0], "fits": False}]}, "does not fit"),
    ],
)
def test_malformed_plan_file_names_the_problem(tmp_path, plan_doc, make, needle):
    err = refused(
        config(tmp_path, plan=write_json(tmp_path / "p.json", make(plan_doc))), world_size=2
    )
    assert err.field == "plan"
    assert needle in err.rule


def test_plan_file_unreadable_or_not_json(tmp_path):
    assert "cannot be read" in refused(config(tmp_path, plan=str(tmp_path / "no.json"))).rule
    (tmp_path / "p.json").write_text("dp = 2\n")
    assert "not valid JSON" in refused(config(tmp_path, plan=str(tmp_path / "p.json"))).rule


def test_plan_seq_len_is_checked_only_when_the_file_records_it(tmp_path, plan_doc):
    assert "inputs" not in plan_doc  # `plan --json` does not record it: nothing to check
    path = write_json(tmp_path / "p.json", {**plan_doc, "inputs": {"seq_len": 1024}})
    assert read_plan(path, seq_len=1024).dp == 2
    with pytest.raises(SpecError, match="seq_len 1024") as err:
        read_plan(path, seq_len=128)
    assert err.value.field == "seq_len"


# ---- the model ------------------------------------------------------------------------------


def test_embedded_corpus_resolves_the_default_model(tmp_path):
    pre = preflight(config(tmp_path))
    assert pre.data_meta is None and pre.vocab_size == BYTE_VOCAB_SIZE == 257
    assert (pre.spec.n_layers, pre.spec.d_model, pre.spec.vocab_size) == (4, 128, 257)
    assert pre.plan is None and pre.probes == () and pre.world_size == 1
    assert not (tmp_path / "run").exists()  # preflight writes nothing


@pytest.mark.parametrize(
    ("kw", "field", "needle"),
    [
        ({"model": "dense:7B", "overrides": ()}, "model", "architecture"),
        ({"model": "no-such-model"}, "model", "unknown"),
        ({"overrides": ("n_layerz=2",)}, "--set", "unknown field"),
        ({"overrides": ("n_heads=5",)}, "n_heads", "d_model"),
        ({"overrides": ("vocab_size=100",)}, "vocab_size", "257"),
        ({"seq_len": 512}, "seq_len", "max_seq_len (256"),
    ],
)
def test_model_rules(tmp_path, kw, field, needle):
    err = refused(config(tmp_path, **kw))
    assert err.field == field
    assert needle in str(err)


def test_rope_positions_have_no_length_limit(tmp_path):
    overrides = (*TrainConfig().overrides, "position=rope")
    assert preflight(config(tmp_path, seq_len=512, overrides=overrides)).spec.position == "rope"


def test_out_must_not_be_a_file(tmp_path):
    (tmp_path / "run").write_text("not a folder")
    assert refused(config(tmp_path)).field == "out"


# ---- the data -------------------------------------------------------------------------------


def test_prepared_folder_gives_its_meta(tmp_path, data_dir):
    pre = preflight(config(tmp_path, data=str(data_dir)))
    assert pre.data_meta["vocab_size"] == pre.vocab_size == 257
    assert pre.data_meta["tokenizer"]["kind"] == "byte"


def test_sequences_longer_than_a_source_are_refused(tmp_path, data_dir):
    meta = json.loads((data_dir / "meta.json").read_text())
    start, end = meta["sources"][0]["ranges"]["train"]
    overrides = (*TrainConfig().overrides, "position=rope")
    err = refused(config(tmp_path, data=str(data_dir), seq_len=end - start, overrides=overrides))
    assert err.field == "seq_len" and "seq_len + 1" in err.rule and "train tokens" in err.rule
    cfg = config(tmp_path, data=str(data_dir), seq_len=end - start - 1, overrides=overrides)
    # one train window fits; the shorter held-out split is what is refused now (below)
    assert "held-out split (val)" in refused(cfg).rule


def test_a_held_out_split_shorter_than_one_sequence_is_refused(tmp_path, data_dir):
    # the failure: a val split of fewer than seq_len + 1 tokens was scored on no window, and
    # every evaluation of the run came out empty without a word
    meta = json.loads((data_dir / "meta.json").read_text())
    start, end = meta["sources"][0]["ranges"]["val"]
    overrides = (*TrainConfig().overrides, "position=rope")
    err = refused(config(tmp_path, data=str(data_dir), seq_len=end - start, overrides=overrides))
    assert str(err) == (
        f"seq_len = {end - start}: the held-out split (val) of source 'tiny' has {end - start} "
        "tokens, shorter than one window of seq_len + 1, so it would evaluate to nothing; "
        "lower seq_len or prepare the data with a larger --val-fraction"
    )
    cfg = config(tmp_path, data=str(data_dir), seq_len=end - start - 1, overrides=overrides)
    assert preflight(cfg).config.seq_len == end - start - 1


def broken_copy(data_dir: Path, tmp_path: Path, meta_text=None, train_bytes=None) -> str:
    copy = tmp_path / "data"
    copy.mkdir()
    meta = (data_dir / "meta.json").read_text()
    (copy / "meta.json").write_text(meta if meta_text is None else meta_text(json.loads(meta)))
    train = (data_dir / "train.bin").read_bytes()
    (copy / "train.bin").write_bytes(train if train_bytes is None else train[:train_bytes])
    return str(copy)


def without(key: str):
    return lambda meta: json.dumps({k: v for k, v in meta.items() if k != key})


@pytest.mark.parametrize(
    ("meta_text", "train_bytes", "needle"),
    [
        (lambda meta: "{not json", None, "cannot be read"),
        (lambda meta: json.dumps({**meta, "format": "other"}), None, "sidecar"),
        (without("vocab_size"), None, "vocab_size must be"),
        (without("tokens"), None, "tokens.train must be"),
        (lambda meta: json.dumps({**meta, "dtype": "float32"}), None, "dtype must be"),
        (lambda meta: json.dumps({**meta, "sources": []}), None, "sources must be"),
        (None, 100, "should hold"),
    ],
)
def test_broken_data_folder_is_refused(tmp_path, data_dir, meta_text, train_bytes, needle):
    data = broken_copy(data_dir, tmp_path, meta_text, train_bytes)
    err = refused(config(tmp_path, data=data))
    assert err.field == "data"
    assert needle in err.rule


def test_data_folder_without_meta(tmp_path):
    (tmp_path / "raw").mkdir()
    err = refused(config(tmp_path, data=str(tmp_path / "raw")))
    assert err.field == "data" and "meta.json" in err.rule


# ---- probes ---------------------------------------------------------------------------------


def test_probes_are_read_up_front(tmp_path):
    good = tmp_path / "probes.tsv"
    good.write_text("# capitals\nThe capital of France is\t Paris\n\nOne, two,\t three\n")
    pre = preflight(config(tmp_path, probes=str(good)))
    assert pre.probes == (("The capital of France is", " Paris"), ("One, two,", " three"))
    assert refused(config(tmp_path, probes=str(tmp_path / "none.tsv"))).field == "probes"
    bad = tmp_path / "bad.tsv"
    bad.write_text("ok\tfine\nno tab here\n")
    with pytest.raises(SpecError) as err:
        read_probes(str(bad))
    assert err.value.field == "probes:2"


# ---- purity ---------------------------------------------------------------------------------


def test_refusals_import_no_torch(tmp_path, plan_doc):
    """In a fresh interpreter: the CLI's refusals (a config rule, a plan, a data folder) happen
    before torch (and numpy) is imported."""
    plan = write_json(tmp_path / "p.json", plan_doc)
    code = (
        "import contextlib, io, sys\n"
        "from trainbudget.cli.main import main\n"
        "codes = []\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        f"    for argv in ({['--steps', '0']!r}, {['--plan', plan]!r}, {['--data', SRC]!r}):\n"
        f"        codes.append(main(['train', '--out', {str(tmp_path / 'run')!r}, *argv]))\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("WORLD_SIZE", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["[2,", "2,", "2]", "False"]
    assert not (tmp_path / "run").exists()


# ---- issue 15, items 8 and 9: the run folder, the auto interval, nesting -------------------


def test_out_under_a_file_is_refused_before_anything_is_written(tmp_path):
    """Without the check: NotADirectoryError from the first mkdir, a traceback."""
    (tmp_path / "file").write_text("not a folder")
    err = refused(TrainConfig(out=str(tmp_path / "file" / "deeper" / "run")))
    assert err.field == "out" and f"lies under {tmp_path / 'file'}, which is a file" in err.rule


def test_auto_checkpoint_interval_needs_a_finite_mtbf(tmp_path):
    """1e-320 per day passed the (0, 1) check and stopped the run after step 1 with
    "mtbf_seconds = inf"; a fixed interval does not use the rate."""
    err = refused(config(tmp_path, checkpoint_minutes="auto", gpu_failure_rate_per_day=1e-320))
    assert err.field == "gpu_failure_rate_per_day" and "infinite MTBF" in err.rule
    assert preflight(config(tmp_path, checkpoint_minutes=30, gpu_failure_rate_per_day=1e-320))
    assert preflight(config(tmp_path, checkpoint_minutes="auto", gpu_failure_rate_per_day=1e-300))


def test_a_plan_nested_too_deeply_is_one_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"plans": ' + "[" * 100_000 + "]" * 100_000 + "}")
    err = refused(config(tmp_path, plan=str(path)))
    assert err.field == "plan" and "nested too deeply" in err.rule
