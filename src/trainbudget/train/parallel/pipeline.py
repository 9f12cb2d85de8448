"""Pipeline parallelism on torch.distributed.pipelining: the model cut into pp * vpp stages
(train.spec.pipeline_split), each rank running its stages under ScheduleGPipe, Schedule1F1B or
ScheduleInterleaved1F1B, with the data-parallel strategy (ddp, zero2, fsdp, hsdp) applied to
each stage over the ranks that hold the same stage.

What runs, in torchtitan's order: split into stages -> tensor parallel on each stage over the
mesh's "tp" axis (`_tensor_parallel`: train.parallel.tensor_parallel's split of whichever parts a
stage holds) -> DDP or FSDP2 on each stage (`_data_parallel`; with tp, FSDP2 or FSDP2's `replicate`,
as train.parallel.parallelize does) -> a `PipelineStage` per stage on the mesh's "pp" group -> the
schedule with n_microbatches = grad_accum.

With tensor parallelism the activation sent from stage to stage is what flows between two
blocks of the split model, a plain local tensor: (B, T, D), or with sequence parallelism this
rank's (B, T/tp, D) -- kept sequence-split on both sides, never gathered at the boundary (a
stage's first block reads it as Shard(1), as the next block would). The last stage's logits
stay vocabulary-sharded DTensors, and the schedule runs inside loss_parallel
(train.parallel.tensor_parallel.loss_context). The tied embedding and head are split by vocabulary
rows the same way, so each tp rank sums its own rows over the first and last stage.

Why the step equals one process's step on the same global batch:
- the rows: every rank of one pipeline reads the same rows (the loader is given the
  data-parallel coordinate, train.parallel.parallelize.data_parallel_coordinate); the first stage
  uses the inputs, the last the targets; the schedule cuts the step's grad_accum micro-batches,
  concatenated, back into the same micro-batches (torch.tensor_split along the batch dim);
- the loss: the loop's cross-entropy, the mean over a micro-batch's tokens; the schedule sums
  the micro-batches' gradients and divides them by n_microbatches (`scale_grads=True`,
  PipelineStage.scale_grads), as one process divides each micro-batch's loss by grad_accum;
  DDP/FSDP2 then average over the data-parallel ranks;
- tied embeddings (GPT-2): Megatron's way (Shoeybi et al. 2019, arXiv 1909.08053; Narayanan
  et al. 2021, arXiv 2104.04473): the first stage holds the embedding, the last the head, both
  the same initial tensor; after backward their gradients are summed over the two (an
  all-reduce in a group of the first and last stage of each pipeline), so both take the same
  update -- the single model's gradient is the sum of its two uses;
- the gradient norm: each rank's squared norm of its own gradients (the tied head left out:
  the embedding counts it once; DTensor norms reduced over tp), summed over the pipeline
  (`grad_norm`), then every rank clips
  by the same coefficient;
- the logged loss: only the last stage has it; it enters the loop's all-reduce packet times pp,
  so that the packet's sum over all ranks divided by the world size is the global mean.

Parameter names stay those of the single-process model (`StageModule` keeps the model's own
attribute names, `blocks` as a ModuleDict keyed by the layer index), and the optimizer's
state is saved under the single model's parameter indices (`PipelineOptimizer`): a PP
checkpoint (DCP, every rank writing its stages) is a single-process checkpoint's layout, and
loads in one process or under another layout; a full checkpoint (one process, DDP) loads into
the stages too, each rank taking its entries (`StageModule.load_state_dict`, the optimizer's),
cut into FSDP2's shards where the stages are sharded (train.launch.distributed.ShardingLoad).
DDP wraps a stage with find_unused_parameters=True (see `_data_parallel`).

Not run with pp > 1 (refused by config and preflight, one line each): zero1, bf16-mixed and
amp-fp16, torch.compile, probes, MoE models.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainbudget.model.transformer import Transformer, rope_tables
from trainbudget.train.parallel.context import context_shard, gradient_mesh
from trainbudget.train.parallel.setup import make_optimizer
from trainbudget.train.parallel.tensor_parallel import apply_tensor_parallel, per_token_loss
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.pipeline_split import SCHEDULE_CLASSES, rank_stages, stage_layers
from trainbudget.train.spec.strategy import get_strategy


class StageModule(nn.Module):
    """Some of the layers of a `Transformer`, under its own attribute names (so the state
    dict's keys are the model's): the embeddings when it holds the first layer's input, the
    final norm and head when it holds the last layer's output. Input: token ids (B, T) on the
    first stage, activations (B, T, D) on the others; output: activations, or logits
    (B, T, V) on the last."""

    def __init__(self, model: Transformer, layers, *, first: bool, last: bool) -> None:
        super().__init__()
        self.spec, self.recompute = model.spec, model.recompute
        self.checkpoint_early_stop = model.checkpoint_early_stop
        self.tok = model.tok if first else None
        self.pos = model.pos if first else None
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in layers})
        self.norm = model.norm if last else None
        self.head = model.head if last else None
        self.seq_shards = 1
        """Sequence parallelism (train.parallel.tensor_parallel): the tp ranks an activation's
        positions are split over, each stage receiving (B, T / seq_shards, D)."""
        self.sequence_shard = None
        """Context parallelism (train.parallel.context), as `Transformer.sequence_shard`: in
        training each stage holds this rank's T / cp tokens of every sequence."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1] if self.tok is not None else x.shape[1] * self.seq_shards
        shard = self.sequence_shard if self.training else None
        where = torch.arange(t, device=x.device) if shard is None else shard.positions(t, x.device)
        if self.tok is not None:
            ids = x
            x = self.tok(ids)  # (B, T, D)
            if self.pos is not None:
                x = x + self.pos(where)
        # RoPE tables computed here, on every stage: nothing but the activations travels
        rope = (
            rope_tables(t, self.spec.d_rope, x.device, positions=where)
            if self.spec.position == "rope"
            else None
        )
        for block in self.blocks.values():
            if self.recompute == "full" and self.training:
                with set_checkpoint_early_stop(self.checkpoint_early_stop):
                    x = checkpoint(block, x, rope, shard=shard, use_reentrant=False)
            else:
                x = block(x, rope, shard=shard)
        if self.head is None:
            return x  # (B, T, D)
        return self.head(self.norm(x))  # (B, T, V)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """A whole model's state (a full checkpoint) loads too: this part takes its own keys."""
        mine = set(self.state_dict())
        return super().load_state_dict(
            {k: v for k, v in state_dict.items() if k in mine}, strict=strict, assign=assign
        )


