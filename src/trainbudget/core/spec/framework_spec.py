"""What a training framework row holds (`Framework`: the conventions of a stack that change
memory and step time for the same model and layout), the framework-neutral row `GENERIC`, and
the constants the rows share; the rows themselves and their table are in
`core.spec.frameworks`."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.engines import check_engines
from trainbudget.core.spec.fp8_recipes import get_fp8_recipe
from trainbudget.core.spec.hardware import ATTENTION_KERNELS
from trainbudget.core.spec.loss_kernels import get_loss_kernel
from trainbudget.core.units import MB


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    grad_reduce_bytes: int | None = None
    """Bytes per element of the data-parallel gradient reduction (reduce-scatter / all-reduce);
    None: the precision's gradient bytes."""
    main_grad_bytes: int | None = None
    """Bytes per parameter of the gradient buffer kept across micro-batches (Megatron's fp32
    `main_grad`); None: the precision's gradient bytes."""
    master_bytes: int | None = None
    """Bytes per parameter of the optimizer's master copy where the precision keeps one;
    None: the precision's (4, fp32). 2: the 16-bit remainders that with the bf16 weight make
    the fp32 value (Apex DistributedFusedAdam's store_param_remainders); 0: none (the
    optimizer's state in the model's dtype)."""
    state_bytes: int | None = None
    """Bytes per element of the optimizer's moments; None: the precision's (4, fp32)."""
    fp8_weight_cache_bytes: int = 0
    """Under `--precision fp8`, bytes per element of every FP8-recipe linear weight kept beside
    the 16-bit weight for the whole run: Transformer Engine casts each weight once per step
    into a cached FP8 workspace with its transpose (1 + 1 bytes) and reuses it for the later
    micro-batches; 0: no such copy (FP8 primary weights, or a recipe that casts per use)."""
    reduce_every_micro_batch: bool = False
    """Sharded gradients (ZeRO-2/3, FSDP) are reduce-scattered after every micro-batch's
    backward, not once per step; ZeRO 0-1 still reduce once."""
    regathers_for_recompute: bool = False
    """ZeRO-3 gathers each layer's weights a third time per micro-batch under full
    recomputation: the recomputed forward fires the sharding hooks of every sub-module again.
    FSDP does not: its unit wraps the checkpointed block, whose weights the backward has
    gathered already when the recomputation runs."""
    gather_copy_out: bool = False
    """ZeRO-3: each gathered layer is copied out of the all-gather buffer into its parameters
    on the compute stream (FSDP2's split_with_sizes_copy: the unsharded bytes read and
    written, in series with the compute). FSDP1 and DeepSpeed use views of the buffer."""
    pipeline_scatter_gather: bool = False
    """Without sequence parallelism, each TP rank sends 1/tp of the activation to the next
    pipeline stage and the receiving TP group all-gathers the pieces over NVLink (Narayanan et
    al. 2021, Sec. 4.1, 'scatter/gather optimization'). With SP the message is 1/tp already."""
    zero3_serial_per_tensor: bool = False
    """ZeRO-3 gathers and reduce-scatters every parameter tensor on its own (a layer's weights
    and biases, norms included: `params.layer_parameter_tensors`), each gather issued after a
    device-wide synchronize, so no collective overlaps compute: the step pays all of them."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives pipelined with the GEMMs beside them (Megatron-Core's
    --tp-comm-overlap with Transformer Engine's userbuffers, NeMo's ub_tp_comm_overlap; off by
    default in both), timed by `comm_time.tp_exposed_when_pipelined`; `--tp-comm-overlap`
    turns it on for any row."""
    param_gather_after_step: bool = False
    """ZeRO-1/2: the gather of the updated weights runs inside the optimizer step, after the
    update, with nothing to hide behind (DeepSpeed's stage_1_and_2 step: all_gather_dp_groups;
    nanotron's ZeroDistributedOptimizer.step: _all_gather_params). False: it overlaps the next
    step's first forward (Megatron-Core's overlap_param_gather, on in NeMo)."""
    param_gather_bytes: int | None = None
    """Bytes per element of that gather; None: the precision's weight bytes (nanotron gathers
    its fp32 master weights: 4)."""
    offload_update_then_copy: bool = False
    """Under optimizer offload, the updated weights are converted to 16-bit on the host and
    copied to the GPU after the host update ends (DeepSpeed's ZeRO step), not tile by tile
    beside it; `step_time._weights_up_seconds` times both."""
    offload_grad_bytes: int | None = None
    """Bytes per parameter the gradients' trip to the host moves over the link, exposed; None:
    the precision's gradient bytes (one copy down)."""
    fp8_param_gather: bool = False
    """Under `--precision fp8`, the data-parallel gathers of the FP8-recipe linear weights
    (ZeRO-1/2's gather of the updated weights, ZeRO-3 / FSDP's per-layer gathers) move one
    byte per element, the weights' FP8 copies, not their 16-bit values: Megatron-Core's
    fp8_param_gather ('reducing the all-gather overhead by half', NeMo's communication-overlap
    docs), torchao's float8 all-gather under FSDP2 (torchtitan's enable_fsdp_float8_all_gather,
    off by default); `--fp8-param-gather` turns it on for any row."""
    sharded_grads_all_reduced_after_backward: bool = False
    """ZeRO-1/2: the gradients are all-reduced whole once the last backward has ended, not
    reduce-scattered in buckets during it (nanotron with fp32 accumulation under ZeRO: no DDP
    wrapper, FP32GradientAccumulator.sync_gradients_across_dp(reduce_scatter=False) after the
    pipeline): exposed in full."""
    grad_accumulation_bytes: float = 0.0
    """HBM bytes per parameter each micro-batch's backward moves to accumulate its gradients
    outside the GEMMs, in series with the compute (nanotron's FP32GradientAccumulator: after
    each backward, per parameter, fp32_grad.add_(bf16 grad): 2 + 4 + 4 = 10). 0: the GEMM
    accumulates in place (Megatron's gradient_accumulation_fusion) or nothing is counted."""
    selective_reruns_fused_attention: bool = False
    """`--recompute selective` wraps the fused attention kernel in an activation checkpoint,
    so its forward runs again in the backward even where it keeps no scores (Megatron-Core's
    checkpoint_core_attention); False: selective recomputation costs nothing under a fused
    kernel, whose backward recomputes the scores anyway."""
    grad_accumulation_first_free: bool = False
    """The first micro-batch's gradients are assigned, not added (PyTorch's AccumulateGrad
    keeps the first .grad it is given): `grad_accumulation_bytes` counts the m - 1 others."""
    optimizer_bytes_per_param: float | None = None
    """HBM bytes per owned parameter of the whole optimizer step where the framework's own
    passes are known (the update, the gradient checks and casts, the copy back); None: the
    fused update's (`step_time.update_bytes_per_param`)."""
    overlaps_p2p_interleaved: bool = False
    """Under the interleaved schedule (vpp > 1) the pipeline's sends and receives of the 1F1B
    steady state run beside the compute of other chunks; those of the warm-up and the
    cool-down stay exposed (Megatron-Core's overlap_p2p_comm, `comm_time.p2p_exposed_share`).
    Off: every send waits."""
    recompute_every_from_first: bool = True
    """How `--recompute-every K` counts the layers it recomputes: from the first (layers 1,
    K + 1, ...: ceil(L / K) of a stage's L, the convention of trainbudget's own plans), or, as
    torchtitan's layer-selective checkpointing counts, the K-th, 2K-th, ... (floor(L / K)).
    Megatron has no every-K-th policy: its --recompute-method block recomputes the first N
    layers of each stage (emit.megatron translates)."""
    kernels_per_layer_forward: int = 48
    """Kernels one decoder layer launches forward (layer_time's launch gaps and CPU
    dispatch): 48, Hugging Face's eager Llama layer (`layer_traffic.KERNELS_PER_LAYER_FORWARD`),
    unless the row's fused layer says otherwise."""
    compiled: bool = False
    """The model's step runs under torch.compile (Inductor): a layer launches
    INDUCTOR_LAYER_KERNELS kernels forward in place of `kernels_per_layer_forward`, and the eager
    cross-entropy inside the compiled model moves no fp32 logits
    (`core.parallel.timing.loss_time.COMPILED_LOSS_KERNEL`); `--compiled` turns it on."""
    fp8_recipe: str = "te-delayed"
    """Under `--precision fp8`, the recipe whose cast kernels it runs
    (`core.spec.fp8_recipes.FP8_RECIPES`): Transformer Engine's delayed scaling, Megatron-Core's
    default (--fp8-recipe delayed), unless the row says otherwise."""
    bucket_bytes: float = 25 * MB
    """Gradient bucket of the overlapped data-parallel reduction."""
    runtime_overhead_bytes: float = 0.0
    """GPU memory the runtime holds beside tensors (CUDA context, NCCL buffers)."""
    attention_kernel: str = "flash2"
    """The fused attention kernel it runs on a GPU that has one (hardware.ATTENTION_KERNELS):
    'flash2' for PyTorch SDPA's flash backend and the flash-attn 2 package, 'flash3' for the
    Hopper kernels (cuDNN fused attention through Transformer Engine, FlashAttention-3)."""
    engines: tuple[str, ...] = ("reference", *("zero-buckets",) * 4)
    """The data-parallel engine (a row of `core.spec.engines.ENGINES`) that holds the memory on
    a GPU with no data-parallel wrapper, then under ZeRO 0, 1, 2 and 3: what the per-GPU phase
    model (core.parallel.memory.gpu_peak) adds beside the sharded model state."""
    loss_kernel: str = "torch-cross-entropy"
    """The cross-entropy it runs (a row of `core.spec.engines.LOSS_KERNELS`)."""
    tp_splits_embedding: bool = True
    """Under tensor parallelism the token embedding is split over the TP group (vocabulary-
    parallel, as Megatron and torchtitan run it); False: every TP rank keeps the whole table
    (and its gradient and optimizer state), sharded only by the data-parallel engine."""
    historical: bool = False
    """A past release's behaviour, kept to predict the published runs made with it; `estimate`
    does not offer it as an alternative when no framework is named."""
    description: str = ""
    sources: tuple[str, ...] = ()
    """Where each non-default field comes from (the framework's code or docs, with version)."""

    def assumption(self) -> str:
        """The line an assumptions list carries: the row's name and what it changes."""
        engines = f"; memory engines {self.engines_text()}"
        if self.tp_comm_overlap:
            engines += "; TP collectives pipelined with their GEMMs (--tp-comm-overlap)"
        if self.compiled:
            engines += "; the step compiled by torch.compile (--compiled)"
        if self.fp8_param_gather:
            engines += "; under FP8 the weights gathered in FP8 (--fp8-param-gather)"
        engines += (
            f"; kernels: attention {self.attention_kernel}, cross-entropy {self.loss_kernel}, "
            f"FP8 recipe {self.fp8_recipe}"
        )
        if self.name == GENERIC_NAME:
            return f"framework: {self.name} (none named; {self.description}{engines})"
        return f"framework: {self.name} ({self.description}{engines})"

    def engines_text(self) -> str:
        """The engine rows it names (core.spec.engines), runs of equal rows joined."""
        alone, *by_zero = self.engines
        if len(set(by_zero)) == 1:
            zero = f"ZeRO 0-3 {by_zero[0]}"
        else:
            zero = ", ".join(f"ZeRO {z} {name}" for z, name in enumerate(by_zero))
        return f"(no data parallelism {alone}; {zero})"

    def __post_init__(self) -> None:
        for field in ("grad_reduce_bytes", "main_grad_bytes", "state_bytes"):
            value = getattr(self, field)
            if value is not None and value not in (2, 4):
                raise SpecError(f"{self.name}.{field}", value, "must be 2, 4 or None")
        if self.master_bytes is not None and self.master_bytes not in (0, 2, 4):
            rule = "must be 0, 2, 4 or None"
            raise SpecError(f"{self.name}.master_bytes", self.master_bytes, rule)
        if self.attention_kernel not in ATTENTION_KERNELS:
            rule = "must be one of " + ", ".join(ATTENTION_KERNELS)
            raise SpecError(f"{self.name}.attention_kernel", self.attention_kernel, rule)
        check_engines(self.name, self.engines)
        get_fp8_recipe(self.fp8_recipe)
        get_loss_kernel(self.loss_kernel)
        if self.offload_grad_bytes is not None and not self.offload_grad_bytes > 0:
            rule = "must be a positive number of bytes or None"
            raise SpecError(f"{self.name}.offload_grad_bytes", self.offload_grad_bytes, rule)
        if self.param_gather_bytes not in (None, 1, 2, 4):
            rule = "must be 1, 2, 4 or None"
            raise SpecError(f"{self.name}.param_gather_bytes", self.param_gather_bytes, rule)
        if self.optimizer_bytes_per_param is not None and not self.optimizer_bytes_per_param > 0:
            rule = "must be a positive number of bytes or None"
            raise SpecError(
                f"{self.name}.optimizer_bytes_per_param", self.optimizer_bytes_per_param, rule
            )
        for field in ("bucket_bytes", "runtime_overhead_bytes", "grad_accumulation_bytes"):
            if not getattr(self, field) >= 0:
                raise SpecError(f"{self.name}.{field}", getattr(self, field), "must be >= 0")


