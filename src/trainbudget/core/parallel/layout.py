"""A plan as numbers: the fields every step and memory term reads, with the string choices as
integer codes, so one term function serves a `Plan` (plain ints and bools) and the planner's
grid (one numpy array per field, plan i = element i of each)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainbudget.core.parallel.plan import OFFLOAD_TARGETS, SCHEDULES, Plan
from trainbudget.core.single.flops import RECOMPUTE_KINDS

# code = index into the tuple
RECOMPUTE_CODES = RECOMPUTE_KINDS  # ("none", "selective", "full", "selective-op")
SCHEDULE_CODES = SCHEDULES  # ("1f1b", "gpipe", "interleaved")
OFFLOAD_CODES = OFFLOAD_TARGETS  # ("none", "cpu", "nvme")
NONE, SELECTIVE, FULL, SELECTIVE_OP = (
    RECOMPUTE_CODES.index(k) for k in ("none", "selective", "full", "selective-op")
)
ONE_F_ONE_B, GPIPE, INTERLEAVED = (
    SCHEDULE_CODES.index(k) for k in ("1f1b", "gpipe", "interleaved")
)
ON_GPU, TO_CPU, TO_NVME = (OFFLOAD_CODES.index(k) for k in ("none", "cpu", "nvme"))


_INT_FIELDS = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "zero",
    "zero_shard",
    "vpp",
    "micro_batch",
    "grad_accum",
    "recompute_every",
)
STAGE_LAYER_FIELDS = (
    "first_layers",
    "middle_layers",
    "last_layers",
    "max_layers",
    "embedding_slot",
    "loss_slot",
)
"""An uneven pipeline split as the numbers the terms read; 0 = the even split (of the layers
alone: the embedding and the loss not counted as layer slots)."""


@dataclass(frozen=True)
class PlanNumbers:
    """One plan (numbers) or many (equal-length arrays); see `Plan` for each field's meaning.
    `zero_shard` 0 means ZeRO shards over the whole data-parallel group (no HSDP)."""

    dp: Any
    tp: Any
    pp: Any
    cp: Any
    ep: Any
    zero: Any
    zero_shard: Any
    sp: Any
    vpp: Any
    schedule: Any
    micro_batch: Any
    grad_accum: Any
    recompute: Any
    recompute_every: Any
    offload_optimizer: Any
    offload_params: Any
    flash: Any
    first_layers: Any = 0
    middle_layers: Any = 0
    """The largest stage strictly between the first and the last."""
    last_layers: Any = 0
    max_layers: Any = 0
    """The largest stage (it sets the step time and the bubble)."""
    embedding_slot: Any = 0
    """1 when the embedding is counted as a layer slot of stage 0 (Plan.embedding_in_pp_split):
    the even split then gives stage 0 one layer fewer (`pipeline_split`)."""
    loss_slot: Any = 0
    """1 when the loss is counted as a layer slot of the last stage (Plan.loss_in_pp_split)."""

    @classmethod
    def of(cls, plan: Plan) -> PlanNumbers:
        return cls(
            dp=plan.dp,
            tp=plan.tp,
            pp=plan.pp,
            cp=plan.cp,
            ep=plan.ep,
            zero=plan.zero,
            zero_shard=plan.zero_shard,
            sp=plan.sp,
            vpp=plan.vpp,
            schedule=SCHEDULE_CODES.index(plan.schedule),
            micro_batch=plan.micro_batch,
            grad_accum=plan.grad_accum,
            recompute=RECOMPUTE_CODES.index(plan.recompute),
            recompute_every=plan.recompute_every,
            offload_optimizer=OFFLOAD_CODES.index(plan.offload_optimizer),
            offload_params=OFFLOAD_CODES.index(plan.offload_params),
            flash=plan.flash_attention,
            **_stage_layer_numbers(plan),
        )

    @classmethod
    def of_many(cls, plans: list[Plan]) -> PlanNumbers:
        """A grid holding `plans` (numpy arrays, one element per plan)."""
        import numpy as np

        rows = [cls.of(p) for p in plans]
        return cls(**{f: np.array([getattr(r, f) for r in rows]) for f in cls.__dataclass_fields__})

    def recomputed_layers(self, layers: Any, from_first: bool = True) -> Any:
        """Layers of a stage of `layers` whose activations full recomputation rebuilds: every
        recompute_every-th one, starting with the first (ceil(layers / K)), or counted from
        1 as torchtitan counts, the K-th, 2K-th, ... (floor(layers / K)): the framework's
        convention (`Framework.recompute_every_from_first`)."""
        if from_first:
            return (layers + self.recompute_every - 1) // self.recompute_every
        return layers // self.recompute_every

    def stage_layers(self, n_layers: int, stage: str) -> Any:
        """Layers of a stage ('first', 'middle', 'last' or 'max': the largest); the even split
        n_layers // pp unless the plan gives its own (Plan.pp_layers)."""
        given = getattr(self, f"{stage}_layers")
        return given + (given == 0) * self._even_layers(n_layers, stage)

    def _even_layers(self, n_layers: int, stage: str) -> Any:
        """A stage's layers under the even split: n_layers // pp, or with the embedding and
        loss counted as slots (n_layers + emb + loss) // pp less the stage's own end slots
        (`pipeline_split.accounted_stage_layers`); 'middle' is the last stage when pp = 2."""
        emb, loss = self.embedding_slot, self.loss_slot
        if isinstance(emb, int) and isinstance(loss, int) and not (emb or loss):
            return n_layers // self.pp
        slots = (n_layers + emb + loss) // self.pp
        if stage in ("first", "last"):
            return slots - (emb if stage == "first" else loss)
        # pp = 2 has no middle stage ('middle' reads the last) and its largest is an end stage
        two_stages = slots - (loss if stage == "middle" else emb * loss)
        return (self.pp > 2) * slots + (self.pp <= 2) * two_stages

    @property
    def shard_dp(self) -> Any:
        """Data-parallel ranks one ZeRO shard group spans (all of dp unless HSDP)."""
        return self.zero_shard + (self.zero_shard == 0) * self.dp

    def take(self, index: Any) -> PlanNumbers:
        """The plans at `index` of a grid (a numpy index array)."""
        return PlanNumbers(**{f: _at(getattr(self, f), index) for f in self.__dataclass_fields__})

    def take_rows(self, index: Any) -> PlanNumbers:
        """Rows `index` (the last axis) of a product grid (`search.product_grid`): the fields
        that vary along it indexed, the others (length 1 there, or one number) kept."""
        return PlanNumbers(
            **{
                f: v[..., index] if getattr(v, "ndim", 0) and v.shape[-1] > 1 else v
                for f, v in vars(self).items()
            }
        )

    def rows(self, start: int, stop: int) -> PlanNumbers:
        """Plans start..stop-1 of a grid (views)."""
        return PlanNumbers(**{f: _at(v, slice(start, stop)) for f, v in vars(self).items()})

    def __len__(self) -> int:
        return len(self.dp)

    def plan(self, i: int) -> Plan:
        """Plan i of a grid."""
        ints = {name: int(_at(getattr(self, name), i)) for name in _INT_FIELDS}
        return Plan(
            **ints,
            sp=bool(self.sp[i]),
            schedule=SCHEDULE_CODES[int(self.schedule[i])],
            recompute=RECOMPUTE_CODES[int(self.recompute[i])],
            offload_optimizer=OFFLOAD_CODES[int(self.offload_optimizer[i])],
            offload_params=OFFLOAD_CODES[int(_at(self.offload_params, i))],
            flash_attention=bool(_at(self.flash, i)),
            pp_layers=self._pp_layers(i),
            embedding_in_pp_split=bool(_at(self.embedding_slot, i)),
            loss_in_pp_split=bool(_at(self.loss_slot, i)),
        )

    def _pp_layers(self, i: int) -> tuple[int, ...]:
        """Plan i's split back from its numbers: exact for the even split and up to 3 stages."""
        first, middle, last = (int(_at(getattr(self, f), i)) for f in STAGE_LAYER_FIELDS[:3])
        pp = int(self.pp[i])
        if first == 0:
            return ()
        if pp > 3:
            raise ValueError(f"plan {i}: an uneven split of pp ({pp}) > 3 stages is not kept")
        return (*(first, middle)[: pp - 1], last) if pp > 1 else (first,)

    def plans(self) -> list[Plan]:
        return [self.plan(i) for i in range(len(self))]


