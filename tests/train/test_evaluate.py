"""Held-out evaluation: the set of windows does not depend on the micro-batch it is run in, and
the loss is the mean over tokens (a last, shorter batch weighs by its rows)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainbudget.core.spec.model_source.model_arg import resolve_model  # noqa: E402
from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.model.transformer import build_model  # noqa: E402
from trainbudget.train.data import RunData  # noqa: E402
from trainbudget.train.evaluate import EVAL_WINDOWS_PER_BATCH, evaluate  # noqa: E402
from trainbudget.train.spec.config import TrainConfig  # noqa: E402

pytestmark = pytest.mark.torch

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


def test_validation_loss_does_not_depend_on_the_micro_batch(tmp_path):
    prepare(None, tmp_path / "data", tokenizer="byte")
    data = RunData(tmp_path / "data")
    model = build_model(resolve_model("gpt2", TINY), device="cpu", seed=0)
    results = [
        evaluate(model, data, TrainConfig(micro_batch=b, seq_len=32, eval_batches=2), "cpu")
        for b in (3, 16, 32)
    ]
    # 2 x 16 = 32 windows in every case: in 11 batches of 3 (the last of 2), 2 of 16, 1 of 32
    for r in results[1:]:
        assert r["val_loss"] == pytest.approx(results[0]["val_loss"], rel=1e-6)
    # by hand: the mean over the first 32 windows' tokens
    x, y, _ = next(data.eval_batches(32, 32, 2 * EVAL_WINDOWS_PER_BATCH))
    assert len(x) == 32
    with torch.no_grad():
        logits = model(x)[0]
        want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    assert results[0]["val_loss"] == pytest.approx(float(want), rel=1e-6)