GENERIC_NAME = "generic"

GENERIC = Framework(
    name=GENERIC_NAME,
    description="framework-neutral: gradients reduced in the precision's gradient dtype once "
    "per step, PyTorch DDP's 25 MB buckets, no runtime overhead",
    sources=("torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25",),
)

# Megatron-Core's default DDP bucket: max(40M, 1M * dp) parameters; the fp32 gradients of
# 40M parameters (dp <= 40), one bucket's bytes at the default
MEGATRON_BUCKET_PARAMS = 40_000_000
# DeepSpeed's ZeRO reduce_bucket_size default, in elements; bf16 gradients, 2 bytes each
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000

MEGATRON_TE_LAYER_KERNELS = 12
"""Forward kernels of Megatron-Core's layer with Transformer Engine's fused modules (the
megatron row's source)."""
INDUCTOR_LAYER_KERNELS = 11
"""Forward kernels of one Llama-style decoder layer under torch.compile: Inductor (torch 2.13)
generates 5 (the pre-attention RMSNorm, RoPE on q and k, the residual add with the second
RMSNorm, SiLU x up, the last residual add) beside 5 GEMMs and the SDPA kernel it calls as
extern kernels -- counted on the reference model's Block (trainbudget.model.transformer) with
its C++ back end, whose fusion decisions are the scheduler's, shared with the CUDA back end
(tests/model/test_inductor_kernels.py counts them again). The backward: 8 generated and 11
extern."""


NEUTRAL_ENGINES = ("zero-buckets",) * 5
"""ZeRO with size-capped buckets and fused Adam at every stage, no data parallelism included:
the engine of the stacks that are not PyTorch-native (Megatron, DeepSpeed)."""
