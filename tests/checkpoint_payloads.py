"""What the checkpoint-store tests save, in miniature (shared by tests/train/test_checkpoint_*)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trainbudget.train.checkpointing.checkpoint import (
    MANIFEST,
    checkpoint_step,
    list_checkpoints,
    load_file,
)
from trainbudget.train.rng import capture_rng_state

N_WEIGHTS = 2**16  # model.pt: 256 KiB of float32, so its middle byte is tensor data


def files(step: int, n_weights: int = 8) -> dict[str, object]:
    """What rank 0 of the trainer saves, in miniature."""
    return {
        "model.pt": {"w": torch.arange(n_weights, dtype=torch.float32) + step},
        "optimizer.pt": {
            "state": {0: {"exp_avg": torch.full((3,), float(step))}},
            "param_groups": [{"lr": 1e-3, "params": [0]}],
        },
        "state.json": {"step": step, "tokens_seen": 64 * step, "loader": {"step": step}},
        "rank-00000.pt": {"rng": capture_rng_state()},
    }


def steps(root: Path) -> list[int]:
    return [checkpoint_step(p) for p in list_checkpoints(root)]


def loaded_step(path: Path) -> int:
    step = load_file(path, "state.json")["step"]
    assert torch.equal(load_file(path, "model.pt")["w"][:8], torch.arange(8.0) + step), path
    return step


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def edit_manifest(path: Path, change) -> None:
    file = path / MANIFEST
    file.write_text(json.dumps(change(json.loads(file.read_text()))))
