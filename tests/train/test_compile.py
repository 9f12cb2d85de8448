"""`--compile`: torch.compile (inductor, C++ code generated and built on the CPU) trains the same
model as eager mode, and its checkpoint is the eager model's (the state dict is taken from the
module, not from the compiled wrapper). Slow: building the kernels takes ~40 s of CPU here.

Tolerance: inductor fuses and reorders fp32 arithmetic (e.g. softmax and layer norms), so each
step differs by rounding (~1e-7 relative); 6 AdamW steps of a 1-layer model stay within 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainbudget.data.prepare import prepare  # noqa: E402
from trainbudget.train.checkpointing.checkpoint import list_checkpoints  # noqa: E402
from trainbudget.train.loop import train  # noqa: E402
from trainbudget.train.spec.config_files import make_config  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TINY = ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "vocab_size=257", "max_seq_len=64")


def run(out: Path, data: Path, compile_: bool) -> list[dict]:
    cfg = make_config(
        {},
        {
            "overrides": TINY,
            "data": str(data),
            "out": str(out),
            "steps": 6,
            "micro_batch": 4,
            "seq_len": 32,
            "log_interval": 1,
            "eval_interval": 6,
            "tensorboard": False,
            "device": "cpu",
            "compile": compile_,
        },
    )
    train(cfg)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r]


def test_compiled_training_follows_eager(tmp_path):
    data = tmp_path / "data"
    prepare(None, data, tokenizer="byte")
    eager = run(tmp_path / "eager", data, compile_=False)
    compiled = run(tmp_path / "compiled", data, compile_=True)
    assert [r["step"] for r in compiled] == list(range(1, 7))
    for e, c in zip(eager, compiled, strict=True):
        assert c["loss"] == pytest.approx(e["loss"], rel=1e-4), c["step"]
        assert c["grad_norm"] == pytest.approx(e["grad_norm"], rel=1e-4), c["step"]
    assert compiled[-1]["eval"]["val_loss"] == pytest.approx(
        eager[-1]["eval"]["val_loss"], rel=1e-4
    )
    # the checkpoint holds the module's own names, loadable without torch.compile
    newest = list_checkpoints(tmp_path / "compiled" / "checkpoints")[0]
    names = set(torch.load(newest / "model.pt", weights_only=True))
    assert not any(name.startswith("_orig_mod") for name in names)
    assert names == set(
        torch.load(
            list_checkpoints(tmp_path / "eager" / "checkpoints")[0] / "model.pt", weights_only=True
        )
    )
