"""Data-parallel engines as data: what the engine that runs a ZeRO stage keeps on each GPU beside
the sharded model state -- the choices that move the peak. A framework row
(`frameworks.Framework.engines`) names one engine for each ZeRO stage; the per-GPU phase model
(`core.parallel.memory.gpu_peak`) reads their columns, for one plan or, column by column, for a
grid.

Each row cites the code whose behaviour it records."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.loss_kernels import (  # noqa: F401  (their home before; importers)
    LOSS_KERNELS,
    LossKernel,
    get_loss_kernel,
)


@dataclass(frozen=True, kw_only=True)
class Engine:
    """What a data-parallel engine holds beside the model state its ZeRO stage shards. A row
    states what differs from the defaults: DDP-like accumulation without sync, a fused
    update, nothing gathered or bucketed, DTensor's sequence parallelism, no pipelining."""

    name: str
    gradient_buckets: bool = False
    """A flat copy of every (unsharded) gradient in the all-reduce buckets, allocated once and
    kept for the whole run (DDP without gradient_as_bucket_view)."""
    buckets_in_flight: int = 0
    """Size-capped reduction buckets alive at once (the framework's `bucket_bytes` each): one
    reduces while the next fills. 0: the engine reduces per tensor or per unit."""
    shards_parameters: bool = False
    """Parameters sharded at rest whatever the ZeRO stage the engine stands in for (FSDP2
    running ZeRO-2 keeps its shard beside the gathered copy)."""
    whole_tensor_shards: bool = False
    """The optimizer state is sharded by whole parameters, dealt largest first to the rank
    owning the fewest elements so far (`core.parallel.memory.rank_peak.whole_tensor_shares`),
    not cut evenly."""
    gathered_until_backward: bool = False
    """Every parameter gathered (unsharded) from the start of forward to the end of backward:
    at backward start a rank holds the whole model's weights beside its shard."""
    unit_backward: bool = False
    """FSDP2's units (each block, and the root: embeddings, final norm, head) in backward: the
    last block's backward holds its unsharded gradients before their reduce-scatter and the
    root's gradients stay unsharded until the root's post-backward at the end."""
    layer_gather: bool = False
    """ZeRO-3 as DeepSpeed and the paper run it: the layer in use and the one prefetched
    gathered in full, and that layer's unsharded gradient before its reduce-scatter."""
    accumulates_unsharded: bool = True
    """With gradient accumulation, gradients of the earlier micro-batches are kept unsharded
    and unreduced until the last one (DDP's no_sync, FSDP2 without gradient sync); False: a
    sharded engine reduce-scatters every micro-batch and accumulates its shard."""
    accumulates_in_reduce_dtype: bool = False
    """Gradients accumulated unsharded across micro-batches (`accumulates_unsharded`, or a
    pipeline's `pipeline_keeps_unsharded`) are held in the framework's reduction dtype
    (`Framework.grad_reduce_bytes`) where it differs from the gradients' own: FSDP2 with
    MixedPrecisionPolicy(reduce_dtype=fp32) over 16-bit compute upcasts each unsharded gradient
    at its first backward without sync and adds the later ones into that copy (torch 2.13
    fsdp/_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed,
    accumulate_unsharded_grad_if_needed; init_dtype_attrs drops reduce_dtype only where it
    equals param_dtype). False: they accumulate in the gradient dtype (DDP's no_sync)."""
    fused_update: bool = True
    """The optimizer update runs torch's fused kernel where the optimizer has one and there
    are no fp32 master weights (no per-tensor scratch); False: the single-tensor update."""
    sp_keeps_gathered_input: bool = True
    """Under sequence parallelism the column-parallel linears save the all-gathered input (as
    PyTorch's DTensor runs SP) rather than their sequence shard (Megatron-LM re-gathers it in
    backward: Korthikanti et al. 2022, Sec. 4.2.2)."""
    torch_pipelining: bool = False
    """Pipeline stages as torch.distributed.pipelining runs them (torch 2.13 stage.py): a
    receive buffer per micro-batch for each input received and each gradient sent, allocated
    once and kept; every micro-batch's output kept to merge at the step's end; each received
    input's gradient kept until the next step. False: Megatron-style point-to-point transfers,
    whose buffers live while in use, the loss taken on the last stage and no output kept
    (megatron/core/pipeline_parallel/schedules.py)."""
    pipeline_keeps_unsharded: bool = False
    """Under pipeline parallelism the stage's parameters stay gathered for the whole step and
    its gradients are reduced once (torch.distributed.pipelining with FSDP2)."""
    keeps_reduced_grad_shard: bool = False
    """Each bucket's reduce-scatter writes the rank's gradient shard into a buffer of its own
    (1/dp of the gradients, in the gradient dtype), kept from the last micro-batch's backward
    through the optimizer step beside the whole gradient buffer the micro-batches accumulate
    in; False: the shard is a view of that buffer (Megatron-Core's distributed optimizer)."""
    zero3_reduce_buffer: bool = False
    """Under ZeRO-3, one size-capped reduction buffer (the framework's `bucket_bytes`)
    allocated once beside the gathered layers, into which gradients are copied before their
    reduce-scatter (DeepSpeed's contiguous_gradients IPG buffer)."""
    offload_takes_grads: bool = False
    """With the optimizer offloaded, the gradient partitions of ZeRO-2/3 live on the host
    beside it (DeepSpeed: the optimizer's device is the CPU, and so is its flat gradient
    partition buffer), not on the GPU."""
    source: str


