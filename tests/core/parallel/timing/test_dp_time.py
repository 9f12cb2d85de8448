"""dp_time: the data-parallel gathers' bytes under FP8 parameter gathering
(Framework.fp8_param_gather)."""

from __future__ import annotations

import dataclasses

import pytest

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.frameworks import GENERIC, get_framework
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

LLAMA = get_preset("llama-3-8b")
CLUSTER = Cluster(hardware=get_hardware("h100-sxm"), n_gpus=16, gpus_per_node=8)
ADAMW = get_optimizer("adamw")


def _gathered(framework, precision: str, plan: Plan) -> float:
    t = step_time(
        LLAMA, plan, CLUSTER, seq_len=8192, precision=get_precision(precision),
        optimizer=ADAMW, framework=framework,
    )  # fmt: skip
    return t.comm_bytes["zero3_gather" if plan.zero == 3 else "dp_param_gather"]


@pytest.mark.parametrize("zero", [1, 3])
def test_fp8_gather_moves_the_linear_weights_at_one_byte(zero):
    """With fp8_param_gather the gathers move the layers' linear weights at 1 byte and the
    rest (embedding, head, norms) at the weights' 2: for Llama 3 8B, whose linear weights are
    its 32 layers' projections and MLPs, the bytes fall by half the linear share."""
    plan = Plan(dp=16, zero=zero, grad_accum=2)
    fp8 = dataclasses.replace(GENERIC, fp8_param_gather=True)
    bf16_bytes = _gathered(GENERIC, "fp8", plan)
    fp8_bytes = _gathered(fp8, "fp8", plan)
    p = count_params(LLAMA)
    linear = p.attention_qkv + p.attention_proj + p.mlp
    assert fp8_bytes / bf16_bytes == pytest.approx(1 - 0.5 * linear / p.total, rel=1e-6)
    # only under --precision fp8: bf16-mixed gathers 16-bit weights either way
    assert _gathered(fp8, "bf16-mixed", plan) == pytest.approx(
        _gathered(GENERIC, "bf16-mixed", plan)
    )


def test_nemo_2_and_megatron_bridge_gather_in_fp8():
    # NeMo v2.3.0 bf16_with_fp8_mixed: fp8_param_gather = True; Megatron-Bridge
    # bf16_with_fp8_current_scaling_mixed sets fp8_param_gather
    assert get_framework("nemo-2").fp8_param_gather
    assert get_framework("megatron-bridge-perf").fp8_param_gather
    assert not get_framework("megatron").fp8_param_gather  # Megatron-LM: --fp8-param-gather off
