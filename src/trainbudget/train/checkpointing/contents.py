"""A checkpoint's contents checked against the run before anything is loaded. The manifest
proves the files are the ones that were written, not that this run's model wrote them:

- state.json's step must be the folder's (an edited `"step": 7` inside step-00000010 was
  accepted, and the run logged itself at step 7);
- the model's tensors (model.pt, or dcp/'s index) must have the run's model's names, shapes and
  dtypes (another model's model.pt gave a 40-line size-mismatch traceback, and no fallback);
- every tensor of the optimizer's state must belong to one of the run's optimizer parameters
  and have its shape and dtype, in the same parameter groups (a wrong-shape optimizer.pt was
  accepted, "resumed from ...", and crashed at step 1).

Shapes and dtypes only: model.pt and optimizer.pt are memory-mapped (their data is not read),
a dcp/ checkpoint's index is read alone. A mismatch is a CheckpointError naming the file and
the first difference; `resume.find_checkpoint` then rejects that checkpoint by name and falls
back to an older one."""

from __future__ import annotations

from pathlib import Path

import torch

from trainbudget.train.checkpointing.checkpoint import load_file
from trainbudget.train.checkpointing.manifest import (
    DCP_DIR,
    CheckpointError,
    checkpoint_step,
    load_json,
)
from trainbudget.train.checkpointing.sharded import METADATA_FILE, param_at, saved_tensors

Described = tuple[tuple[int, ...], torch.dtype]
"""A tensor's shape and dtype."""

STATE_KEYS = ("step", "world_size", "spec", "data", "config")  # what resume reads first


def checked_state(path: Path) -> dict:
    """state.json of checkpoint `path`: an object with the keys resume reads, its step the
    folder's."""
    state = load_json(path, "state.json")
    file = path / "state.json"
    if not isinstance(state, dict):
        raise CheckpointError(file, "is not a JSON object")
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise CheckpointError(file, f"lacks {', '.join(missing)}")
    for key in ("spec", "data", "config"):
        if not isinstance(state[key], dict):
            raise CheckpointError(file, f"{key} is not an object")
    step = checkpoint_step(path)
    if type(state["step"]) is not int or state["step"] != step:
        raise CheckpointError(file, f"says step {state['step']!r}; the folder is {path.name}")
    return state


def check_contents(path: Path, state: dict, model: torch.nn.Module, optimizer) -> None:
    """The model's and the optimizer's tensors in checkpoint `path` (state.json `state`)
    against the run's `model` (unwrapped; FSDP2's DTensors report their full shapes) and
    `optimizer`."""
    if state.get("format", "full") == "dcp":
        file = path / DCP_DIR / METADATA_FILE
        tensors = saved_tensors(path / DCP_DIR)  # by path: ("model", name), ("optimizer", ...)
        _check_model(file, {p[1]: t for p, t in tensors.items() if p[0] == "model"}, model)
        optimizer_tensors = {p[1:]: t for p, t in tensors.items() if p[0] == "optimizer"}
        _check_optimizer(file, optimizer_tensors, optimizer)
        return
    weights = load_file(path, "model.pt", map_location="cpu", mmap=True)
    if not isinstance(weights, dict):
        raise CheckpointError(path / "model.pt", "is not a state dict of tensors")
    _check_model(path / "model.pt", _tensors(weights, ()), model)
    saved = load_file(path, "optimizer.pt", map_location="cpu", mmap=True)
    _check_groups(path / "optimizer.pt", saved, optimizer)
    _check_optimizer(path / "optimizer.pt", _tensors(saved, ()), optimizer)


def _check_model(file: Path, saved: dict, model: torch.nn.Module) -> None:
    model = getattr(model, "whole", model)  # a pipeline rank's part: the whole model's names
    mine = {(name,): _described(t) for name, t in model.state_dict().items()}
    saved = {key if isinstance(key, tuple) else (key,): value for key, value in saved.items()}
    missing, unexpected = sorted(mine.keys() - saved.keys()), sorted(saved.keys() - mine.keys())
    if missing or unexpected:
        raise CheckpointError(
            file,
            f"holds another model's tensors (missing {[k[0] for k in missing[:3]]}, "
            f"unexpected {[k[0] for k in unexpected[:3]]})",
        )
    for key, want in mine.items():
        if saved[key] != want:
            raise CheckpointError(
                file,
                f"holds another model: {key[0]} is {_show(saved[key])}, this run's is "
                f"{_show(want)}",
            )


def _check_optimizer(file: Path, saved: dict[tuple, Described], optimizer) -> None:
    """Every tensor of the state that is not a scalar (a step count) is a parameter's: of its
    shape and dtype. `saved`'s paths are str for dict keys, int for list positions."""
    for path, described in saved.items():
        if not described[0]:
            continue
        param = param_at(optimizer, path)
        name = ".".join(map(str, path))
        if param is None:
            raise CheckpointError(file, f"{name} belongs to no parameter of this run's optimizer")
        if described != _described(param):
            raise CheckpointError(
                file,
                f"{name} is {_show(described)}, its parameter's is {_show(_described(param))} "
                "(another model's optimizer)",
            )


def _check_groups(file: Path, saved: object, optimizer) -> None:
    """The same parameter groups of the same sizes (torch's load_state_dict refuses others
    with a traceback); a mixed-precision optimizer's inner one and masters alike."""
    inner = getattr(optimizer, "inner", None)
    if inner is not None:  # MasterWeightOptimizer: {"inner": ..., "masters": [...]}
        if not isinstance(saved, dict) or not isinstance(saved.get("masters"), list):
            raise CheckpointError(file, "is not a mixed-precision optimizer's state")
        if len(saved["masters"]) != len(optimizer.masters):
            raise CheckpointError(
                file,
                f"holds {len(saved['masters'])} master weights; this run has "
                f"{len(optimizer.masters)}",
            )
        saved, optimizer = saved.get("inner"), inner
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or not isinstance(saved.get("state"), dict):
        raise CheckpointError(file, "is not an optimizer's state dict (state, param_groups)")
    sizes = [len(g.get("params", ())) if isinstance(g, dict) else None for g in groups]
    mine = [len(g["params"]) for g in optimizer.param_groups]
    if hasattr(optimizer, "params_by_index"):  # a pipeline rank's: the whole model's one group
        mine = [len(optimizer.params_by_index)]
    if sizes != mine:
        raise CheckpointError(
            file, f"has parameter groups of {sizes} parameters; this run's optimizer has {mine}"
        )


def _tensors(tree: object, prefix: tuple) -> dict[tuple, Described]:
    """Shape and dtype of every tensor in a nested state, by path (dict keys as str, as DCP
    flattens them; list positions as int)."""
    if isinstance(tree, torch.Tensor):
        return {prefix: _described(tree)}
    if isinstance(tree, dict):
        items = ((str(k), v) for k, v in tree.items())
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return {}
    return {p: d for key, sub in items for p, d in _tensors(sub, (*prefix, key)).items()}


def _described(t: torch.Tensor) -> Described:
    return tuple(t.shape), t.dtype


def _show(described: Described) -> str:
    shape, dtype = described
    return f"{tuple(shape)} {str(dtype).removeprefix('torch.')}"
