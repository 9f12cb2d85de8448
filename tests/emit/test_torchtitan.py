"""The torchtitan 0.2.2 job config: TOML that round-trips to the plan, keys and types from the
option table (written from torchtitan/config/job_config.py), and torchtitan's own
ConfigManager loading it when torchtitan is installed (`pip install torchtitan==0.2.2`)."""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import replace

import pytest

from emit_jobs import README_70B, STEPS_15T, job
from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.emit import torchtitan

tomllib = pytest.importorskip("tomllib")


def _toml(j) -> dict:
    return tomllib.loads(torchtitan.emit(j).text)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def test_the_70b_plan_round_trips() -> None:
    cfg = _toml(job(README_70B, train_steps=STEPS_15T))
    par, tr = cfg["parallelism"], cfg["training"]
    assert (cfg["model"]["name"], cfg["model"]["flavor"]) == ("llama3", "70B")
    degrees = [par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]]
    degrees += [par["tensor_parallel_degree"], par["context_parallel_degree"]]
    assert math_prod(degrees) == 1024  # torchtitan's world-size rule, parallel_dims.py
    batch_ranks = degrees[0] * degrees[1]
    accum = tr["global_batch_size"] // (tr["local_batch_size"] * batch_ranks)
    assert (tr["local_batch_size"], accum, tr["global_batch_size"]) == (1, 2, 512)
    assert tr["seq_len"] == 8192 and tr["steps"] == STEPS_15T
    assert par["fsdp_reshard_after_forward"] == "always"  # ZeRO-3
    assert cfg["activation_checkpoint"]["mode"] == "none"


def math_prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def test_every_key_is_a_row_of_the_table_with_its_type() -> None:
    plans = [
        README_70B,
        Plan(
            dp=128,
            tp=8,
            sp=True,
            zero=3,
            zero_shard=16,
            micro_batch=2,
            grad_accum=2,
            recompute="full",
        ),
        Plan(
            dp=32,
            tp=8,
            sp=True,
            pp=4,
            vpp=2,
            schedule="interleaved",
            zero=2,
            micro_batch=1,
            grad_accum=8,
            recompute="full",
            recompute_every=2,
        ),
    ]
    for plan in plans:
        for key, value in _flat(_toml(job(plan))).items():
            row = torchtitan.OPTIONS[key]
            assert isinstance(value, row.kind), (key, value)
            assert not row.choices or value in row.choices


def test_pipeline_stages_list_every_layer_once_in_the_looped_order() -> None:
    plan = Plan(
        dp=32,
        tp=8,
        sp=True,
        pp=4,
        vpp=2,
        schedule="interleaved",
        zero=2,
        micro_batch=1,
        grad_accum=8,
        recompute="full",
        recompute_every=2,
    )
    cfg = _toml(job(plan))
    par = cfg["parallelism"]
    parts = par["module_fqns_per_model_part"]
    assert len(parts) == 8 and all(
        len([m for m in p if m.startswith("layers.")]) == 10 for p in parts
    )
    layers = [m for p in parts for m in p if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(80)]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    # the local batch is split into micro-batches: 8 of 1, no accumulation on top
    assert cfg["training"]["local_batch_size"] == 8
    assert par["pipeline_parallel_microbatch_size"] == 1
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert par["fsdp_reshard_after_forward"] == "never"  # ZeRO-2


