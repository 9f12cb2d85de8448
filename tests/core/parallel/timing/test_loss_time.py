"""The loss's memory traffic by loss kernel (core.parallel.timing.loss_time)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.timing.layer_traffic import LOSS_FP32_TRAFFIC_BYTES
from trainbudget.core.parallel.timing.loss_time import (
    LOSS_FP32_BYTES_PER_LOGIT,
    loss_fp32_bytes_per_logit,
    loss_seconds,
)
from trainbudget.core.parallel.timing.step_time import DEFAULT_EFFICIENCY, step_time
from trainbudget.core.spec.engines import LOSS_KERNELS
from trainbudget.core.spec.frameworks import GENERIC
from trainbudget.core.spec.hardware import get_hardware
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset


def test_every_loss_kernel_has_its_traffic():
    assert set(LOSS_FP32_BYTES_PER_LOGIT) == set(LOSS_KERNELS)


def test_fused_kernels_move_no_fp32_logits_and_unfused_ones_four_passes():
    assert loss_fp32_bytes_per_logit("in-place-fused-classifier") == 0.0
    assert loss_fp32_bytes_per_logit("fused-linear-cross-entropy") == 0.0
    # fp32 log-probabilities written and read, fp32 gradient written and read
    assert loss_fp32_bytes_per_logit("torch-cross-entropy") == 4 * 4 == LOSS_FP32_TRAFFIC_BYTES


def test_an_unknown_loss_kernel_lists_the_known_ones():
    with pytest.raises(SpecError, match="torch-cross-entropy"):
        loss_fp32_bytes_per_logit("my-loss")


def test_llm_c_s_fused_classifier_saves_its_fp32_bytes_on_the_step():
    """GPT-2 124M on 8 A100 as llm.c runs it (micro-batch 64 x 1024, vocabulary 50304): the
    fused classifier's step is shorter by exactly the 16 fp32 bytes per logit at the HBM rate."""
    spec = get_preset("gpt2").replace(vocab_size=50304)
    hw = get_hardware("a100-80gb")
    plan = Plan(dp=8, zero=1, micro_batch=64)
    kw = dict(seq_len=1024, precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adam"))

    def step(loss_kernel: str) -> float:
        framework = replace(GENERIC, loss_kernel=loss_kernel)
        return step_time(spec, plan, Cluster(hardware=hw, n_gpus=8), framework=framework, **kw)

    unfused, fused = step("torch-cross-entropy"), step("in-place-fused-classifier")
    logits = 64 * 1024 * 50304
    rate = hw.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    saved = loss_seconds(logits, 2, 16, rate) - loss_seconds(logits, 2, 0, rate)
    assert saved == pytest.approx(logits * 16 / rate)
    assert unfused.step_seconds - fused.step_seconds == pytest.approx(saved, rel=1e-9)


def test_torch_compile_fuses_the_eager_cross_entropy_only():
    from trainbudget.core.parallel.timing.loss_time import loss_extra_bytes_per_logit

    # Inductor's fused loss: no fp32 logits, the backward reads the 16-bit logits again
    assert loss_extra_bytes_per_logit("torch-cross-entropy", True, 2) == 2
    assert loss_extra_bytes_per_logit("torch-cross-entropy", False, 2) == 16
    # a kernel of its own (Megatron's, llm.c's) is what it is, compiled around or not
    assert loss_extra_bytes_per_logit("megatron-vocab-parallel", True, 2) == 16
    assert loss_extra_bytes_per_logit("in-place-fused-classifier", True, 2) == 0


def test_a_compiled_step_launches_inductor_s_kernels_and_fuses_its_loss():
    """GPT-2 124M on 8 H100 at micro-batch 64 x 1024 (the speedrun's shape): compiled, each
    layer's forward loses (48 - 11) kernel gaps and the loss its fp32 traffic less one re-read
    of the 16-bit logits; nothing else moves."""
    from trainbudget.core.parallel.layout import PlanNumbers
    from trainbudget.core.parallel.timing.compute_time import KERNEL_GAP_SECONDS, micro_batch_terms
    from trainbudget.core.spec.frameworks import INDUCTOR_LAYER_KERNELS

    spec = get_preset("gpt2").replace(vocab_size=50304)
    hw = get_hardware("h100-sxm")
    L = PlanNumbers.of(Plan(dp=8, micro_batch=64))
    cluster = Cluster(hardware=hw, n_gpus=8)

    def terms(compiled: bool):
        framework = replace(GENERIC, compiled=compiled)
        precision = get_precision("bf16-mixed")
        return micro_batch_terms(
            spec, L, cluster, seq_len=1024, precision=precision, framework=framework
        )

    eager, compiled = terms(False), terms(True)
    gaps = (GENERIC.kernels_per_layer_forward - INDUCTOR_LAYER_KERNELS) * KERNEL_GAP_SECONDS
    assert eager.forward_seconds - compiled.forward_seconds == pytest.approx(12 * gaps)
    logits = 64 * 1024 * 50304
    rate = hw.hbm_bytes_per_second * DEFAULT_EFFICIENCY.hbm
    assert eager.head_seconds - compiled.head_seconds == pytest.approx(logits * (16 - 2) / rate)
    assert eager.attention_seconds == compiled.attention_seconds
