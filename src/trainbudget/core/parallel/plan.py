"""A parallel layout ("plan") for training on a cluster, validated in one place.

Degrees multiply to the GPU count: dp * tp * pp * cp = n_gpus (Megatron-LM and torchtitan's
rule; expert parallelism is carved out of dp * cp, as in Megatron-Core). Ranks are ordered
tp-cp-dp-pp from the innermost (Megatron's default order): TP groups are consecutive GPUs (inside
a node when tp <= GPUs per node), PP groups the most spread out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import SpecError
from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.pipeline_split import (
    accounted_stage_layers,
    end_slots,
    split_problems,
)
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.model_spec import ModelSpec

SCHEDULES = ("1f1b", "gpipe", "interleaved")
OFFLOAD_TARGETS = ("none", "cpu", "nvme")
AXES = ("tp", "cp", "dp", "pp")  # innermost first


@dataclass(frozen=True, kw_only=True)
class Plan:
    dp: int = 1
    """Data-parallel degree (replicas x shards; see zero_shard for HSDP)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split of every layer)."""
    pp: int = 1
    """Pipeline stages."""
    pp_layers: tuple[int, ...] = ()
    """Transformer layers of each pipeline stage (GPU), first to last (sum n_layers); () = an
    even split. Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-
    num-layers and torchtitan's pipeline split points (`pipeline_parallel_split_points`) make
    such splits, mostly to lighten the stages that also hold the embedding or the head. With
    vpp > 1 a stage's layers split evenly over its chunks (`pipeline_split`)."""
    embedding_in_pp_split: bool = False
    """Count the embedding as a layer slot of stage 0's first chunk (Megatron-Core's
    --account-for-embedding-in-pipeline-split): without pp_layers the n_layers + slots split
    evenly, so stage 0 holds one transformer layer fewer."""
    loss_in_pp_split: bool = False
    """Count the head and loss as a layer slot of the last stage's last chunk (Megatron-Core's
    --account-for-loss-in-pipeline-split)."""
    cp: int = 1
    """Context-parallel degree: the sequence split across GPUs, attention by ring exchange."""
    ep: int = 1
    """Expert-parallel degree: experts split across ranks of the dp * cp group."""
    zero: int = 0
    """ZeRO stage 0-3 over the data-parallel group (3 = FSDP full sharding)."""
    zero_shard: int = 0
    """HSDP: shard over groups of this many dp ranks, replicate across them; 0 = all of dp."""
    sp: bool = False
    """Sequence parallelism: norms and dropout split along the sequence across the TP group."""
    vpp: int = 1
    """Virtual pipeline stages per GPU (interleaved schedule)."""
    schedule: str = "1f1b"
    micro_batch: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    grad_accum: int = 1
    """Micro-batches per step per data-parallel rank (the pipeline's m)."""
    recompute: str = "none"
    recompute_every: int = 1
    """With recompute 'full': only every K-th layer of a stage is recomputed (its input kept,
    the rest rebuilt in backward); the others keep all their activations (torchtitan's
    per-layer activation checkpointing with `selective_ac_option = K`). 1 = every layer."""
    flash_attention: bool = True
    offload_optimizer: str = "none"
    """Where the fp32 master and optimizer state live: GPU ('none'), CPU or NVMe."""
    offload_params: str = "none"
    """ZeRO-Infinity style parameter offload (needs zero=3)."""

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def shard_group(self) -> int:
        """Ranks ZeRO shards over: dp * cp (Megatron's distributed optimizer) or the HSDP shard."""
        return (self.zero_shard or self.dp) * self.cp

    def stage_layer_counts(self, n_layers: int) -> tuple[int, ...]:
        """Transformer layers of each pipeline stage, first to last: pp_layers, or the even
        split of the layers and of the embedding and loss slots when they are counted."""
        if self.pp_layers:
            return self.pp_layers
        embedding, loss = end_slots(self)
        return accounted_stage_layers(n_layers, pp=self.pp, embedding=embedding, loss=loss)

    def describe(self) -> str:
        pp = f"pp{self.pp}" + (f"[{','.join(map(str, self.pp_layers))}]" if self.pp_layers else "")
        pp += "+emb" * self.embedding_in_pp_split + "+loss" * self.loss_in_pp_split
        parts = [f"dp{self.dp}", f"tp{self.tp}" + ("+sp" if self.sp else ""), pp]
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"zero{self.zero}" + (f"/shard{self.zero_shard}" if self.zero_shard else ""))
        parts.append(f"mb{self.micro_batch}x{self.grad_accum}")
        if self.recompute != "none":
            every = f"/every{self.recompute_every}" if self.recompute_every > 1 else ""
            parts.append(f"recompute-{self.recompute}{every}")
        if self.offload_optimizer != "none":
            parts.append(f"offload-opt-{self.offload_optimizer}")
        if self.offload_params != "none":
            parts.append(f"offload-params-{self.offload_params}")
        return " ".join(parts)


