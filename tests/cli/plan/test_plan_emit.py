"""`trainbudget plan --emit`: the 70B / 1,024 H100 plan as each engine's file, through the
CLI (stdout or --emit-out), and the one-line refusals."""

from __future__ import annotations

import json

import pytest

from clirun import cli
from emit_jobs import parse_megatron

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

# the README's plan command: dp256 tp2+sp pp1 cp2 zero3 mb1x2
PLAN_70B = (
    "plan",
    "--model",
    "llama-3-70b",
    "--gpus",
    "1024",
    "--gpu",
    "h100-sxm",
    "--global-batch",
    "512",
    "--seq-len",
    "8192",
    "--tokens",
    "15T",
)
# what DeepSpeed's config can carry: no cp, no tp + sp (dp1024 zero3 mb1x1 recompute-full)
DS_70B = (
    "plan",
    "--model",
    "llama-3-70b",
    "--gpus",
    "1024",
    "--gpu",
    "h100-sxm",
    "--global-batch",
    "1024",
    "--seq-len",
    "8192",
    "--recompute-options",
    "full",
    "--no-cp",
    "--no-hsdp",  # HSDP wins at 1,024 ranks; DeepSpeed 0.19.8 cannot carry it (no MiCS)
    "--max-tp",
    "1",
)


def test_torchtitan_goes_to_stdout_and_the_notes_to_stderr() -> None:
    code, out, err = cli(*PLAN_70B, "--emit", "torchtitan")
    assert code == 0, err
    cfg = tomllib.loads(out)
    par = cfg["parallelism"]
    assert (
        par["data_parallel_shard_degree"]
        * par["tensor_parallel_degree"]
        * par["context_parallel_degree"]
        * par.get("pipeline_parallel_degree", 1)
        == 1024
    )
    assert cfg["training"]["steps"] == 3576279  # ceil(15e12 / (512 * 8192))
    assert err.startswith("note: torchtitan:")


def test_megatron_arguments_parse_and_multiply_to_the_gpus() -> None:
    code, out, err = cli(*PLAN_70B, "--emit", "megatron")
    assert code == 0, err
    a = parse_megatron(out)
    model_parallel = a.tensor_model_parallel_size * a.context_parallel_size
    dp = 1024 // (model_parallel * a.pipeline_model_parallel_size)
    assert a.global_batch_size == 512 and 512 % (dp * a.micro_batch_size) == 0


def test_deepspeed_refuses_the_cp_plan_and_writes_the_one_it_can_carry(tmp_path) -> None:
    code, out, err = cli(*PLAN_70B, "--emit", "deepspeed")
    assert code == 2 and out == ""
    # the best plan uses an axis DeepSpeed's emitter cannot carry (CP, or a pipeline past ZeRO-1)
    assert ": cannot be emitted for deepspeed" in err and err.count("\n") == 1
    code, out, err = cli(*DS_70B, "--emit", "deepspeed", "--emit-out", str(tmp_path))
    assert code == 0, err
    cfg = json.loads((tmp_path / "deepspeed.json").read_text())
    assert cfg["train_batch_size"] == 1024 == cfg["train_micro_batch_size_per_gpu"] * 1024
    assert cfg["zero_optimization"]["stage"] == 3
    assert "emitted" in out and "dp1024 tp1 pp1 zero3 mb1x1 recompute-full" in out


def test_an_unknown_engine_lists_the_known_ones() -> None:
    code, _, err = cli(*PLAN_70B, "--emit", "nemo")
    assert code == 2 and "deepspeed, megatron, torchtitan" in err
