"""--framework on estimate, plan and report: the named row reaches the core and the output."""

from __future__ import annotations

import pytest

from clirun import cli, cli_json
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.presets import get_preset

EST = ("estimate", "--model", "llama-2-7b", "--gpus", "8", "--dp", "8")
PLAN = ("plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "16", "--no-cp")
N_PARAMS = count_params(get_preset("llama-2-7b")).total


def test_default_is_generic_and_said_so():
    j = cli_json(*EST, "--zero", "1")
    assert j["framework"] == "generic"
    assert j["assumptions"][-1].startswith("framework: generic (none named; ")


def test_megatron_keeps_fp32_gradients_for_bf16_mixed():
    # bf16-mixed keeps 2-byte gradients; Megatron's fp32 main_grad buffer (frameworks.py
    # sources: --accumulate-allreduce-grads-in-fp32 for bf16) holds 4 bytes per parameter,
    # unsharded under ZeRO-1
    generic = cli_json(*EST, "--zero", "1")
    megatron = cli_json(*EST, "--zero", "1", "--framework", "megatron")
    assert generic["model_state_bytes"]["grads"] == pytest.approx(2 * N_PARAMS)
    assert megatron["model_state_bytes"]["grads"] == pytest.approx(4 * N_PARAMS)
    assert megatron["framework"] == "megatron"
    assert megatron["assumptions"][-1].startswith("framework: megatron (")


def test_torchtitan_reduce_scatters_every_micro_batch():
    # FSDP2 in torchtitan's train loop reduce-scatters after each of the 4 micro-batches, in
    # fp32 (mixed_precision_reduce): 4 x 2 = 8 times generic's once-per-step bf16 bytes
    args = (*EST, "--zero", "3", "--grad-accum", "4")
    generic = cli_json(*args)["comm_bytes_per_step"]["dp_grad_reduce"]
    titan = cli_json(*args, "--framework", "torchtitan")["comm_bytes_per_step"]["dp_grad_reduce"]
    assert titan == pytest.approx(8 * generic)


def test_estimate_text_names_the_framework():
    code, out, _ = cli(*EST, "--zero", "1", "--framework", "deepspeed")
    assert code == 0 and "framework    deepspeed" in out


def test_plan_passes_the_framework():
    narrow = ("--zero-stages", "0,1", "--recompute-options", "none", "--top", "1")
    generic = cli_json(*PLAN, *narrow)
    megatron = cli_json(*PLAN, *narrow, "--framework", "megatron")
    assert generic["framework"] == "generic" and megatron["framework"] == "megatron"
    assert megatron["assumptions"] == [megatron["assumptions"][0]]
    assert megatron["assumptions"][0].startswith("framework: megatron (")
    g, m = generic["plans"][0], megatron["plans"][0]
    if g["plan"]["description"] == m["plan"]["description"]:
        assert m["memory_bytes"]["grads"] == pytest.approx(2 * g["memory_bytes"]["grads"])
    code, out, _ = cli(*PLAN, *narrow, "--framework", "torchtitan")
    assert code == 0 and "framework    torchtitan (" in out


@pytest.mark.parametrize("command", [EST, PLAN])
def test_unknown_framework_is_one_line_error(command):
    code, out, err = cli(*command, "--framework", "megatron-lm")
    assert code != 0 and out == ""
    assert err.count("\n") == 1
    assert "framework" in err and "megatron, megatron-bridge-perf, megatron-legacy" in err
    assert "pytorch-fsdp1, torchtitan, trainbudget" in err  # every row, in name order


def test_help_lists_the_table():
    code, out, _ = cli("plan", "--help")
    assert code == 0 and "generic (default)" in out and "pytorch-fsdp1" in out


FP8 = ("estimate", "--model", "llama-3-8b", "--gpus", "8", "--dp", "8", "--zero", "3")
FP8 += ("--global-batch", "16", "--seq-len", "8192", "--precision", "fp8")


def _core_step(**row_changes) -> float:
    """The core's step time for FP8 on torchtitan's row with `row_changes`."""
    from dataclasses import replace

    from trainbudget.core.parallel.cluster import Cluster
    from trainbudget.core.parallel.layout import Plan
    from trainbudget.core.parallel.timing.step_time import step_time
    from trainbudget.core.spec.frameworks import get_framework
    from trainbudget.core.spec.hardware import get_hardware
    from trainbudget.core.spec.precision import get_optimizer, get_precision

    plan = Plan(dp=8, zero=3, micro_batch=1, grad_accum=2)
    cluster = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=8)
    row = replace(get_framework("torchtitan"), **row_changes)
    return step_time(
        get_preset("llama-3-8b"), plan, cluster, seq_len=8192, precision=get_precision("fp8"),
        optimizer=get_optimizer("adamw"), framework=row,
    ).step_seconds  # fmt: skip


def test_attention_kernel_and_fp8_recipe_reach_the_core():
    """--attention-kernel and --fp8-recipe replace the framework row's, as a published run's
    stated kernel does in `validate`; the assumption line names the kernels used."""
    base = (*FP8, "--framework", "torchtitan")
    default = cli_json(*base)
    assert default["step_seconds"] == pytest.approx(_core_step(), rel=1e-12)
    stated = cli_json(*base, "--attention-kernel", "flash3", "--fp8-recipe", "torchao-rowwise")
    expected = _core_step(attention_kernel="flash3", fp8_recipe="torchao-rowwise")
    assert stated["step_seconds"] == pytest.approx(expected, rel=1e-12)
    assert stated["step_seconds"] != pytest.approx(default["step_seconds"], rel=1e-3)
    line = stated["assumptions"][-1]
    assert "kernels: attention flash3, cross-entropy " in line
    assert "FP8 recipe torchao-rowwise" in line


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--attention-kernel", "flash4"), "attention_kernel = 'flash4': unknown (did you mean"),
        (("--fp8-recipe", "rowwise"), "fp8 recipe = 'rowwise': unknown (did you mean"),
        (("--fp8-recipe", "te-mxfp8"), "'te-mxfp8': runs on b200 only, not on h100-sxm"),
    ],
)
def test_bad_kernel_or_recipe_is_one_line_error(flags, says):
    code, out, err = cli(*FP8, *flags)
    assert code != 0 and out == "" and err.count("\n") == 1
    assert says in err


def test_fp8_recipe_without_fp8_is_refused():
    code, _, err = cli(*EST, "--fp8-recipe", "te-current")
    assert code != 0 and err.count("\n") == 1
    assert "'te-current': applies only with --precision fp8 (precision is bf16-mixed)" in err
