"""An expert-parallel run's checkpoints in the single-process ("full") format: model.pt and
optimizer.pt of the whole model, as one process would write them, so that an ep run resumes in
one process, under another ep, or from a one-process checkpoint.

Each rank holds its experts only (train.parallel.expert_parallel), under their whole-model names
(`blocks.1.mlp.experts.3.up.weight`), and its optimizer state by position over its own
parameters. Saving: every rank of the first expert group (rank 0's) sends its experts' tensors
and their optimizer state, keyed by parameter name, to rank 0 (torch.distributed's
gather_object), which lays them out by the whole model's parameter order -- the replicas in
the other groups are equal copies and send nothing. Loading: every rank reads the full files
and keeps its own parameters' entries, moved to its own positions.

Optimizer states (torch's {"state": {position: ...}, "param_groups": [...]}, or
model.optim.MasterWeightOptimizer's {"inner": ..., "masters": [...]}) are re-keyed by name
(`named_state`) and back by position over another parameter list (`positional_state`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from trainbudget.train.launch.distributed import DistInfo, ShardingLoad, full_state
from trainbudget.train.parallel import expert_parallel


def full_states(model: nn.Module, optimizer, info: DistInfo) -> tuple[dict | None, dict | None]:
    """(model state, optimizer state) of the whole model in the single-process format, on rank
    0; (None, None) on the others. A collective: every rank calls it."""
    layout = expert_parallel.of(model)
    experts = set(layout.expert_names)
    # FSDP2's DTensors gathered into whole tensors (a collective: the same order on every
    # rank, the model's); plain tensors as they are
    model_state = _cpu(full_state(model.state_dict(), _Everyone(info)))
    optimizer_state = _cpu(
        full_state(named_state(optimizer.state_dict(), _names(model)), _Everyone(info))
    )
    sends = layout.groups.members[0] == 0  # the first expert group: its experts are enough
    mine = (
        ({k: v for k, v in model_state.items() if k in experts}, _only(optimizer_state, experts))
        if sends
        else None
    )
    gathered = [None] * info.world_size if info.is_main else None
    dist.gather_object(mine, gathered, dst=0)
    if not info.is_main:
        return None, None
    for sent in gathered:
        if sent is not None:
            model_state.update(sent[0])
            _merge(optimizer_state, sent[1])
    full = list(layout.full_names)
    return model_state, positional_state(_one_group(optimizer_state, full), full)


def load_full(
    model: nn.Module, optimizer, model_state: dict, optimizer_state: dict, *, sharded: bool
) -> None:
    """Load the whole model's model.pt and optimizer.pt: this rank keeps its parameters'
    (`sharded`: under FSDP2, cut into its shards, as train.launch.distributed does)."""
    layout = expert_parallel.of(model)
    mine = {k: model_state[k] for k in model.state_dict()}
    named = named_state(optimizer_state, list(layout.full_names))
    local = positional_state(named, _names(model))
    if not sharded:
        model.load_state_dict(mine)
        optimizer.load_state_dict(local)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, mine, options=StateDictOptions(full_state_dict=True))
    ShardingLoad(optimizer).load_state_dict(local)


class _Everyone:
    """A DistInfo-like view under which `full_state` keeps the gathered tensors on every rank
    (each rank sends its own experts' whole tensors)."""

    def __init__(self, info: DistInfo) -> None:
        self.is_main = True
        self.world_size = info.world_size


def _cpu(tree):
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_cpu(v) for v in tree]
    return tree


def named_state(state: dict, names: list[str]) -> dict:
    """A positional optimizer state over parameters `names` keyed by parameter name."""
    if "inner" in state and "masters" in state:  # MasterWeightOptimizer
        return {
            "inner": named_state(state["inner"], names),
            "masters": dict(zip(names, state["masters"], strict=True)),
        }
    return {
        **state,
        "state": {names[int(i)]: s for i, s in state["state"].items()},
        "param_groups": [
            {**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]
        ],
    }


def positional_state(state: dict, names: list[str]) -> dict:
    """A `named_state` by position over `names`, entries of other names left out."""
    position = {name: i for i, name in enumerate(names)}
    if "inner" in state and "masters" in state:
        return {
            "inner": positional_state(state["inner"], names),
            "masters": [state["masters"][name] for name in names],
        }
    per_param = sorted((position[n], s) for n, s in state["state"].items() if n in position)
    return {
        **state,
        "state": dict(per_param),
        "param_groups": [
            {**g, "params": [position[n] for n in g["params"] if n in position]}
            for g in state["param_groups"]
        ],
    }


def _names(model: nn.Module) -> list[str]:
    """Parameter names in model.parameters() order (the optimizer's positions)."""
    return [name for name, _ in model.named_parameters()]


def _only(state: dict, keep: set[str]) -> dict:
    """A named state's entries of the parameters `keep`."""
    if "inner" in state and "masters" in state:
        masters = {n: t for n, t in state["masters"].items() if n in keep}
        return {"inner": _only(state["inner"], keep), "masters": masters}
    return {"state": {n: s for n, s in state["state"].items() if n in keep}}


def _merge(into: dict, part: dict) -> None:
    if "masters" in part:
        into["masters"].update(part["masters"])
        _merge(into["inner"], part["inner"])
        return
    into["state"].update(part["state"])


def _one_group(state: dict, full: list[str]) -> dict:
    """The merged state's one parameter group listing every parameter of the whole model
    (the trainer's optimizers have one group: train.parallel.setup.make_optimizer)."""
    if "inner" in state and "masters" in state:
        return {**state, "inner": _one_group(state["inner"], full)}
    if len(state["param_groups"]) != 1:
        raise ValueError("expert-parallel checkpoints need an optimizer with one param group")
    return {**state, "param_groups": [{**state["param_groups"][0], "params": list(full)}]}


def full_twin(spec, cfg) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The whole single-process model and its optimizer on the meta device (no memory): what
    a full checkpoint's tensors are checked against (train.checkpointing.contents)."""
    from trainbudget.model.optim import weight_dtype
    from trainbudget.model.transformer import build_model
    from trainbudget.train.parallel.setup import make_optimizer

    model = build_model(spec, device="meta", dtype=weight_dtype(cfg.precision))
    return model, make_optimizer(model, cfg)