def whole_model_on_meta(model: Transformer) -> Transformer:
    """The whole model's shapes and dtypes, no storage: what a pipeline rank's checkpoint
    checks compare against (train.checkpointing.contents reads `StageModule.whole`)."""
    dtype = next(model.parameters()).dtype
    return Transformer(model.spec, device="meta", recompute=model.recompute, dtype=dtype)


class PipelineOptimizer:
    """The optimizer of one pipeline rank's parameters (train.parallel.setup.make_optimizer), whose
    state_dict is in the single-process layout: state keyed by the parameter's index in the
    whole model's `parameters()`, one param group listing all of them. Every rank writes the
    entries of its own parameters (DCP merges them); load_state_dict takes a whole state and
    keeps this rank's entries. `params_by_index` (the whole model's order: this rank's live
    parameters, the others on the meta device) is what the checkpoint code reads to find a
    state entry's parameter."""

    def __init__(self, part: nn.Module, whole: Transformer, cfg: TrainConfig) -> None:
        self.optim = make_optimizer(part, cfg)
        index = _whole_indices(whole)
        self._global = [index[name] for name, _ in part.named_parameters()]
        self.params_by_index = list(whole.parameters())
        for name, p in part.named_parameters():
            self.params_by_index[index[name]] = p
        self.n_whole = len(self.params_by_index)
        if len(self.optim.param_groups) != 1:
            raise ValueError("PipelineOptimizer expects one param group")

    @property
    def param_groups(self):
        return self.optim.param_groups

    @property
    def state(self):
        return self.optim.state

    @property
    def defaults(self):
        return self.optim.defaults

    def step(self, closure=None):
        return self.optim.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optim.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        local = self.optim.state_dict()
        group = {k: v for k, v in local["param_groups"][0].items() if k != "params"}
        return {
            "state": {self._global[i]: s for i, s in local["state"].items()},
            "param_groups": [{**group, "params": list(range(self.n_whole))}],
        }

    def load_state_dict(self, state: dict) -> None:
        saved = {int(k): v for k, v in state["state"].items()}
        group = {k: v for k, v in state["param_groups"][0].items() if k != "params"}
        self.optim.load_state_dict(
            {
                "state": {i: saved[g] for i, g in enumerate(self._global) if g in saved},
                "param_groups": [{**group, "params": list(range(len(self._global)))}],
            }
        )


def _whole_indices(whole: nn.Module) -> dict[str, int]:
    """Each parameter name of the whole model -> its index in whole.parameters() (a tied head's
    name -> the embedding's index: one parameter, as one process's optimizer has it)."""
    position = {id(p): i for i, p in enumerate(whole.parameters())}
    return {name: position[id(p)] for name, p in whole.named_parameters(remove_duplicate=False)}


