"""Which transformer layers each pipeline stage, and each of its virtual chunks, holds.

A pipeline of `pp` stages (GPUs) with `vpp` virtual chunks per stage runs the interleaved
schedule: chunk c of stage s is model part c * pp + s, so the model is walked stage 0 .. pp-1
once per chunk round (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2.2).

The convention is Megatron-Core's (megatron/core/transformer/transformer_layer.py,
`get_transformer_layer_offset`; transformer_block.py, `get_num_layers_to_build`):

- a stage's layers are split evenly over its vpp chunks (Megatron divides
  --decoder-first/last-pipeline-num-layers and the middle stages' layers by vpp);
- with --account-for-embedding-in-pipeline-split the embedding takes one layer slot, the first
  one of chunk 0 of stage 0; with --account-for-loss-in-pipeline-split the output head and
  loss take the last slot of the last chunk of stage pp-1. Megatron then splits
  n_layers + 1 (+ 1) slots evenly over the pp * vpp chunks, and the chunks holding the
  embedding or the loss build one transformer layer fewer.

Here `Plan.pp_layers` counts transformer layers per stage (one entry a GPU stage, not a
chunk), so the same plan reads the same with or without vpp. A stage's "slots" are its layers
plus the embedding (stage 0) and the loss (stage pp-1) when they are counted; the slots of each
stage must divide by vpp. Pure: no torch, no numpy.
"""

from __future__ import annotations

from typing import Protocol


class Plan(Protocol):
    """The pipeline fields of `core.parallel.plan.Plan` these rules read (a protocol, so that
    plan.py, which checks a plan with them, is the only one of the two importing the other)."""

    pp: int
    vpp: int
    pp_layers: tuple[int, ...]
    embedding_in_pp_split: bool
    loss_in_pp_split: bool

    def stage_layer_counts(self, n_layers: int) -> tuple[int, ...]: ...


SPLIT_RULE = "a stage's vpp chunks hold the same number of layer slots (Megatron-Core's rule)"


def end_slots(plan: Plan) -> tuple[int, int]:
    """(slots the embedding takes on stage 0, slots the loss takes on stage pp-1): 0 or 1."""
    return int(plan.embedding_in_pp_split), int(plan.loss_in_pp_split)


def accounted_stage_layers(n_layers: int, *, pp: int, embedding: int, loss: int) -> tuple:
    """Transformer layers of each stage when the n_layers + embedding + loss slots are split
    evenly over the pp stages: every stage (n_layers + embedding + loss) / pp slots, the first
    one fewer layer when the embedding is counted, the last when the loss is. The caller checks
    divisibility (`split_problems`)."""
    slots = (n_layers + embedding + loss) // pp
    counts = [slots] * pp
    counts[0] -= embedding
    counts[-1] -= loss
    return tuple(counts)


def stage_slots(plan: Plan, n_layers: int) -> tuple[int, ...]:
    """Layer slots of each stage: its transformer layers plus the embedding and loss slots."""
    embedding, loss = end_slots(plan)
    slots = list(plan.stage_layer_counts(n_layers))
    slots[0] += embedding
    slots[-1] += loss
    return tuple(slots)


def chunk_layer_counts(plan: Plan, n_layers: int) -> tuple[tuple[int, ...], ...]:
    """Transformer layers of each (stage, chunk): row s holds stage s's vpp chunks, chunk 0
    first. A stage's slots split evenly over its chunks; the embedding's slot is taken from
    chunk 0 of stage 0, the loss's from the last chunk of stage pp-1. Call on a valid plan."""
    embedding, loss = end_slots(plan)
    rows = []
    for s, slots in enumerate(stage_slots(plan, n_layers)):
        chunk = [slots // plan.vpp] * plan.vpp
        if s == 0:
            chunk[0] -= embedding
        if s == plan.pp - 1:
            chunk[-1] -= loss
        rows.append(tuple(chunk))
    return tuple(rows)


def split_problems(plan: Plan, n_layers: int) -> list[str]:
    """The split's rules beyond the counts' own (`plan._pp_layers_problems`): the embedding
    and loss slots need a pipeline and, without pp_layers, n_layers + slots divisible by the
    chunks; every stage's slots divisible by vpp; no chunk left without a transformer layer."""
    embedding, loss = end_slots(plan)
    if not (embedding or loss) and plan.vpp == 1:
        return []
    if (embedding or loss) and plan.pp == 1:
        return [f"{_ends_name(plan)} needs pp > 1 (a slot of the pipeline's end stages)"]
    if not plan.pp_layers:
        total, parts = n_layers + embedding + loss, plan.pp * plan.vpp
        if total % parts:
            return [
                f"n_layers ({n_layers}){_ends_sum(embedding, loss)} = {total} must be divisible "
                f"by pp ({plan.pp}) * vpp ({plan.vpp}) = {parts} (an even split of the slots)"
            ]
    slots = stage_slots(plan, n_layers)
    uneven = [
        f"stage {s}: {count}{_ends_sum(embedding * (s == 0), loss * (s == plan.pp - 1))}"
        + (f" = {slots[s]}" if slots[s] != count else "")
        for s, count in enumerate(plan.stage_layer_counts(n_layers))
        if slots[s] % plan.vpp
    ]
    if uneven:
        return [
            f"pp_layers ({plan.pp_layers!r}) with vpp ({plan.vpp}): every stage's layer slots "
            f"(its layers, + 1 for a counted embedding or loss) must be divisible by vpp "
            f"({plan.vpp}), as {SPLIT_RULE}; not {', '.join(uneven)}"
        ]
    problems = []
    for s, row in enumerate(chunk_layer_counts(plan, n_layers)):
        for c, layers in enumerate(row):
            if layers < 1:
                problems.append(
                    f"chunk {c} of stage {s} holds no transformer layer (only the "
                    f"{'embedding' if s == 0 and c == 0 else 'loss'}): give that stage more "
                    "layers or fewer chunks (vpp)"
                )
    return problems


def _ends_name(plan: Plan) -> str:
    names = ("embedding_in_pp_split", "loss_in_pp_split")
    given = [n for n in names if getattr(plan, n)]
    return " and ".join(f"{n} (True)" for n in given)


def _ends_sum(embedding: int, loss: int) -> str:
    return (" + 1 (the embedding)" if embedding else "") + (" + 1 (the loss)" if loss else "")