def members_per_node(size: Any, stride: Any, gpus_per_node: int, xp: Ops = SCALAR) -> Any:
    """Members of a group of `size` ranks, `stride` ranks apart, that share a node of
    `gpus_per_node` GPUs: g // stride, at least 1, at most the group size."""
    return xp.maximum(1, xp.minimum(size, gpus_per_node // stride))


def group_span(plan: Plan, axis: str, gpus_per_node: int) -> tuple[int, int]:
    """(group size, members per node) of one parallel axis under the tp-cp-dp-pp rank order.
    A group's members are `stride` ranks apart, stride = product of the inner axes."""
    sizes = {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}
    stride = 1
    for inner in AXES[: AXES.index(axis)]:
        stride *= sizes[inner]
    return sizes[axis], members_per_node(sizes[axis], stride, gpus_per_node)


def _raw_description(plan: Plan) -> str:
    """A description that never fails, for plans whose degrees are not even integers."""
    return " ".join(f"{k}={getattr(plan, k)!r}" for k in ("dp", "tp", "pp", "cp", "zero"))


def _schedule_problems(plan: Plan) -> list[str]:
    """The pipeline schedule's rules: virtual stages need a pipeline and the interleaved
    schedule, and that schedule needs them and whole rounds of pp micro-batches."""
    problems = []
    if plan.vpp > 1 and plan.pp == 1:
        problems.append(
            f"vpp ({plan.vpp}) > 1 needs pp > 1 (virtual stages interleave a pipeline's stages)"
        )
    if plan.schedule not in SCHEDULES:
        problems.append(f"schedule ({plan.schedule!r}) must be one of {', '.join(SCHEDULES)}")
    elif plan.schedule == "interleaved" and plan.vpp == 1:
        problems.append(
            f"vpp ({plan.vpp}) must be > 1 for schedule 'interleaved' (it interleaves virtual "
            "stages per GPU)"
        )
    elif plan.schedule != "interleaved" and plan.vpp > 1:
        problems.append(
            f"vpp ({plan.vpp}) needs schedule 'interleaved', not {plan.schedule!r} (only the "
            "interleaved schedule runs virtual stages)"
        )
    if plan.schedule == "interleaved" and plan.grad_accum % plan.pp:
        problems.append(
            f"grad_accum ({plan.grad_accum}) must be a multiple of pp ({plan.pp}) for the "
            "interleaved schedule (Megatron's rule)"
        )
    return problems


def layout_problems(
    plan: Plan, *, n_gpus: int, seq_len: int, global_batch: int | None = None
) -> list[str]:
    """The rules that need no architecture: degrees, the GPU product, ZeRO, SP, schedule,
    batch, recomputation and offload. validate_plan adds the model's rules."""
    problems: list[str] = []
    for name in (
        "dp",
        "tp",
        "pp",
        "cp",
        "ep",
        "vpp",
        "micro_batch",
        "grad_accum",
        "recompute_every",
    ):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} ({value!r}) must be a positive integer")
    if problems:
        return problems
    if plan.n_gpus != n_gpus:
        problems.append(
            f"dp({plan.dp}) * tp({plan.tp}) * pp({plan.pp}) * cp({plan.cp}) = {plan.n_gpus} "
            f"!= gpus({n_gpus})"
        )
    if plan.zero not in (0, 1, 2, 3):
        problems.append(f"zero ({plan.zero}) must be 0, 1, 2 or 3")
    if plan.zero_shard and plan.zero == 0:
        problems.append(
            f"zero_shard ({plan.zero_shard}) needs zero > 0 (zero 0 shards nothing: give "
            "--zero 1, 2 or 3)"
        )
    elif plan.zero_shard and plan.dp % plan.zero_shard:
        problems.append(f"zero_shard ({plan.zero_shard}) must divide dp ({plan.dp})")
    if plan.sp and plan.tp == 1:
        problems.append("sp needs tp > 1 (it splits along the TP group)")
    problems += _schedule_problems(plan)
    if seq_len % (2 * plan.cp) and plan.cp > 1:
        problems.append(
            f"seq_len ({seq_len}) must be divisible by 2 * cp ({2 * plan.cp}) (load-balanced "
            "causal ring attention splits the sequence into 2 * cp chunks)"
        )
    if global_batch is not None and global_batch != plan.global_batch:
        problems.append(
            f"global_batch ({global_batch}) != micro_batch ({plan.micro_batch}) * grad_accum "
            f"({plan.grad_accum}) * dp ({plan.dp}) = {plan.global_batch}"
        )
    if plan.recompute not in RECOMPUTE_KINDS:
        problems.append(f"recompute ({plan.recompute!r}) must be one of {RECOMPUTE_KINDS}")
    elif plan.recompute_every > 1 and plan.recompute != "full":
        problems.append(
            f"recompute_every ({plan.recompute_every}) > 1 needs recompute 'full' (it picks "
            "which layers are fully recomputed)"
        )
    for name in ("offload_optimizer", "offload_params"):
        if getattr(plan, name) not in OFFLOAD_TARGETS:
            problems.append(f"{name} ({getattr(plan, name)!r}) must be none, cpu or nvme")
    if plan.offload_params != "none" and plan.zero != 3:
        problems.append("offload_params needs zero = 3 (parameters are gathered per layer)")
    return problems


def validate_layout(
    plan: Plan, *, n_gpus: int, seq_len: int, global_batch: int | None = None
) -> None:
    """layout_problems as one SpecError (for a bare parameter count, which has no layers)."""
    problems = layout_problems(plan, n_gpus=n_gpus, seq_len=seq_len, global_batch=global_batch)
    if problems:
        raise SpecError("plan", _raw_description(plan), "; ".join(problems))


def _pp_layers_problems(plan: Plan, n_layers: int) -> list[str]:
    """An uneven split: one positive count per stage, summing to the model's layers; with
    vpp or the embedding and loss counted, `pipeline_split`'s rules too."""
    counts = plan.pp_layers
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        return [f"pp_layers ({counts!r}) must be positive integers"]
    problems = []
    if len(counts) != plan.pp:
        problems.append(f"pp_layers ({counts!r}) must have one entry per stage (pp = {plan.pp})")
    if sum(counts) != n_layers:
        problems.append(f"pp_layers ({counts!r}) sum to {sum(counts)}, not n_layers ({n_layers})")
    return problems or split_problems(plan, n_layers)


def validate_plan(
    plan: Plan, model: ModelSpec, *, n_gpus: int, seq_len: int, global_batch: int | None = None
) -> None:
    """Every rule a layout must meet; one SpecError lists all that fail, with their factors."""
    problems = layout_problems(plan, n_gpus=n_gpus, seq_len=seq_len, global_batch=global_batch)
    if problems and problems[0].endswith("must be a positive integer"):
        raise SpecError("plan", _raw_description(plan), "; ".join(problems))
    if model.n_heads % plan.tp:
        problems.append(f"n_heads ({model.n_heads}) must be divisible by tp ({plan.tp})")
    if model.n_kv_heads % plan.tp and plan.tp % model.n_kv_heads:
        # Megatron replicates K/V heads when tp > n_kv_heads; otherwise they must split evenly
        problems.append(
            f"n_kv_heads ({model.n_kv_heads}) and tp ({plan.tp}) must divide one another"
        )
    if model.vocab_size < plan.tp:
        problems.append(f"vocab_size ({model.vocab_size}) must be at least tp ({plan.tp})")
    stages = plan.pp * plan.vpp
    if plan.pp_layers:
        problems += _pp_layers_problems(plan, model.n_layers)
    elif plan.embedding_in_pp_split or plan.loss_in_pp_split:
        problems += split_problems(plan, model.n_layers)
    elif model.n_layers % stages:
        problems.append(
            f"n_layers ({model.n_layers}) must be divisible by pp ({plan.pp}) * vpp ({plan.vpp})"
        )
    if model.is_moe:
        if model.n_experts % plan.ep:
            problems.append(f"n_experts ({model.n_experts}) must be divisible by ep ({plan.ep})")
        if (plan.dp * plan.cp) % plan.ep:
            problems.append(f"ep ({plan.ep}) must divide dp ({plan.dp}) * cp ({plan.cp})")
    elif plan.ep != 1:
        problems.append(f"ep ({plan.ep}) must be 1 for a dense model")
    if plan.recompute == "selective-op" and op_checkpoint.unsupported(model):
        problems.append(f"recompute 'selective-op' is {op_checkpoint.unsupported(model)}")
    if problems:
        raise SpecError("plan", plan.describe(), "; ".join(problems))
