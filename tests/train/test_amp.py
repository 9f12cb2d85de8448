"""PyTorch autocast policies in the trainer: amp-bf16 (fp32 weights, bf16 matmuls) and amp-fp16
with a gradient scaler. The core accounts for them as fp32 weights, gradients and state with
16-bit activations (trainbudget.core.spec.precision)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from trainbudget.core.spec.precision import get_precision  # noqa: E402
from trainbudget.model.optim import mixed_precision  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.spec.config import TrainConfig  # noqa: E402

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


@pytest.mark.parametrize("precision", ["amp-bf16", "amp-fp16"])
def test_autocast_run_trains(tmp_path, precision):
    cfg = TrainConfig(
        overrides=TINY,
        seq_len=32,
        micro_batch=4,
        steps=12,
        log_interval=4,
        eval_interval=12,
        lr=3e-3,
        precision=precision,
        tensorboard=False,
        out=str(tmp_path / precision),
        device="cpu",
    )
    summary = train(cfg)
    records = [json.loads(x) for x in (tmp_path / precision / "metrics.jsonl").open()]
    records = [r for r in records if "event" not in r]
    losses = [r["loss"] for r in records]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    # weights stay fp32 under autocast: the saved model is fp32
    state = torch.load(
        list_checkpoints(tmp_path / precision / "checkpoints")[0] / "model.pt", weights_only=True
    )
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())
    assert summary["memory_bytes"]["predicted_peak"] > 0


def test_mixed_precision_contexts():
    _, scaler = mixed_precision("amp-fp16", torch.device("cpu"))
    assert scaler.is_enabled()  # fp16 needs loss scaling
    for name in ("fp32", "bf16-mixed", "amp-bf16"):
        assert not mixed_precision(name, torch.device("cpu"))[1].is_enabled()
    # the core's accounting of autocast: fp32 weights, grads and state, 16-bit activations
    p = get_precision("amp-bf16")
    assert (p.weight_bytes, p.grad_bytes, p.master_bytes, p.activation_bytes) == (4, 4, 0, 2)
