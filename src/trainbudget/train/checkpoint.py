"""A run's checkpoint: model, optimizer and data-loader state, the step and the config, in a
directory. Tensors go through torch.save and are read back with weights_only=True; everything
else is JSON. (Atomic, verified checkpoints are the next issue's work.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from trainbudget.core.model_spec import ModelSpec


def save_checkpoint(
    path: Path, *, model, optimizer, loader, step: int, config: dict, spec: ModelSpec
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path / "model.pt")
    torch.save(optimizer.state_dict(), path / "optimizer.pt")
    spec_dict = {k: v for k, v in dataclasses.asdict(spec).items() if k != "sources"}
    (path / "state.json").write_text(
        json.dumps(
            {"step": step, "config": config, "spec": spec_dict, "loader": loader.state_dict()},
            indent=2,
        )
    )


def read_state(path: Path) -> dict:
    return json.loads((path / "state.json").read_text())


def load_checkpoint(path: Path, *, model=None, optimizer=None, loader=None) -> int:
    """Restore whatever is given; returns the step the checkpoint was taken at."""
    state = read_state(path)
    if model is not None:
        model.load_state_dict(
            torch.load(
                path / "model.pt", weights_only=True, map_location=next(model.parameters()).device
            )
        )
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    if loader is not None:
        loader.load_state_dict(state["loader"])
    return int(state["step"])
