"""Training frameworks as data: the conventions of each stack that change memory and step time
for the same model and layout (gradient dtypes and buffers, when gradients are reduced, bucket
sizes, what overlaps what). One frozen row per framework (`core.spec.framework_spec.Framework`),
each field with its source in `sources`; `GENERIC` is the default when none is named and
reproduces the model's framework-neutral assumptions."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from trainbudget.core.errors import unknown_key
from trainbudget.core.spec.framework_spec import (
    DEEPSPEED_BUCKET_ELEMENTS,
    GENERIC,
    GENERIC_NAME,
    INDUCTOR_LAYER_KERNELS,
    MEGATRON_BUCKET_PARAMS,
    MEGATRON_TE_LAYER_KERNELS,
    NEUTRAL_ENGINES,
    Framework,
)

__all__ = [
    "FRAMEWORKS",
    "GENERIC",
    "GENERIC_NAME",
    "INDUCTOR_LAYER_KERNELS",
    "Framework",
    "get_framework",
]

MEGATRON = Framework(
    name="megatron",
    engines=NEUTRAL_ENGINES,
    loss_kernel="megatron-vocab-parallel",
    grad_reduce_bytes=4,
    main_grad_bytes=4,
    reduce_every_micro_batch=False,
    bucket_bytes=MEGATRON_BUCKET_PARAMS * 4,
    attention_kernel="cudnn",
    kernels_per_layer_forward=MEGATRON_TE_LAYER_KERNELS,
    fp8_weight_cache_bytes=2,
    overlaps_p2p_interleaved=True,
    selective_reruns_fused_attention=True,
    description="Megatron-LM / Megatron-Core (NeMo on it): bf16 runs keep an fp32 main_grad "
    "buffer, accumulate micro-batches into it and reduce it in fp32 once per step, in buckets of "
    "40M parameters; Transformer Engine's fused attention (cuDNN on Hopper); runtime overhead "
    "not sourced (0)",
    sources=(
        "Megatron-LM d98e8a6 (core 0.20.0 dev) megatron/training/arguments.py: with --bf16 and "
        "the default --main-grads-dtype fp32, accumulate_allreduce_grads_in_fp32 is set "
        "('bfloat16 requires gradient accumulation and all-reduce to be done in fp32')",
        "megatron/core/distributed/distributed_data_parallel_config.py: grad_reduce_in_fp32 "
        "(set from that flag); the gradient buffer holds main_grad in that dtype",
        "megatron/core/distributed/distributed_data_parallel.py: bucket_size defaults to "
        "max(40000000, 1000000 * dp_group.size()) parameters",
        "megatron/core/distributed/distributed_data_parallel.py no_sync(): gradients are "
        "reduced on the last micro-batch only (is_last_microbatch)",
        "NeMo 2 nemo/collections/llm/recipes/precision/mixed_precision.py bf16_mixed(): "
        "grad_reduce_in_fp32=True (why NeMo runs use this row)",
        "attention_kernel: Transformer Engine's DotProductAttention picks its FusedAttention "
        "(cuDNN) backend on Hopper and flash-attn's on Ampere (TE docs, 'Attention backends'; "
        "get_attention_backend, transformer_engine/pytorch/attention/dot_product_attention/"
        "utils.py: 'Disabling FlashAttention to give FusedAttention preference on Hopper+' for "
        "compute capability >= 9.0), so it is timed at cuDNN's measured curves "
        "(core.spec.attention_curves); a GPU without a 'cudnn' figure times it as 'flash2'",
        "kernels_per_layer_forward: megatron/core/models/gpt/gpt_layer_specs.py "
        "get_gpt_layer_with_transformer_engine_spec: TELayerNormColumnParallelLinear (norm and "
        "GEMM), the fused rotary embedding on q and k, TEDotProductAttention, "
        "TERowParallelLinear, a fused bias-dropout-add, TELayerNormColumnParallelLinear (fc1), "
        "the fused bias-SwiGLU, TERowParallelLinear (fc2), a fused bias-dropout-add: 12",
        "fp8_weight_cache_bytes: megatron/core/extensions/transformer_engine.py TELinear.forward "
        "passes is_first_microbatch unless disable_parameter_transpose_cache (False by "
        "default); Transformer Engine v1.8 module/linear.py then casts the weight with "
        "get_fp8_workspace(cache_name='weight', with_transpose=...), a uint8 Float8Tensor and "
        "its cached transpose kept in module._fp8_workspaces (module/base.py) for the run",
        "overlaps_p2p_interleaved: megatron/training/arguments.py --no-overlap-p2p-"
        "communication (store_false: overlap_p2p_comm on unless turned off), forced off when "
        "the schedule is not interleaved; NeMo 2 nemo/lightning/pytorch/callbacks/"
        "megatron_comm_overlap.py sets overlap_p2p_comm=True, batch_p2p_comm=False when "
        "virtual_pipeline_model_parallel_size > 1; NeMo-Framework-Launcher's yaml with a "
        "virtual pipeline (gpt3 175b, 40b_16k-64k, llama2 13b/70b, llama3 70b, llama3.1 "
        "70b/405b, nemotron 22b/340b, mixtral 8x7b) all set overlap_p2p_comm: True; NeMo docs "
        "features/optimizations/communication_overlap.rst: 'The PP communications in pipeline "
        "fill and flush are still exposed'",
        "selective_reruns_fused_attention: megatron/core/transformer/attention.py "
        "checkpoint_core_attention = recompute_granularity == 'selective' and 'core_attn' in "
        "recompute_modules (the default list), then _checkpointed_attention_forward runs the "
        "core attention (Transformer Engine's fused kernel) under tensor_parallel.checkpoint; "
        "--recompute-activations sets recompute_granularity selective",
    ),
)

TORCHTITAN = Framework(
    name="torchtitan",
    engines=("single", "ddp", *("fsdp2-sync-every-micro-batch",) * 3),
    grad_reduce_bytes=4,
    reduce_every_micro_batch=True,
    gather_copy_out=True,
    fp8_recipe="torchao-tensorwise",
    recompute_every_from_first=False,
    description="torchtitan (FSDP2 fully_shard + DTensor): reduce-scatters in fp32 after every "
    "micro-batch's backward; gradients kept in the precision's bytes (FSDP2's fp32 sharded "
    "parameter and gradient total the same 2 + 2 + 4 bytes as bf16 weight, gradient and "
    "master); FSDP2 reduces per fully_shard unit, not in size-capped buckets, so the generic "
    "25 MB bucket stays; each gathered layer copied out of the all-gather buffer on the compute "
    "stream; runtime overhead not sourced (0)",
    sources=(
        "torchtitan 0.2.2 (b5bcd76) torchtitan/config/configs.py: mixed_precision_reduce "
        "defaults to (and only allows) 'float32'; mixed_precision_param 'bfloat16'",
        "torchtitan/trainer.py train_step: forward_backward_step per gradient-accumulation "
        "micro-batch with no set_requires_gradient_sync(False), so FSDP2 reduce-scatters each "
        "micro-batch (only the loss's lm_head chunking toggles it, components/loss.py)",
        "gather_copy_out: torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py "
        "wait_for_unshard calls _fsdp_collectives.foreach_all_gather_copy_out, which waits for "
        "the all-gather on the current stream and runs torch.ops.fsdp.split_with_sizes_copy "
        "from the all-gather output into each parameter's unsharded tensor",
        "fp8_recipe: torchtitan's float8 converter swaps nn.Linear for torchao's Float8Linear "
        "(torchao/float8/float8_linear_utils.py convert_to_float8_training), whose default "
        "recipe is tensorwise dynamic scaling (torchao/float8/config.py), under torch.compile",
        "recompute_every_from_first: torchtitan's _apply_layer_sac counts the blocks it wraps "
        "from 1 and checkpoints those whose count % selective_ac_option == 0 (the K-th, 2K-th, "
        "...): floor(L / K) of a stage's L blocks",
    ),
)

DEEPSPEED = Framework(
    name="deepspeed",
    engines=("zero-buckets", *("deepspeed-zero",) * 4),
    reduce_every_micro_batch=True,
    regathers_for_recompute=True,
    bucket_bytes=DEEPSPEED_BUCKET_ELEMENTS * 2,
    param_gather_after_step=True,
    offload_update_then_copy=True,
    description="DeepSpeed ZeRO (Megatron-DeepSpeed, GPT-NeoX on it): bf16 gradients "
    "accumulated and reduced in the model dtype by default; ZeRO-2/3 reduce every micro-batch, "
    "ZeRO 0-1 at the accumulation boundary; 5e8-element (1 GB in bf16) reduce buckets; runtime "
    "overhead not sourced (0); ZeRO-3 fetches a layer's weights again for its recomputed forward",
    sources=(
        "DeepSpeed 0.19.6 (edaa722) deepspeed/runtime/zero/config.py: reduce_bucket_size "
        "default 5e8 elements",
        "deepspeed/runtime/constants.py: grad_accum_dtype default None; engine.py "
        "get_data_types: None means the model dtype (bf16); communication_data_type: bf16 "
        "when bf16 is enabled",
        "deepspeed/runtime/engine.py allreduce_gradients: 'ZeRO stage >= 2 communicates during "
        "non gradient accumulation boundaries as well'; stages 0-1 only at the boundary",
        "regathers_for_recompute: deepspeed/runtime/zero/parameter_offload.py registers "
        "pre_sub_module_forward_function on every sub-module; the recomputed forward of an "
        "activation checkpoint runs it again (under no_grad), which fetches the partitioned "
        "parameters (DeepSpeed issue #4784 traces this path with ZeRO++)",
        "param_gather_after_step: deepspeed/runtime/zero/stage_1_and_2.py step(): each "
        "group's _optimizer_step, the fp32 partition copied into the bit16 one, then "
        "all_gather_dp_groups of the bit16 groups inside the same call (its "
        "OPTIMIZER_ALLGATHER_TIMER)",
        "offload_update_then_copy: stage_1_and_2.py step() under cpu_offload: _optimizer_step, "
        "then bit16_partition_buffer.copy_(fp32_partition) on the host and the copy to the "
        "GPU; stage3.py step(): _optimizer_step, then _reassign_or_swap_out_partitioned_"
        "parameters (fp16_partitioned_groups_flat.copy_(fp32_partitioned_groups_flat), a "
        "blocking host-to-device copy with the dtype conversion)",
    ),
)

DEEPSPEED_0_19_2 = replace(
    DEEPSPEED,
    name="deepspeed-0.19.2",
    offload_grad_bytes=2 + 2 + 4,
    historical=True,
    description="DeepSpeed up to 0.19.4: the deepspeed row, and under ZeRO-3 with optimizer "
    "offload each gradient partition copied to the host in bf16, back to the GPU, and again "
    "to the host in fp32 at the accumulation boundary, blocking the backward",
    sources=(
        *DEEPSPEED.sources,
        "DeepSpeed v0.19.2 (b919284) deepspeed/runtime/zero/stage3.py partition_grads: the bf16 "
        "partition copied into the pinned grad_partitions_flat_buffer, grad_buffer.to(device) "
        "back, and at the boundary fp32_grad_tensor.copy_(grad_buffer.to(fp32)) without "
        "non_blocking: 2 + 2 + 4 bytes a parameter; DeepSpeed 7dfa67a (#8207, first in "
        "v0.19.5): the copy was blocking 'with no overlap against backward compute'",
    ),
)

PYTORCH_FSDP1 = Framework(
    name="pytorch-fsdp1",
    engines=NEUTRAL_ENGINES,
    reduce_every_micro_batch=True,
    description="PyTorch FullyShardedDataParallel (FSDP1, FairScale's FSDP before it): "
    "MixedPrecision's reduce_dtype defaults to param_dtype, so gradients are reduced in the "
    "precision's dtype; reduce-scatters every micro-batch unless no_sync() is used (which keeps "
    "unsharded gradients instead); reduces per FlatParameter, so the generic 25 MB bucket stays; "
    "runtime overhead not sourced (0)",
    sources=(
        "torch 2.13 torch/distributed/fsdp/api.py MixedPrecision: reduce_dtype default None, "
        "'If this is None but param_dtype is not None, then this takes on the param_dtype "
        "value'",
        "torch 2.13 torch/distributed/fsdp/fully_sharded_data_parallel.py no_sync(): "
        "gradients are reduce-scattered on every backward outside it",
    ),
)

MEGATRON_LEGACY = replace(
    MEGATRON,
    name="megatron-legacy",
    pipeline_scatter_gather=True,
    overlaps_p2p_interleaved=False,
    historical=True,
    description="Megatron-LM from February 2021 until its pipeline code moved into "
    "Megatron-Core (March 2023), the code of Narayanan et al. 2021 and Korthikanti et al. 2022: "
    "the megatron row's gradients and buckets, and pipeline messages without sequence "
    "parallelism sent as 1/tp pieces and all-gathered inside the receiving node",
    sources=(
        "Megatron-LM 27fc468 (2021-02-09) 'Break up tensors sent between pipeline stages into "
        "smaller chunks that can be all-gathered'; megatron/arguments.py at aed2f75 "
        "(2021-04-11): --no-scatter-gather-tensors-in-pipeline, on by default, and --bf16 sets "
        "accumulate_allreduce_grads_in_fp32",
        "megatron/p2p_communication.py at 55ba1f7 (2022-05-26): the scatter/gather applies "
        "when not args.sequence_parallel",
        "Megatron-LM 39b83c7 / 3c92fa9 (2023-01-31, 2023-03-23): p2p communication moved into "
        "megatron/core/pipeline_parallel, without the scatter/gather",
        "Narayanan et al. 2021 (arXiv 2104.04473) Sec. 4.1 and Sec. 5.1: 'we use the "
        "interleaved pipeline schedule with the scatter/gather optimization enabled'",
        "overlaps_p2p_interleaved off: overlap_p2p_comm is Megatron-Core's option (ModelParallel"
        "Config); whether the 2021-22 code overlapped its sends was not read, so these rows "
        "keep every send exposed, as they were validated",
    ),
)

DEEPSPEED_2021 = replace(
    DEEPSPEED,
    name="deepspeed-2021",
    engines=NEUTRAL_ENGINES,
    zero3_serial_per_tensor=True,
    historical=True,
    description="DeepSpeed 0.3.13-0.5.0 (March-August 2021), its first ZeRO-3: the deepspeed "
    "row's reductions and regathers, but every parameter tensor gathered and reduce-scattered "
    "on its own (list-of-tensors collectives), each gather after torch.cuda.synchronize(), so "
    "no collective overlaps compute",
    sources=(
        "DeepSpeed v0.3.15 (2021-04) deepspeed/runtime/zero/stage3.py FP16_DeepSpeedZeroOptimizer_"
        "Stage3: reduce_bucket_size=500000000 elements; gradients reduced from backward hooks "
        "on every micro-batch; pre_sub_module_forward_function fetches a sub-module's "
        "parameters on each forward, the recomputed one included",
        "DeepSpeed v0.3.15 (2021-04) deepspeed/runtime/zero/partition_parameters.py "
        "_allgather_param: one torch.distributed.all_gather per parameter, into a list of "
        "world-size partitions, after torch.cuda.synchronize(); _reduce_scatter_gradients "
        "loops _reduce_scatter_gradient per parameter (one reduce_scatter each); the same in "
        "v0.3.13 (2021-03) and v0.5.0 (2021-08), replaced by coalesced gathers in v0.5.5",
        "deepspeed/runtime/zero/stage3.py fetch_sub_module: the sub-module's gathers, then "
        "_synchronize_communication (handle.wait, comm_stream.synchronize(), "
        "torch.cuda.synchronize()) before its forward runs; prefetched parameters go through "
        "the same _allgather_param",
    ),
)

NEMO_1_SOURCES = (
    "NeMo-Framework-Launcher tag 24.07 launcher_scripts/conf/training (llama/llama2_7b.yaml, "
    "llama3_8b.yaml, gpt3/20b.yaml, nemotron/nemotron_8b.yaml ...): optim name "
    "distributed_fused_adam, contiguous_grad_buffer, megatron_amp_O2; the launcher moved to "
    "mcore_distributed_optim only in 3dd3561 (2024-12-05, after tag 24.09)",
    "NeMo r2.0.0rc1 (the 24.07 container's) nemo/collections/nlp/models/language_modeling/"
    "megatron_base_model.py setup_optimization: optimizer dtype fp32 unless the yaml sets "
    "'dtype'; with fp32 state and bf16 weights store_params=False and "
    "store_param_remainders=True; with the state in the model's dtype no master copy",
    "apex f3f0492 contrib/optimizers/distributed_fused_adam.py StateBucket: "
    "param_remainders_shard int16, exp_avg_shard and exp_avg_sq_shard in the optimizer dtype, "
    "1/dp each; grad_sync_dtype defaults to that dtype (fp32)",
    "model code, loss and attention as the megatron row (Megatron-Core GPT with Transformer "
    "Engine, cross_entropy_loss_fusion)",
)

NEMO_1 = replace(
    MEGATRON,
    name="nemo-1",
    engines=("apex-distributed-adam", "zero-buckets", "apex-distributed-adam",
             "zero-buckets", "zero-buckets"),
    grad_reduce_bytes=4,
    main_grad_bytes=4,
    master_bytes=2,
    historical=True,
    description="NeMo 1.x (containers up to 24.09, NeMo-Framework-Launcher yaml): Megatron-Core's "
    "GPT under Apex's DistributedFusedAdam: an fp32 gradient buffer accumulated unreduced and "
    "reduce-scattered on the last micro-batch into a kept 1/dp shard, Adam's fp32 moments and "
    "the master weights' 16-bit remainders sharded over data parallelism",
    sources=NEMO_1_SOURCES,
)  # fmt: skip

NEMO_1_BF16_GRADS = replace(
    NEMO_1,
    name="nemo-1-bf16-grads",
    grad_reduce_bytes=2,
    main_grad_bytes=2,
    description="the nemo-1 row with optim.grad_sync_dtype=bf16, as NeMo-Framework-Launcher "
    "24.07's H100 example scripts run GPT-3 and Llama: gradients accumulated and "
    "reduce-scattered in bf16",
    sources=(
        *NEMO_1_SOURCES,
        "NeMo-Framework-Launcher tag 24.07 examples/training/gpt/h100/*_fp8_*.sh and "
        "examples/training/llama/h100/*.sh: +training.model.optim.grad_sync_dtype=bf16",
    ),
)

NEMO_1_BF16_ADAM = replace(
    NEMO_1_BF16_GRADS,
    name="nemo-1-bf16-adam",
    master_bytes=0,
    state_bytes=2,
    description="the nemo-1 row with optim dtype and grad_sync_dtype bf16, as NeMo-Framework-"
    "Launcher 24.07-24.09's Nemotron-4 340B yaml sets them: Adam's moments in bf16, no master "
    "copy (the optimizer's dtype is the model's), bf16 gradients",
    sources=(
        *NEMO_1_SOURCES,
        "NeMo-Framework-Launcher tags 24.07 and 24.09 launcher_scripts/conf/training/nemotron/"
        "nemotron_340b.yaml optim: grad_sync_dtype bf16, dtype bf16 (so store_params=False "
        "and no remainders: megatron_base_model.py, optim_dtype == model_dtype)",
    ),
)

NEMO_2 = replace(
    MEGATRON,
    name="nemo-2",
    fp8_weight_cache_bytes=0,
    fp8_param_gather=True,
    description="NeMo 2 (on Megatron-Core's DDP and distributed optimizer): the megatron row, "
    "and under FP8 its recipe's FP8 primary weights (no 16-bit weight beside the FP8 copy)",
    sources=(
        *MEGATRON.sources,
        "fp8_weight_cache_bytes 0 and fp8_param_gather: NeMo v2.2.0 nemo/collections/llm/"
        "recipes/precision/mixed_precision.py bf16_with_fp8_mixed: cfg.fp8_params = True "
        "(v2.3.0: fp8_param_gather = True); NeMo docs features/optimizations/"
        "communication_overlap.rst: 'setting fp8_param_gather=True conducts the parameter "
        "all-gather in fp8'",
    ),
)

MEGATRON_BRIDGE_PERF = replace(
    MEGATRON,
    name="megatron-bridge-perf",
    grad_reduce_bytes=2,
    main_grad_bytes=2,
    fp8_weight_cache_bytes=0,
    fp8_param_gather=True,
    description="Megatron-Bridge's performance recipes (NeMo 25.11 and later): Megatron-Core's "
    "distributed optimizer with the gradient buffer and its reduction in bf16, not the fp32 "
    "main_grad of the megatron row; FP8 runs keep FP8 primary weights",
    sources=(
        *MEGATRON.sources,
        "Megatron-Bridge bf75c658c (2025-11-06) scripts/performance/configs/llama3/"
        "llama3_llm_pretrain.py: cfg.mixed_precision.grad_reduce_in_fp32 = False and "
        "cfg.ddp.grad_reduce_in_fp32 = False (the yaml configs it replaced: "
        "grad_reduce_in_fp32: false); 4ab94dfad src/megatron/bridge/perf_recipes/_common.py "
        "_perf_precision: 'Always sets grad_reduce_in_fp32=False'",
        "fp8_weight_cache_bytes 0 and fp8_param_gather: src/megatron/bridge/training/"
        "mixed_precision.py bf16_with_fp8_current_scaling_mixed sets fp8_param_gather (FP8 "
        "primary weights, gathered in FP8: the "
        "FP8 weight and its transpose are the parameter, no 16-bit copy beside them)",
    ),
)

KEMPNERFORGE = Framework(
    name="kempnerforge",
    engines=("single", *("fsdp2",) * 4),
    grad_reduce_bytes=4,
    gather_copy_out=True,
    loss_kernel="gathered-16bit-cross-entropy",
    tp_splits_embedding=False,
    description="KempnerForge (Kempner Institute; FSDP2 fully_shard per block + DTensor TP with "
    "sequence-parallel norms): every data-parallel mesh sharded by FSDP2 with fp32 reduction; "
    "gradient accumulation without sync until the last micro-batch, so FSDP2 keeps each "
    "unsharded gradient upcast to fp32 across the micro-batches; F.cross_entropy on the bf16 "
    "logits, which the TP head gathers whole to every rank; the token embedding replicated "
    "over TP; runtime overhead not sourced (0)",
    sources=(
        "KempnerForge 01b461a kempnerforge/distributed/parallel.py: apply_fsdp2 calls "
        "fully_shard on each TransformerBlock and on the model over the data-parallel mesh "
        "(dp_shard, dp_replicate or both: no DDP path), default_mp_policy sets "
        "reduce_dtype=torch.float32 beside param_dtype bf16",
        "scripts/train.py wraps every micro-batch but the last in "
        "kempnerforge/training/grad.py maybe_no_sync: model.set_requires_gradient_sync(False); "
        "torch 2.13 _fsdp_param.py to_accumulated_grad_if_needed then keeps the unsharded "
        "gradient in reduce_dtype (engine fsdp2, Engine.accumulates_in_reduce_dtype)",
        "loss_kernel: kempnerforge/distributed/tensor_parallel.py and scripts/train.py "
        "(core/spec/loss_kernels.py KEMPNERFORGE_LOSS_SOURCE)",
        "tp_splits_embedding: kempnerforge/distributed/tensor_parallel.py leaves the token "
        "embedding out of the TP plan ('Token embedding: Replicated', a forward hook wraps its "
        "output as a Replicate DTensor), so each TP rank holds the whole table",
        "gather_copy_out: torch FSDP2's split_with_sizes_copy, as for torchtitan's row",
    ),
)

NANOTRON = Framework(
    name="nanotron",
    engines=NEUTRAL_ENGINES,
    grad_reduce_bytes=4,
    main_grad_bytes=4,
    param_gather_after_step=True,
    param_gather_bytes=4,
    sharded_grads_all_reduced_after_backward=True,
    grad_accumulation_bytes=10,
    description="Hugging Face nanotron with accumulate_grad_in_fp32 (its example configs' "
    "setting): bf16 weights, an fp32 gradient buffer every micro-batch's bf16 gradients are "
    "added to after its backward, reduced in fp32 (overlapped through DDP's hook under ZeRO 0, "
    "all-reduced whole after the backward under ZeRO-1), the fp32 master weights gathered "
    "after the update; runtime overhead not sourced (0)",
    sources=(
        "nanotron c2528430 (2025-03-10, the benchmark's commit) examples/config_tiny_llama.yaml "
        "and the sweep's base config examples/config_tiny_llama_bench.yaml (67c5ebb6): "
        "accumulate_grad_in_fp32: true, dtype bfloat16, ddp_bucket_cap_mb 25",
        "src/nanotron/trainer.py: make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and "
        "zero_stage > 0); without DDP, training_step calls sync_gradients_across_dp(..., "
        "reduce_scatter=False) after train_batch_iter: FP32GradientAccumulator."
        "sync_gradients_across_dp all-reduces the contiguous fp32 gradient buffer",
        "src/nanotron/optim/gradient_accumulator.py: backward() runs loss.backward(), then "
        "_accumulate_grad for every parameter: fp32_grad.add_(half_param.grad); under DDP "
        "get_fp32_accum_hook adds each bucket and all-reduces it in fp32 during the backward",
        "src/nanotron/optim/zero.py ZeroDistributedOptimizer.step: super().step(), then "
        "_all_gather_params over the optimizer's (fp32, from OptimizerFromGradientAccumulator) "
        "parameters",
    ),
)

INTERNLM_2023 = Framework(
    name="internlm-2023",
    engines=NEUTRAL_ENGINES,
    grad_accumulation_bytes=2 + 2 + 2,
    grad_accumulation_first_free=True,
    param_gather_after_step=True,
    optimizer_bytes_per_param=10 + 10 + 18 + 88 + 6,
    loss_kernel="in-place-fused-classifier",
    historical=True,
    description="InternLM's own trainer of July 2023 (HybridZeroOptimizer, ZeRO-1): gradients "
    "accumulated in bf16 by separate adds and all-reduced in bf16 during the last backward, "
    "an unfused fp32 optimizer step on the rank's shard (overflow check, norm, casts, AdamW's "
    "for-loop kernels, the copy back), then each shard broadcast to its group; flash-attn's "
    "in-place cross-entropy on the bf16 logits",
    sources=(
        "InternLM 20fe5ac2 (2023-07-31, the FLOPS tables' trainer) internlm/solver/optimizer/"
        "hybrid_zero_optim.py: reduction hooks skipped before the last micro-batch, so .grad "
        "accumulates through AccumulateGrad (bf16 read + bf16 read + bf16 write, the first "
        "assigned); step(): the inf check float(tensor.float().sum()) per owned gradient (10 "
        "bytes), the norm over fp32 copies (10), flatten, cast to fp32 and the unscale-and-clip "
        "mul_ (18), torch.optim.AdamW on one flat fp32 tensor, torch 1.13's single-tensor "
        "loop (param.mul_, exp_avg.mul_ and add_, exp_avg_sq.mul_ and addcmul_, sqrt, "
        "division, add_(eps), addcdiv_: 88), the copy back to bf16 (6); broadcast_params("
        "overlap=False): one broadcast per owner, waited before step() returns",
        "configs/7B_sft.py: hybrid_zero_optimizer zero_overlap_communication True, "
        "reduce_bucket_size 512M elements; internlm/model/loss.py FlashGPTLMLoss: flash-attn's "
        "CrossEntropyLoss(inplace_backward=True) on the bf16 logits",
    ),
)

TRAINBUDGET = Framework(
    name="trainbudget",
    engines=("single", "ddp", "ddp+zero-redundancy", "fsdp2-no-reshard", "fsdp2"),
    description="this project's trainer (trainbudget train): DDP, DDP with "
    "ZeroRedundancyOptimizer, FSDP2 without and with resharding after forward for ZeRO 0-3 "
    "(train.spec.strategy), gradients accumulated without sync, torch's fused Adam; torch's "
    "pipelining and DTensor tensor parallelism",
    sources=(
        "trainbudget train/spec/strategy.py: the strategy each ZeRO stage runs",
        "core/spec/engines.py: each engine row's source",
    ),
)

FRAMEWORKS = MappingProxyType(
    {
        f.name: f
        for f in (
            GENERIC, MEGATRON, TORCHTITAN, DEEPSPEED, PYTORCH_FSDP1, MEGATRON_LEGACY,
            DEEPSPEED_2021, DEEPSPEED_0_19_2, NEMO_1, NEMO_1_BF16_GRADS, NEMO_1_BF16_ADAM,
            NEMO_2, MEGATRON_BRIDGE_PERF, KEMPNERFORGE, NANOTRON, INTERNLM_2023, TRAINBUDGET,
        )
    }
)  # fmt: skip


def get_framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise unknown_key("framework", name, list(FRAMEWORKS))
    return FRAMEWORKS[name]