def test_hsdp_and_fp8_and_pure_bf16() -> None:
    hsdp = Plan(dp=128, tp=8, sp=True, zero=3, zero_shard=16, micro_batch=2, grad_accum=2)
    par = _toml(job(hsdp, precision="fp8"))
    assert par["parallelism"]["data_parallel_replicate_degree"] == 8
    assert par["parallelism"]["data_parallel_shard_degree"] == 16
    assert par["model"]["converters"] == ["quantize.linear.float8"]
    assert _toml(job(hsdp, precision="bf16"))["training"]["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("plan", "kw", "named"),
    [
        (Plan(dp=128, tp=8, sp=True, zero=1), {}, "zero = 1: cannot be emitted for torchtitan"),
        (Plan(dp=128, tp=8, zero=3), {}, "sp = False"),
        (Plan(dp=1024, zero=3, recompute="selective"), {}, "recompute = 'selective'"),
        (Plan(dp=1024, zero=3), {"optimizer": "sgd"}, "optimizer = 'sgd'"),
        (Plan(dp=1024, zero=3), {"precision": "fp16-mixed"}, "precision = 'fp16-mixed'"),
        (Plan(dp=1024, zero=0), {}, "precision = 'bf16-mixed'"),  # DDP is autocast
        (Plan(dp=1024, zero=3), {"model": "llama-2-70b"}, "model = 'llama-2-70b'"),
        (
            Plan(dp=256, pp=4, zero=3, recompute="full", recompute_every=3),
            {},
            "recompute_every = 3",
        ),
    ],
)
def test_a_feature_without_an_equivalent_is_refused_in_one_line(plan, kw, named) -> None:
    with pytest.raises(SpecError) as err:
        torchtitan.emit(job(plan, **kw))
    assert named in str(err.value) and "\n" not in str(err.value)


def test_every_flavor_row_matches_its_preset_shape() -> None:
    # llama3 70B in job_config's registry (models/llama3/__init__.py): dim 8192, 80 layers,
    # 64 heads, 8 kv heads; ffn 28672 from multiple_of 4096 and multiplier 1.3
    for name in ("llama-3-8b", "llama-3-70b", "llama-3-405b", "qwen3-8b"):
        assert torchtitan._flavor(job(README_70B, model=name)).name in ("llama3", "qwen3")


@pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None,
    reason="torchtitan not installed (pip install torchtitan==0.2.2)",
)
def test_torchtitans_own_config_manager_loads_it(tmp_path) -> None:
    # torchtitan/__init__.py imports its triton MoE kernels (GPU only); the config package
    # alone needs torch and tyro, so the parent package is stood in for
    spec = importlib.util.find_spec("torchtitan")
    parent = types.ModuleType("torchtitan")
    parent.__path__ = list(spec.submodule_search_locations)
    saved = sys.modules.get("torchtitan")
    sys.modules["torchtitan"] = parent
    try:
        from torchtitan.config.manager import ConfigManager

        path = tmp_path / "torchtitan.toml"
        path.write_text(torchtitan.emit(job(README_70B, train_steps=STEPS_15T)).text)
        cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    finally:
        if saved is None:
            sys.modules.pop("torchtitan", None)
        else:
            sys.modules["torchtitan"] = saved
    assert (cfg.model.name, cfg.model.flavor) == ("llama3", "70B")
    assert cfg.parallelism.data_parallel_shard_degree == 256
    assert cfg.parallelism.tensor_parallel_degree == cfg.parallelism.context_parallel_degree == 2
    assert (cfg.training.local_batch_size, cfg.training.global_batch_size) == (1, 512)


def test_an_accounted_interleaved_split_gives_each_part_the_cores_layers() -> None:
    # 126 layers + embedding + loss slots on pp8 x vpp8: 2 slots a part, so the first part
    # holds the embedding and one layer, the last one layer and the head (core.parallel
    # .pipeline_split.chunk_layer_counts)
    plan = Plan(dp=2, tp=8, sp=True, pp=8, vpp=8, schedule="interleaved", grad_accum=16)
    plan = replace(plan, embedding_in_pp_split=True, loss_in_pp_split=True)
    parts = torchtitan._stage_modules(job(plan, model="llama-3-405b"))
    assert len(parts) == 64
    assert parts[0] == ["tok_embeddings", "layers.0"]
    assert parts[-1] == ["layers.125", "norm", "output"]
    layers = [m for part in parts for m in part if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(126)]
