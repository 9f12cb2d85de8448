"""Training memory on one GPU: weights, gradients, optimizer state, checkpoints, fit."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.core.single.memory import (
    checkpoint_bytes,
    fit_max_params,
    optimizer_state_bytes,
    rule_of_thumb_6gb,
    training_memory,
)
from trainbudget.core.spec.model_spec import BareModel, ModelSpec
from trainbudget.core.spec.precision import get_optimizer, get_precision

GPT2 = ModelSpec(
    vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024
)
GPT2_PARAMS = 124_337_664  # seed 003 T-params (no bias)
LLAMA70B = BareModel(n_params=70_000_000_000)


def test_llama70b_bf16_mixed_adamw() -> None:
    """Seed 004 B-llama70b: 70e9 params -> weights 140 GB (2 B), grads 140 GB (2 B), Adam
    840 GB (fp32 master 4 + m 4 + v 4 = 12 B); no activations without an architecture."""
    m = training_memory(LLAMA70B, precision="bf16-mixed", optimizer="adamw")
    assert m.params_bytes == 140e9
    assert m.grads_bytes == 140e9
    assert m.optimizer_bytes == 840e9
    assert m.activations is None and m.activations_bytes == 0
    assert m.total_bytes == 1120e9  # 16 bytes x 70e9


def test_spec_total_is_sum_of_parts() -> None:
    """With an architecture, activations are sized at max_seq_len by default and added."""
    m = training_memory(GPT2, precision="fp32", optimizer="adamw", micro_batch=2)
    assert m.activations.per_layer.norm_inputs_bytes == 2 * 1024 * 2 * 768 * 4  # 2sbh*e
    assert m.params_bytes == 4 * GPT2_PARAMS
    assert m.total_bytes == 16 * GPT2_PARAMS + m.activations.total_bytes


def test_adafactor_needs_architecture() -> None:
    """Adafactor's factored state depends on matrix shapes: a bare count is refused."""
    with pytest.raises(SpecError) as err:
        training_memory(LLAMA70B, optimizer="adafactor")
    assert err.value.field == "optimizer"


def test_adafactor_gpt2_by_hand() -> None:
    """Rows + cols per matrix, full state for vectors, fp32 (4 B):
    token 50257+768 = 51,025; position 1024+768 = 1,792;
    per layer qkv 768+2304, proj 768+768, mlp (768+3072) x 2 = 12,288, x 12 = 147,456;
    vectors (25 LayerNorm weights) 19,200 -> (51,025 + 1,792 + 147,456 + 19,200) x 4 = 877,892."""
    fp32 = get_precision("fp32")
    ada = optimizer_state_bytes(GPT2, get_optimizer("adafactor"), fp32)
    assert ada == 877_892
    adam = optimizer_state_bytes(GPT2, get_optimizer("adamw"), fp32)
    assert adam == 8 * GPT2_PARAMS
    assert ada < adam / 1000  # far smaller than Adam's two full moments


def test_checkpoint_gpt2_fp32_adamw() -> None:
    """Seed 003 T-ckpt: fp32 weights 4 + m 4 + v 4 = 12 B x 124,337,664 = 1,492,051,968."""
    assert checkpoint_bytes(GPT2, precision="fp32", optimizer="adamw") == 1_492_051_968
    # mixed precision saves the fp32 master, not the bf16 copy: still 12 B per parameter
    assert checkpoint_bytes(GPT2, precision="bf16-mixed", optimizer="adamw") == 1_492_051_968


def test_fit_max_params_seed000() -> None:
    """Seed 000 S-max-model: 8 GPUs x 80 GB / 16 B (fp32 AdamW) = 40e9 parameters."""
    assert (
        fit_max_params(n_gpus=8, memory_bytes_per_gpu=80e9, precision="fp32", optimizer="adamw")
        == 40e9
    )
    # keeping 25 % aside leaves 3/4 of that: 30e9
    assert (
        fit_max_params(
            n_gpus=8,
            memory_bytes_per_gpu=80e9,
            precision="fp32",
            optimizer="adamw",
            reserve_fraction=0.25,
        )
        == 30e9
    )


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(n_gpus=0), "gpus"),
        (dict(reserve_fraction=1.0), "reserve"),
        (dict(optimizer="adafactor"), "optimizer"),
    ],
)
def test_fit_errors(kw: dict, field: str) -> None:
    """fit refuses no GPUs, a full reserve and shape-dependent optimizers."""
    args = dict(n_gpus=8, memory_bytes_per_gpu=80e9, precision="fp32", optimizer="adamw")
    with pytest.raises(SpecError) as err:
        fit_max_params(**{**args, **kw})
    assert err.value.field == field


def test_rule_of_thumb() -> None:
    """Seed 004 B-rule-6gb: 6 GB per 1e9 params -> 420 GB for 70B, vs 1,120 GB mixed AdamW."""
    m = training_memory(LLAMA70B, precision="bf16-mixed", optimizer="adamw")
    r = rule_of_thumb_6gb(m, LLAMA70B.n_params)
    assert r.rule_bytes == 420e9
    assert r.ours_bytes == 1120e9


def test_training_memory_rejects_zero_seq_len() -> None:
    """seq_len=0 is an error, not a request for the default (max_seq_len)."""
    with pytest.raises(SpecError) as err:
        training_memory(GPT2, seq_len=0)
    assert err.value.field == "seq_len"
