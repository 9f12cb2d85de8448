"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3) and sequence
parallelism (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2) of the reference model, with
PyTorch's DTensor styles (`torch.distributed.tensor.parallel.parallelize_module`) on the mesh's
"tp" axis; nothing home-made. What runs, per module of model.transformer.Transformer:

| module | style | weight on each of the tp ranks |
|---|---|---|
| tok (nn.Embedding) | RowwiseParallel: vocabulary rows, the lookups summed over the ranks | V/tp |
| blocks.i.attn.qkv | ColwiseParallel: output rows, i.e. whole kv groups (see below) | 1/tp |
| blocks.i.attn.proj | RowwiseParallel: input columns, outputs summed over the tp ranks | 1/tp |
| blocks.i.mlp.up, .gate | ColwiseParallel: hidden units | d_ff/tp |
| blocks.i.mlp.down | RowwiseParallel | d_ff/tp |
| head | ColwiseParallel: vocabulary rows; logits stay split by vocabulary (loss parallel) | V/tp |
| norms, pos | replicated DTensors (distribute_module); norms: SequenceParallel with SP | whole |

The attention's fused `qkv` is laid out by kv group ([q heads of group g | k_g | v_g] for each
kv head g, model.transformer.Attention), so ColwiseParallel's even split of its rows gives each
rank n_kv_heads/tp whole groups with their query heads; the attention then runs on those heads
as it is (it reads its head count from the width it gets). tp must divide n_heads, n_kv_heads,
d_ff and the vocabulary (train.spec.strategy.check_tensor_parallel, with the refusals: MoE, MLA and
QK-norm have no plan here).

Sequence parallel (`sequence_parallel`): between the blocks the residual stream is split along
the sequence (each rank T/tp positions); the norms run on their part (SequenceParallel); the
attention's and the MLP's inputs are all-gathered (PrepareModuleInput Shard(1) -> Replicate) and
their row-parallel outputs reduce-scattered (RowwiseParallel(output_layouts=Shard(1))). The
embedding's output stays whole (the learned positions are added to it) and is cut along the
sequence at the first block (PrepareModuleInput Replicate -> Shard(1), no communication). The
norms' weights are replicated DTensors whose gradient comes out Partial (each rank saw its
positions only): a hook sums it over the tp ranks as it is made (Megatron's all-reduce of the
sequence-parallel parameters' gradients).

Loss parallel: the head's logits stay vocabulary-sharded DTensors, and the cross-entropy (and its
backward) runs inside `torch.distributed.tensor.parallel.loss_parallel()` (`loss_context`), which
computes the log-softmax over the split vocabulary without gathering the logits. Outside it --
evaluation and probes -- train.evaluate.full_logits gathers them.

The data: the ranks of one tp group read the same rows (train.parallel.parallelize's
data_parallel_coordinate); the tied head (GPT-2's) is re-tied after the split, so the embedding
and the head stay one parameter.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh, *, sequence_parallel: bool):
    """Split `model` (model.transformer.Transformer, built whole on every rank from the same
    seed, or a pipeline stage of it, train.parallel.pipeline.StageModule: whichever of tok, pos,
    norm and head it holds) over `tp_mesh` in place: its parameters become DTensors (see the module
    docstring)."""
    tok, head = getattr(model, "tok", None), getattr(model, "head", None)
    tied = tok is not None and head is not None and head.weight is tok.weight
    seq = Shard(1) if sequence_parallel else Replicate()  # the residual stream between blocks
    plan = {
        # the whole embedding on every rank, summed: positions are added before the split
        "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "head": ColwiseParallel(
            input_layouts=seq, output_layouts=Shard(-1), use_local_output=False
        ),
        **({"norm": SequenceParallel()} if sequence_parallel else {}),
    }
    present = {
        name: style for name, style in plan.items() if getattr(model, name, None) is not None
    }
    if present:
        parallelize_module(model, tp_mesh, present)
    if tied:  # each style registered its own Parameter over the same shards: one again
        model.head.weight = model.tok.weight
    blocks = model.blocks.values() if isinstance(model.blocks, nn.ModuleDict) else model.blocks
    for index, block in enumerate(blocks):
        # a stage without the embedding gets its first block's input sequence-split already
        first = index == 0 and tok is not None
        parallelize_module(block, tp_mesh, _block_plan(block, sequence_parallel, first=first))
    for module in model.modules():
        if any(not isinstance(p, DTensor) for p in module.parameters(recurse=False)):
            # what the plan leaves whole (norms without sequence parallel, learned positions):
            # replicated DTensors too, so that the optimizer, the clipping and FSDP2 see one
            # kind of parameter on one mesh; their inputs marked replicated, outputs local
            distribute_module(module, tp_mesh, input_fn=_replicated_inputs, output_fn=_local_output)
    if sequence_parallel:
        for param in model.parameters():
            if all(p.is_replicate() for p in param.placements):
                param.register_hook(_summed_over_tp)