DEEPSPEED_ZERO_SOURCE = (
    "DeepSpeed 0.19.2 deepspeed/runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3: "
    "self.device is the CPU when offload_optimizer is set (line 315) and "
    "grad_partitions_flat_buffer, the ranks' gradient partitions, is allocated on it (pinned, "
    "line 637); with contiguous_gradients (the default) each IPG bucket's buffer is a "
    "torch.empty of reduce_bucket_size elements on the GPU for the whole run (line 628); "
    "stage_1_and_2.py under cpu_offload accumulates the partitions in CPU fp32 buffers too"
)


DDP_SOURCE = (
    "torch.nn.parallel.DistributedDataParallel with gradient_as_bucket_view=False (the "
    "default): the Reducer's buckets hold a copy of the gradients for the whole run; torch's "
    "documentation of that argument: as views 'the saved memory size will be equal to the "
    "total gradients size'"
)
FSDP2_SOURCE = (
    "torch FSDP2 fully_shard on every block and on the root: each unit's parameters gathered "
    "for its forward and again for its backward, freed after each (reshard_after_forward=True); "
    "its gradients reduce-scattered at its post-backward (torch 2.13 "
    "fsdp/_fully_shard/_fsdp_param_group.py)"
)
PIPELINING_FSDP_SOURCE = (
    "torch 2.13 distributed/pipelining/stage.py: backward_one_chunk calls "
    "set_reshard_after_backward(False) and set_requires_gradient_sync(False) on an FSDP2 stage "
    "module for every micro-batch, and the REDUCE_GRAD action after the last backward "
    "(perform_reduce_grad) reshards and reduces once"
)

APEX_DISTRIBUTED_ADAM_SOURCE = (
    "Apex DistributedFusedAdam (apex f3f0492, 2024-04, contrib/optimizers/"
    "distributed_fused_adam.py), as NeMo 1.x runs it with megatron_amp_O2 (NeMo r2.0.0rc1 "
    "megatron_base_model.py setup_optimization: contiguous_grad_buffer): _init_grad_buffer "
    "allocates one buffer for every bucket's whole gradients in grad_sync_dtype, and the "
    "parameters are views of a contiguous param buffer; NeMo's no_sync keeps the micro-batches "
    "accumulating in it unreduced until the last; _start_bucket_grad_sync reduce-scatters each "
    "bucket into sync_grads_shard, a torch.empty of 1/dp of the bucket, which "
    "_finish_bucket_grad_sync keeps as grads_shard until zero_grad clears the buckets; the "
    "buckets are views of the buffer, so no bucket copy is in flight"
)

