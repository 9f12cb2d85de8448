"""A synthetic run directory for the run-report tests: metrics.jsonl as `trainbudget train`
writes it (plus a resumed stretch, events and keys the report does not know), summary.json and
config.json, so most tests need no torch."""

from __future__ import annotations

import json
from pathlib import Path

TOKENS_PER_STEP = 2048
PREDICTED_STEP_SECONDS = 0.1
PREDICTED_PEAK_BYTES = 88_214_016.0


def record(step: int, *, loss_scale: float = 1.0) -> dict:
    seconds = 0.125 + 0.001 * (step % 3)
    rec = {
        "step": step,
        "loss": loss_scale * 4.0 / step**0.3,
        "lr": 3e-3 * min(1.0, step / 4),
        "grad_norm": 1.0 / step**0.5,
        "tokens_per_second": TOKENS_PER_STEP / seconds,
        "step_seconds": seconds,
        "predicted_step_seconds": PREDICTED_STEP_SECONDS,
        "achieved_flops_per_second": 6.2e10,
        "mfu": 0.3,
        "hfu": 0.31,
        "memory_bytes": {"predicted_peak": PREDICTED_PEAK_BYTES, "measured_peak": 9.0e7},
        "phases_seconds": {"data": 0.001, "forward": 0.04, "backward": 0.08, "optimizer": 0.004},
        "batch_crc32": 12345,  # a key the report does not know
    }
    if step % 10 == 0:
        rec["eval"] = {
            "val_loss": 4.1 / step**0.3,
            "val_perplexity": 30.0,
            "per_source": {"docs": 4.0 / step**0.3, "code": 4.2 / step**0.3},
        }
    return rec


def write_run(folder: Path, *, summary: bool = True, config: bool = True) -> Path:
    """Steps 2..30 every 2; the run then resumes from step 20 and logs 22..30 again (with a 5 %
    lower loss: those must win), with a checkpoint and a rollback event on the way."""
    folder.mkdir(parents=True)
    lines = [record(s) for s in range(2, 31, 2)]
    lines.append({"step": 20, "event": "checkpoint", "path": "ckpt/step-20", "seconds": 0.15})
    lines += [record(s, loss_scale=0.95) for s in range(22, 31, 2)]
    lines.insert(8, {"step": 16, "event": "rollback", "loss": 99.0, "skipped_batches": [15, 16]})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if summary:
        doc = {
            "steps": 30,
            "tokens_per_step": TOKENS_PER_STEP,
            "loss_first_logged": lines[0]["loss"],
            "loss_final": lines[-1]["loss"],
            "unigram_entropy_nats": 3.26,
            "step_seconds": {"measured_median": 0.125, "predicted": 0.1, "error": 0.25},
            "tokens_per_second": TOKENS_PER_STEP / 0.125,
            "mfu": {"measured": 0.3},
            "memory_bytes": {
                "predicted_peak": PREDICTED_PEAK_BYTES,
                "measured_peak": None,
                "measured_peak_fake_tensors": 88_231_640,
                "error": 0.0002,
            },
            "device": {"kind": "cpu", "name": "Test CPU"},
            "world_size": 1,
            "reliability": {"rollbacks": 1, "checkpoints_written": 1},
            "notes": ["a note from the run <b>kept as text</b>"],
            "something_new": {"x": 1},
        }
        (folder / "summary.json").write_text(json.dumps(doc))
    if config:
        (folder / "config.json").write_text(json.dumps({"model": "gpt2", "steps": 30}))
    return folder