@dataclass(kw_only=True, eq=False)
class Pipeline:
    """One rank's share of the pipeline: what the loop's pipeline step calls (`run.net`)."""

    schedule: object
    """The torch.distributed.pipelining schedule over this rank's stages."""
    stages: list[StageModule]
    """This rank's stage modules, first to last (DDP/FSDP2 wrap or shard them)."""
    stage_ids: tuple[int, ...]
    n_stages: int
    pp: int
    pp_group: dist.ProcessGroup
    pp_ranks: tuple[int, ...]
    """The global ranks of this rank's pipeline, by pipeline rank."""
    tie_group: dist.ProcessGroup | None = None
    """Tied embeddings: the first and last stage of this pipeline (None: untied, or this
    rank holds neither)."""
    tied_name: str = ""
    """The tied weight's name on this rank ("tok.weight" or "head.weight")."""
    losses: list = field(default_factory=list)
    """The last stage's token losses (B, T) of each micro-batch of the step in progress."""
    factor: list = field(default_factory=lambda: [None])
    """[the step's loss factor] (train.launch.faults, tests only; None: none)."""

    @property
    def is_first(self) -> bool:
        return 0 in self.stage_ids

    @property
    def is_last(self) -> bool:
        return self.n_stages - 1 in self.stage_ids

    def owner(self, stage: int) -> int:
        """The global rank running `stage` in this rank's pipeline."""
        return self.pp_ranks[stage % self.pp]


def build_pipeline(
    model: Transformer, cfg: TrainConfig, mesh: DeviceMesh, device: torch.device
) -> tuple[StageModule, Pipeline]:
    """(this rank's part of `model` -- its stages' parameters under the model's names --, its
    pipeline)."""
    from torch.distributed.pipelining import PipelineStage

    pp_rank, n_stages = mesh.get_local_rank("pp"), cfg.pp * cfg.vpp
    layers = stage_layers(model.spec.n_layers, pp=cfg.pp, vpp=cfg.vpp, pp_layers=cfg.pp_layers)
    mine = rank_stages(pp_rank, pp=cfg.pp, vpp=cfg.vpp)
    whole = whole_model_on_meta(model)
    stages = [StageModule(model, layers[s], first=s == 0, last=s == n_stages - 1) for s in mine]
    part = stages[0] if len(stages) == 1 else _union(model, layers, mine, n_stages)
    object.__setattr__(part, "whole", whole)  # not a submodule: no state, no parameters
    for module in {id(m): m for m in (*stages, part)}.values():  # cp > 1: this rank's tokens
        module.sequence_shard = context_shard(mesh)
    dp_mesh = _dp_mesh(mesh)
    wrapped = [_data_parallel(_tensor_parallel(s, cfg, mesh), cfg, dp_mesh, device) for s in stages]
    pp_group = mesh.get_group("pp")
    pipe_stages = [
        PipelineStage(w, s, n_stages, device, group=pp_group)
        for w, s in zip(wrapped, mine, strict=True)
    ]
    losses, factor = [], [None]
    schedule = _schedule(cfg, pipe_stages, _loss_fn(losses, factor))
    pipeline = Pipeline(
        losses=losses,
        factor=factor,
        schedule=schedule,
        stages=stages,
        stage_ids=mine,
        n_stages=n_stages,
        pp=cfg.pp,
        pp_group=pp_group,
        pp_ranks=tuple(dist.get_process_group_ranks(pp_group)),
    )
    if model.spec.tied_embeddings:
        _tie(pipeline, mesh)
    return part, pipeline


def _union(model: Transformer, layers: tuple, mine: tuple, n_stages: int) -> StageModule:
    """One module over the layers of stages `mine` (interleaved: a rank's vpp stages), sharing
    their submodules: the rank's parameters under the model's names, for the optimizer and
    checkpoints."""
    kept = [i for s in mine for i in layers[s]]
    return StageModule(model, kept, first=0 in mine, last=n_stages - 1 in mine)