def _stage_layer_numbers(plan: Plan) -> dict[str, int]:
    pp_layers = plan.pp_layers
    slots = {
        "embedding_slot": int(plan.embedding_in_pp_split),
        "loss_slot": int(plan.loss_in_pp_split),
    }
    if not pp_layers:
        return dict.fromkeys(STAGE_LAYER_FIELDS, 0) | slots
    inner = pp_layers[1:-1]
    return slots | {
        "first_layers": pp_layers[0],
        "middle_layers": max(inner) if inner else pp_layers[-1],
        "last_layers": pp_layers[-1],
        "max_layers": max(pp_layers),
    }


def as_numbers(plan: Plan | PlanNumbers) -> PlanNumbers:
    return plan if isinstance(plan, PlanNumbers) else PlanNumbers.of(plan)


def _at(value: Any, index: Any) -> Any:
    """A grid field's element(s) at `index`: a field the whole grid shares is held as one
    number (`enumerate_plan_arrays`), the same for every plan."""
    return value[index] if getattr(value, "ndim", 0) else value


GRID_CHUNK = 8192
"""Plans evaluated at a time. Each of the terms' temporary arrays (8 bytes a plan) is then at
most 64 KiB, which malloc serves again and again from memory it keeps, where a whole grid's
arrays (400 KiB each for 53,000 plans) are mapped fresh from the kernel at every operation
and page-faulted in: about half of the grid's evaluation time. Every term is element-wise,
so the chunks give the numbers the whole grid would."""


def in_chunks(fn: Callable[..., Any], a: PlanNumbers, *per_plan: Any) -> Any:
    """fn(plans, *per_plan) (a numpy array, one element per plan) over grid `a` and arrays
    holding one element per plan of it, GRID_CHUNK plans at a time, joined."""
    if len(a) <= GRID_CHUNK:
        return fn(a, *per_plan)
    import numpy as np

    return np.concatenate(
        [
            fn(a.rows(i, i + GRID_CHUNK), *(v[i : i + GRID_CHUNK] for v in per_plan))
            for i in range(0, len(a), GRID_CHUNK)
        ]
    )
