"""Under FP8, what a linear layer saves of its input: Transformer Engine keeps the FP8 cast it
made for the forward GEMM (1 byte), torchao the bf16 input (`Fp8Recipe.saved_input_bytes`)."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.parallel.memory.gpu_memory import plan_memory
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.single.activations import layer_activations
from trainbudget.core.spec.fp8_recipes import FP8_RECIPES
from trainbudget.core.spec.frameworks import FRAMEWORKS
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

SPEC = get_preset("llama-3-8b")
PLAN = Plan(dp=8, tp=1, pp=1, zero=3, micro_batch=4, grad_accum=1)  # activations peak


def test_te_recipes_save_one_byte_and_torchao_two():
    assert {n: r.saved_input_bytes for n, r in FP8_RECIPES.items() if n.startswith("te-")} == {
        "te-current": 1,
        "te-delayed": 1,
        "te-mxfp8": 1,  # the columnwise MXFP8 copy the weight-gradient GEMM reads
    }
    assert all(r.saved_input_bytes == 2 for n, r in FP8_RECIPES.items() if n.startswith("torchao"))


def test_one_byte_inputs_for_qkv_mlp_in_and_mlp_out_and_a_copy_beside_attention_s_output():
    kw = dict(seq_len=4096, micro_batch=1, activation_bytes=2, flash_attention=True)
    bf16, fp8 = layer_activations(SPEC, **kw), layer_activations(SPEC, **kw, linear_input_bytes=1)
    tokens, h, d_ff = 4096, SPEC.d_model, SPEC.d_ff
    # qkv and MLP inputs (h each) and the down-projection's input (d_ff) one byte narrower;
    # the output projection's input (d_attn_out = h) gains a 1-byte copy
    assert bf16.total_bytes - fp8.total_bytes == tokens * (h + h + d_ff - SPEC.d_attn_out)


def _peak(precision: str, framework: str) -> float:
    kw = dict(precision=get_precision(precision), optimizer=get_optimizer("adam"))
    fw = FRAMEWORKS[framework]
    return plan_memory(SPEC, PLAN, seq_len=4096, framework=fw, **kw).total_bytes


def test_the_framework_s_recipe_decides_the_fp8_activations():
    # megatron runs te-delayed: activations less than bf16 (its FP8 weight cache aside:
    # test_framework_memory_rows); torchtitan runs torchao: the same as bf16
    kw = dict(precision=get_precision("fp8"), optimizer=get_optimizer("adam"))
    uncached = dataclasses.replace(FRAMEWORKS["megatron"], fp8_weight_cache_bytes=0)
    fp8 = plan_memory(SPEC, PLAN, seq_len=4096, framework=uncached, **kw).total_bytes
    assert fp8 < _peak("bf16-mixed", "megatron")
    assert _peak("fp8", "torchtitan") == pytest.approx(_peak("bf16-mixed", "torchtitan"))
    te = dataclasses.replace(FRAMEWORKS["torchtitan"], fp8_recipe="te-delayed")
    assert plan_memory(SPEC, PLAN, seq_len=4096, framework=te, **kw).total_bytes < _peak(
        "fp8", "torchtitan"
    )