def _dp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The data-parallel part of the mesh (everything but "pp" and "tp"; cp folded in,
    train.parallel.context.gradient_mesh)."""
    names = tuple(n for n in mesh.mesh_dim_names if n not in ("pp", "tp", "cp"))
    if "cp" in mesh.mesh_dim_names:
        return gradient_mesh(mesh, names)
    return mesh[names] if len(names) > 1 else mesh[names[0]]


def _tensor_parallel(stage: StageModule, cfg: TrainConfig, mesh: DeviceMesh) -> StageModule:
    """Tensor parallelism of one stage over the mesh's "tp" axis, before its data-parallel
    wrapping (torchtitan's order); a no-op while the mesh has none. What travels between two
    stages stays what flows between two blocks of the split model: a plain local tensor,
    (B, T/tp, D) with sequence parallelism (this rank's positions: both sides keep it
    sequence-split, no gather at the boundary), (B, T, D) without."""
    if "tp" not in mesh.mesh_dim_names:
        return stage
    apply_tensor_parallel(stage, mesh["tp"], sequence_parallel=cfg.sequence_parallel)
    stage.seq_shards = cfg.tp if cfg.sequence_parallel else 1
    return stage


def _data_parallel(stage, cfg: TrainConfig, dp_mesh: DeviceMesh, device: torch.device):
    """The run's data-parallel strategy on one stage (over the ranks holding that stage): DDP
    around it, or FSDP2 per block and on the stage (the schedule drives both: no_sync and
    FSDP2's gradient sync on the last micro-batch, PipelineStage.backward_maybe_with_nosync)."""
    if dp_mesh.size() == 1:
        return stage
    strategy = get_strategy(cfg.strategy)
    if strategy.fsdp2:
        from torch.distributed.fsdp import fully_shard

        for block in stage.blocks.values():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=strategy.reshard_after_forward)
        fully_shard(stage, mesh=dp_mesh, reshard_after_forward=strategy.reshard_after_forward)
        return stage
    if cfg.tp > 1:  # DDP takes no DTensor parameters: FSDP2's engine unsharded, as without pp
        from torch.distributed._composable.replicate_with_fsdp import replicate

        return replicate(stage, mesh=dp_mesh)
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    # find_unused_parameters: DDP then never rebuilds its buckets from the order gradients
    # arrived in during the first step, an order it would record once per micro-batch here
    # (the schedule runs several backwards per step) and refuse ("rebuilt parameter indices
    # size is not same as original model parameters size", torch 2.13)
    return DistributedDataParallel(
        stage, device_ids=ids, process_group=dp_mesh.get_group(), find_unused_parameters=True
    )


def _schedule(cfg: TrainConfig, pipe_stages: list, loss_fn):
    from torch.distributed import pipelining

    cls = getattr(pipelining, SCHEDULE_CLASSES[cfg.pp_schedule])
    stages = pipe_stages if cfg.pp_schedule == "interleaved-1f1b" else pipe_stages[0]
    return cls(stages, n_microbatches=cfg.grad_accum, loss_fn=loss_fn, scale_grads=True)


def _tie(pipeline: Pipeline, mesh: DeviceMesh) -> None:
    """The groups {first stage, last stage} of each pipeline, for the tied weight's gradient
    (every rank creates every group, in the same order, as new_group requires)."""
    ranks = mesh.mesh  # (pp, dp...) global ranks
    firsts, lasts = ranks[0].flatten().tolist(), ranks[-1].flatten().tolist()
    me = dist.get_rank()
    for a, b in zip(firsts, lasts, strict=True):
        group = dist.new_group([a, b])
        if me in (a, b):
            pipeline.tie_group = group
    pipeline.tied_name = "tok.weight" if pipeline.is_first else "head.weight"


def sync_tied_grads(part: nn.Module, pipeline: Pipeline) -> None:
    """Sum the tied weight's gradient over its first- and last-stage copies (Megatron). Under
    FSDP2 and tensor parallelism each rank sums its shard: both copies are split the same way
    (by vocabulary rows under tp), once the gradient is laid out as its parameter is."""
    if pipeline.tie_group is None:
        return
    param = dict(part.named_parameters())[pipeline.tied_name]
    grad = param.grad
    if hasattr(grad, "placements") and grad.placements != param.placements:
        # tensor parallel: the vocab-split embedding's gradient comes out replicated (torch 2.13)
        grad = param.grad = grad.redistribute(placements=param.placements)
    local = grad.to_local() if hasattr(grad, "to_local") else grad  # this rank's shard
    dist.all_reduce(local, group=pipeline.tie_group)


def grad_norm(part: nn.Module, pipeline: Pipeline) -> torch.Tensor:
    """The L2 norm of the whole model's gradient: this rank's (under FSDP2 over its shards,
    reduced across them), squared, summed over the pipeline; the tied head left out (the
    embedding counts the one parameter)."""
    from trainbudget.train.launch.distributed import total_grad_norm

    skip = "head.weight" if pipeline.tie_group is not None and pipeline.is_last else None
    params = [p for name, p in part.named_parameters() if name != skip]
    squared = total_grad_norm(params).float() ** 2
    dist.all_reduce(squared, group=pipeline.pp_group)
    return squared.sqrt()


def clip_(part: nn.Module, norm: torch.Tensor, max_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_'s scaling by `norm`, the whole model's."""
    coef = float(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    if coef < 1.0:
        for p in part.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)


def _loss_fn(losses: list, factor_ref: list):
    """The last stage's loss of one micro-batch: the loop's cross-entropy, the mean over its
    tokens (times the fault factor, tests only); its token losses kept in `losses` for the
    logged loss and the per-source figures."""

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # (B, T); vocabulary-sharded DTensor logits under tensor parallelism (loss_parallel)
        token_losses = per_token_loss(logits, targets)
        factor = factor_ref[0]
        if factor is not None:
            token_losses = token_losses * factor
        losses.append(token_losses.detach())
        return token_losses.mean()

    return loss_fn