ENGINES = MappingProxyType(
    {
        e.name: e
        for e in (
            Engine(
                name="reference",
                fused_update=False,
                sp_keeps_gathered_input=False,
                source="the reference step `trainbudget profile` measures on one device "
                "(core.single.peak_memory): no wrapper, torch's single-tensor update; with "
                "tensor or pipeline parallelism and no data parallelism, the framework-neutral "
                "(Megatron-style) sequence parallelism and point-to-point pipeline",
            ),
            Engine(
                name="single",
                torch_pipelining=True,
                source="the trainer with no data-parallel wrapper (one process, or tensor or "
                "pipeline parallelism alone): torch's fused Adam/AdamW kernel where it applies "
                "(model/optimizers.py)",
            ),
            Engine(
                name="ddp",
                torch_pipelining=True,
                gradient_buckets=True,
                source=DDP_SOURCE,
            ),
            Engine(
                name="ddp-bucket-view",
                torch_pipelining=True,
                source="torch.nn.parallel.DistributedDataParallel(gradient_as_bucket_view="
                "True): the gradients are views into the buckets, so no second copy (torch "
                "2.13 documentation of that argument)",
            ),
            Engine(
                name="ddp+zero-redundancy",
                torch_pipelining=True,
                gradient_buckets=True,
                whole_tensor_shards=True,
                source=f"{DDP_SOURCE}; torch.distributed.optim.ZeroRedundancyOptimizer "
                "(torch 2.13 _partition_parameters): parameters sorted by size, largest first, "
                "each to the rank with the fewest elements so far",
            ),
            Engine(
                name="fsdp2",
                torch_pipelining=True,
                shards_parameters=True,
                accumulates_in_reduce_dtype=True,
                unit_backward=True,
                pipeline_keeps_unsharded=True,
                source=f"{FSDP2_SOURCE}; the trainer accumulates without gradient sync "
                f"(train.loop); {PIPELINING_FSDP_SOURCE}",
            ),
            Engine(
                name="fsdp2-no-reshard",
                torch_pipelining=True,
                shards_parameters=True,
                accumulates_in_reduce_dtype=True,
                gathered_until_backward=True,
                unit_backward=True,
                pipeline_keeps_unsharded=True,
                source="torch FSDP2 fully_shard(reshard_after_forward=False): parameters "
                "gathered in forward stay gathered until each unit's post-backward reshards "
                "them (torch 2.13 fsdp/_fully_shard/_fsdp_param_group.py); "
                f"{PIPELINING_FSDP_SOURCE}",
            ),
            Engine(
                name="fsdp2-sync-every-micro-batch",
                torch_pipelining=True,
                shards_parameters=True,
                accumulates_in_reduce_dtype=True,
                unit_backward=True,
                accumulates_unsharded=False,
                pipeline_keeps_unsharded=True,
                source=f"{FSDP2_SOURCE}; torchtitan's train_step runs each micro-batch with "
                "gradient sync on, so every backward reduce-scatters into the sharded "
                f"gradient (torchtitan 0.2.2 trainer.py); {PIPELINING_FSDP_SOURCE}",
            ),
            Engine(
                name="deepspeed-zero",
                buckets_in_flight=2,
                layer_gather=True,
                accumulates_unsharded=False,
                sp_keeps_gathered_input=False,
                zero3_reduce_buffer=True,
                offload_takes_grads=True,
                source="the zero-buckets row as DeepSpeed's ZeRO runs it, with two of its "
                f"buffers placed: {DEEPSPEED_ZERO_SOURCE}",
            ),
            Engine(
                name="apex-distributed-adam",
                keeps_reduced_grad_shard=True,
                sp_keeps_gathered_input=False,
                source=APEX_DISTRIBUTED_ADAM_SOURCE,
            ),
            Engine(
                name="zero-buckets",
                buckets_in_flight=2,
                layer_gather=True,
                accumulates_unsharded=False,
                sp_keeps_gathered_input=False,
                source="ZeRO as Rajbhandari et al. 2020 (arXiv 1910.02054) describe it and "
                "DeepSpeed and Megatron-Core run it: gradients reduced in size-capped buckets "
                "from a contiguous gradient buffer (one bucket reducing while the next fills: "
                "DeepSpeed stage_1_and_2.py reduce_bucket_size, Megatron-Core "
                "distributed/param_and_grad_buffer.py), ZeRO-2/3 partitions accumulated per "
                "micro-batch; ZeRO-3 fetches a layer and prefetches the next (DeepSpeed "
                "stage3 PartitionedParameterCoordinator); fused Adam (apex/TE FusedAdam, "
                "DeepSpeed FusedAdam); SP saves the sequence shard (Megatron-LM "
                "tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication)",
            ),
        )
    }
)


ZERO_STAGES = 4


def check_engines(owner: str, names: tuple[str, ...]) -> None:
    """A framework's engines: one for a GPU without a data-parallel wrapper, then one for each
    ZeRO stage 0-3, each a row of `ENGINES`."""
    if len(names) != 1 + ZERO_STAGES:
        raise SpecError(f"{owner}.engines", names, "must name 5 engines: alone, ZeRO 0, 1, 2, 3")
    for name in names:
        if name not in ENGINES:
            raise SpecError(f"{owner}.engines", name, "must be one of " + ", ".join(ENGINES))


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise unknown_key("engine", name, list(ENGINES))
    return ENGINES[name]


ENGINE_COLUMNS = (
    "gradient_buckets",
    "buckets_in_flight",
    "shards_parameters",
    "whole_tensor_shards",
    "gathered_until_backward",
    "unit_backward",
    "layer_gather",
    "accumulates_unsharded",
    "accumulates_in_reduce_dtype",
    "fused_update",
    "sp_keeps_gathered_input",
    "pipeline_keeps_unsharded",
    "torch_pipelining",
    "keeps_reduced_grad_shard",
    "zero3_reduce_buffer",
    "offload_takes_grads",
)
"""The columns the phase model reads (each a number or a bool)."""