def _block_plan(block: nn.Module, sequence_parallel: bool, *, first: bool) -> dict:
    """The styles of one block (its submodules by name)."""
    seq = Shard(1) if sequence_parallel else Replicate()
    plan = {
        "attn.qkv": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=seq),
        "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=seq),
    }
    if block.mlp.gate is not None:
        plan["mlp.gate"] = ColwiseParallel()
    if not sequence_parallel:
        return plan
    norms = ("norm1", "norm2", "post_norm1", "post_norm2")
    plan.update({name: SequenceParallel() for name in norms if getattr(block, name) is not None})
    # the block's input x, rope (cos, sin or None); the attention's x, rope, window
    plan["attn"] = PrepareModuleInput(
        input_layouts=(Shard(1), None, None),
        desired_input_layouts=(Replicate(), None, None),
    )
    plan["mlp"] = PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
    )
    if first:  # the embedding's whole output, cut along the sequence (local, no communication)
        plan[""] = PrepareModuleInput(
            input_layouts=(Replicate(), None),
            desired_input_layouts=(Shard(1), None),
            use_local_output=True,
        )
    return plan


def _replicated_inputs(_module, inputs, mesh):
    return tuple(
        DTensor.from_local(x, mesh, [Replicate()], run_check=False)
        if isinstance(x, torch.Tensor) and not isinstance(x, DTensor)
        else x
        for x in inputs
    )


def _local_output(_module, output, _mesh):
    return output.to_local() if isinstance(output, DTensor) else output


def _summed_over_tp(grad: torch.Tensor) -> torch.Tensor:
    """A replicated parameter's gradient from its rank's sequence part (Partial): summed."""
    if isinstance(grad, DTensor) and any(p.is_partial() for p in grad.placements):
        return grad.redistribute(placements=[Replicate()] * len(grad.placements))
    return grad


def loss_context(tp: int) -> contextlib.AbstractContextManager:
    """Where a micro-batch's forward and backward run: under tensor parallelism (tp > 1)
    loss_parallel(), whose handlers compute the cross-entropy of vocabulary-sharded logits and
    its backward; nothing otherwise."""
    return loss_parallel() if tp > 1 else contextlib.nullcontext()


def per_token_loss(logits, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy (B, T) of logits (B, T, V) -- a plain tensor, the same on every
    tp rank -- in fp32; vocabulary-sharded DTensor logits inside `loss_context`."""
    if not isinstance(logits, DTensor):
        return F.cross_entropy(
            logits.float().flatten(0, 1), targets.flatten(), reduction="none"
        ).view_as(targets)
    target = DTensor.from_local(targets.flatten(), logits.device_mesh, [Replicate()])
    losses = F.cross_entropy(logits.float().flatten(0, 1), target, reduction="none")
    return losses.to_local().view_as(targets)
