"""The terms of one GPU's step that `gpu_peak` composes into phases: the GPU's model state and
the engine's buffers, one micro-batch's saved tensors, the pipeline schedule's buffers, the
update's largest tensor -- for one plan (numbers) or a grid of plans (arrays), each written once
over `Ops` (core.ops). The engine's columns (`core.spec.engines`) are the framework row's for
each plan's ZeRO stage (`engine_columns`)."""

from __future__ import annotations

import functools
from types import SimpleNamespace

from trainbudget.core.parallel.layout import (
    FULL,
    ON_GPU,
    SELECTIVE,
    SELECTIVE_OP,
)
from trainbudget.core.parallel.memory.engine_columns import engine_columns, state_precision
from trainbudget.core.parallel.memory.parallel_memory import (
    ModelState,
    fp8_recipe_weights_per_layer,
    rank_params,
    zero_model_state,
)
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.activations import (
    FP32_BYTES,
    layer_activations,
    op_checkpoint_layer,
    op_checkpoint_working_bytes,
    residual_bytes,
    weight_copy_bytes,
)
from trainbudget.core.single.params import count_params
from trainbudget.core.single.peak_memory import (
    largest_tensor,
    loss_backward_bytes,
    loss_chunk_bytes,
    loss_head_grad_bytes,
    norm_stats_bytes,
)
from trainbudget.core.spec.fp8_recipes import get_fp8_recipe
from trainbudget.core.spec.loss_kernels import get_loss_kernel

MLP_BACKWARD_GRADIENTS = 2
"""Hidden-sized (tokens x d_ff) gradients alive inside a block's MLP backward on a stage without
the loss: of the activation's output and of its input (measured: the TEMP MemTracker reports on
the first stage of tests/train/observe/test_rank_memory.py's pp2 runs, 2 x 64 x 64 x 4 bytes)."""


LOSS_PARALLEL_TEMPORARIES = 1
"""fp32 tensors of the rank's logits' size (tokens x V/tp) beyond the single device's two
gradients that DTensor's loss parallel holds at its backward's start: its log-softmax backward
handler (torch.distributed.tensor.parallel.loss_parallel, torch 2.13 _loss_ops) forms
exp(log-probs) beside the gradients rather than in place (an attribution, not traced: the one
term that closes the gap on tests/train/observe/test_rank_memory.py's tp2 run, +1.0 % with it, +10 %
without)."""


_NO_STATE = ModelState(
    params_bytes=0.0, grads_bytes=0.0, master_bytes=0.0, optimizer_state_bytes=0.0
)


class GpuTerms:
    """The terms of one plan's or grid's step on a GPU (a namespace for their shared inputs;
    `stage` sets `piped`, whether a pipeline runs, before the per-stage terms are read)."""

    def __init__(self, spec, L, seq_len, prec, opt, framework, xp):
        self.spec, self.L, self.seq_len, self.prec, self.opt = spec, L, seq_len, prec, opt
        self.fw, self.xp = framework, xp
        eng = engine_columns(framework, L.zero, L.dp * L.cp == 1, xp)
        self.eng = eng
        self.state_prec = state_precision(prec, framework)
        self.e, self.w = prec.activation_bytes, prec.weight_bytes
        self.g = framework.main_grad_bytes or prec.grad_bytes
        self.tokens = seq_len * L.micro_batch / L.cp
        self.split = xp.where(L.sp, L.tp, 1)
        self.vocab = spec.vocab_size / L.tp
        self.stats = norm_stats_bytes(spec)
        self.loss = get_loss_kernel(framework.loss_kernel)
        # the logits' columns on this GPU: the rank's vocabulary shard, or the whole vocabulary
        # where the head gathers them to every TP rank (then no loss parallel runs)
        whole = self.loss.whole_vocabulary
        self.logit_vocab = spec.vocab_size if whole else self.vocab
        self.dtensor_loss = eng.sp_keeps_gathered_input & (L.tp > 1) & (not whole)
        # the residual stream's bytes: the weights' under autocast (activations.residual_bytes)
        self.residual = residual_bytes(self.e, prec.weight_bytes)

    def state(self, layers, first, last, optimizer_share):
        """(model state on the GPU, bytes offloaded, the rank's unsharded gradients, the
        buffers every phase holds)."""
        L, xp, eng = self.L, self.xp, self.eng
        split = self.fw.tp_splits_embedding
        p = rank_params(
            self.spec, L, layers=layers, first=first, last=last, xp=xp, split_embedding=split
        )
        shard = L.shard_dp * L.cp  # ZeRO's group: dp * cp, or the HSDP shard times cp
        expert_shard = xp.maximum(1, shard // L.ep)
        kw = dict(precision=self.state_prec, optimizer=self.opt, grad_bytes=self.g, xp=xp)
        dense = zero_model_state(p.dense, shard=shard, zero=L.zero, **kw)
        experts = _NO_STATE  # a dense model: skip the zeros (the grid's hot path)
        if self.spec.is_moe:
            experts = zero_model_state(p.experts, shard=expert_shard, zero=L.zero, **kw)
        params = dense.params_bytes + experts.params_bytes
        if eng.shards_parameters is not False:
            # an engine that shards parameters at rest shards them whatever its ZeRO stage
            zero_params = xp.where(eng.shards_parameters, xp.maximum(L.zero, 3), L.zero)
            params = zero_model_state(p.dense, shard=shard, zero=zero_params, **kw).params_bytes
            if self.spec.is_moe:
                params = (
                    params
                    + zero_model_state(
                        p.experts, shard=expert_shard, zero=zero_params, **kw
                    ).params_bytes
                )
        share = xp.where(eng.whole_tensor_shards & (L.zero >= 1), optimizer_share, 1.0)
        master = (dense.master_bytes + experts.master_bytes) * share
        opt_state = (dense.optimizer_state_bytes + experts.optimizer_state_bytes) * share
        off_opt, off_params = L.offload_optimizer != ON_GPU, L.offload_params != ON_GPU
        host = xp.where(off_opt, master + opt_state, 0.0) + xp.where(off_params, params, 0.0)
        grads = dense.grads_bytes + experts.grads_bytes
        if eng.offload_takes_grads is not False:
            # the engine keeps sharded gradients beside the offloaded optimizer
            off_grads = off_opt & eng.offload_takes_grads & (L.zero >= 2)
            host = host + xp.where(off_grads, grads, 0.0)
            grads = xp.where(off_grads, 0.0, grads)
        state = ModelState(
            params_bytes=xp.where(off_params, 0.0, params),
            grads_bytes=grads,
            master_bytes=xp.where(off_opt, 0.0, master),
            optimizer_state_bytes=xp.where(off_opt, 0.0, opt_state),
        )
        n = p.dense + p.experts
        self.rank_n = n
        full_grads = n * self.g
        # what the micro-batches before the last accumulate unsharded, where the engine does:
        # in the reduction dtype where it upcasts to it (FSDP2's reduce_dtype), else as is
        reduce_bytes = self.fw.grad_reduce_bytes or self.g
        self.unsharded_grads = n * xp.where(eng.accumulates_in_reduce_dtype, reduce_bytes, self.g)
        wrapped = xp.not_(L.dp * L.cp == 1)
        # DDP's buckets copy every gradient but the experts' (train.parallel.expert_parallel has DDP
        # ignore them under ep); size-capped buckets never hold more than the gradients
        bucketed = (p.dense + xp.where(L.ep > 1, 0.0, p.experts)) * self.g
        buckets = xp.where(wrapped & eng.gradient_buckets, bucketed, 0.0)
        # ZeRO-3 as DeepSpeed runs it: the layer in use and the one prefetched, gathered,
        # and that layer's unsharded gradient before its reduce-scatter (in place of the
        # size-capped buckets of the lower stages)
        layer_gather = p.layer_dense * (2 * self.w + self.g)
        zero3 = eng.layer_gather & (L.zero >= 3) & wrapped
        in_flight = eng.buckets_in_flight * xp.minimum(self.fw.bucket_bytes, full_grads)
        buckets = buckets + xp.where(wrapped & xp.not_(zero3), in_flight, 0.0)
        reduce_buffer = xp.minimum(self.fw.bucket_bytes, full_grads)
        layer_gather = layer_gather + xp.where(eng.zero3_reduce_buffer, reduce_buffer, 0.0)
        base = buckets + xp.where(zero3, layer_gather, 0.0) + self.fw.runtime_overhead_bytes
        base = base + self.fp8_weight_cache(layers)
        return state, host, full_grads, base

    def fp8_weight_cache(self, layers):
        """Under FP8, the copies of the stage's FP8-recipe linear weights (the layers'; not
        the embedding or the head) a framework keeps for the run
        (`Framework.fp8_weight_cache_bytes`: Transformer Engine's FP8 cast and transpose)."""
        if self.prec.compute_dtype != "fp8" or not self.fw.fp8_weight_cache_bytes:
            return 0.0
        per_layer = fp8_recipe_weights_per_layer(self.spec, self.L)
        return layers * per_layer * self.fw.fp8_weight_cache_bytes

    def reduced_grad_shard(self):
        """The reduced gradient shard an engine keeps in a buffer of its own from the last
        micro-batch's backward through the optimizer step (`Engine.keeps_reduced_grad_shard`):
        1/dp of the rank's gradients, where a data-parallel group reduces them."""
        L, xp = self.L, self.xp
        if self.eng.keeps_reduced_grad_shard is False:
            return 0.0
        wrapped = xp.not_(L.dp * L.cp == 1)
        kept = self.eng.keeps_reduced_grad_shard & wrapped
        return xp.where(kept, self.rank_n * self.g / (L.shard_dp * L.cp), 0.0)

    def gathered(self, layers, first, last):
        """Parameters gathered whole beside their shard until backward ends (FSDP2 without
        resharding after forward; under a pipeline, FSDP2 for the whole step)."""
        L, xp, eng = self.L, self.xp, self.eng
        if eng.gathered_until_backward is False and eng.pipeline_keeps_unsharded is False:
            return 0.0
        sharded = xp.not_(L.dp * L.cp == 1)
        keeps = eng.gathered_until_backward | (eng.pipeline_keeps_unsharded & self.piped)
        return xp.where(keeps & sharded, self.rank_n * self.w, 0.0)

    @property
    def loss_saved(self):
        """What the loss kernel saves for its backward and frees or hands on there: its fp32
        and 16-bit logit-sized tensors, and a fused kernel's head weight gradient."""
        per_logit = (
            self.loss.saved_fp32_tensors * FP32_BYTES + self.loss.saved_16bit_tensors * self.e
        )
        saved = per_logit * self.tokens * self.logit_vocab
        head_grad = loss_head_grad_bytes(
            self.vocab, self.spec.d_model, kernel=self.loss, weight_bytes=self.w
        )
        return saved + head_grad

    @property
    def linear_input_bytes(self):
        """Bytes per element a linear layer saves of its input: under FP8, the framework's
        recipe's (`Fp8Recipe.saved_input_bytes`: Transformer Engine keeps its FP8 cast);
        otherwise the activation width."""
        if self.prec.compute_dtype != "fp8":
            return self.e
        return get_fp8_recipe(self.fw.fp8_recipe).saved_input_bytes

    @functools.cached_property
    def layer_bytes(self):
        """Bytes one layer saves for one micro-batch on this GPU, with its norms' statistics:
        under sequence parallelism as the engine runs it (`Engine.sp_keeps_gathered_input`)."""
        L, xp, spec = self.L, self.xp, self.spec
        kw = dict(
            seq_len=self.seq_len,
            micro_batch=L.micro_batch,
            activation_bytes=self.e,
            flash_attention=L.flash,
            drop_attention_matrix=L.recompute == SELECTIVE,
            tp=L.tp,
            cp=L.cp,
            xp=xp,
            weight_bytes=self.prec.weight_bytes,
            linear_input_bytes=self.linear_input_bytes,
        )
        tp_alone, split = layer_activations(spec, **kw), layer_activations(spec, sp=L.sp, **kw)
        # DTensor's SP splits the norms' inputs (and dropout masks) only
        dtensor = tp_alone.total_bytes - (
            tp_alone.norm_inputs_bytes
            - split.norm_inputs_bytes
            + tp_alone.dropout_bytes
            - split.dropout_bytes
        )
        saved = xp.where(self.eng.sp_keeps_gathered_input, dtensor, split.total_bytes)
        return saved + 2 * self.tokens * self.stats / self.split

    def micro_batch(self, layers, first, last):
        """(one micro-batch's saved tensors on the stage, under the recompute policy; the
        output the pipeline schedule keeps per micro-batch; the temporaries of its backward)."""
        L, xp, spec, e = self.L, self.xp, self.spec, self.e
        layer = self.layer_bytes
        checkpoint = self.tokens * spec.d_model * self.residual / self.split
        recomputed = L.recomputed_layers(layers, self.fw.recompute_every_from_first)
        kept = recomputed * checkpoint + (layers - recomputed) * layer
        per = xp.where(L.recompute == FULL, kept, layers * layer)
        self.working = xp.where(L.recompute == FULL, layer - checkpoint, 0.0)
        op = L.recompute == SELECTIVE_OP
        if not op_checkpoint.unsupported(spec) and (op.any() if xp.is_array else op):
            saved_op = op_checkpoint_layer(
                spec,
                seq_len=self.seq_len,
                micro_batch=L.micro_batch,
                activation_bytes=e,
                flash_attention=L.flash,
                tp=L.tp,
                sp=L.sp,
                cp=L.cp,
                xp=xp,
            )
            per = xp.where(op, layers * saved_op.total_bytes, per)
            self.working = xp.where(
                op, op_checkpoint_working_bytes(layer, saved_op, xp), self.working
            )
        # a stage after the first keeps its input in torch pipelining's receive buffer
        in_buffer = xp.not_(first) & self.eng.torch_pipelining & self.piped
        per = per - xp.where(in_buffer, checkpoint, 0.0)
        logits = self.tokens * self.logit_vocab * e
        head_input = self.tokens * spec.d_model * e
        # the final norm's input (the residual stream), the head's input (whole under
        # DTensor's SP: the column-parallel head gathers it; a fused loss keeps its gradient
        # instead), under autocast the head's 16-bit weight copy, and what the loss kernel
        # keeps of the logits and of the head's gradients
        head = (
            self.tokens * spec.d_model * self.residual / self.split
            + xp.where(self.eng.sp_keeps_gathered_input, head_input, head_input / self.split)
            + weight_copy_bytes(self.vocab * spec.d_model, e, self.prec.weight_bytes)
            + self.tokens * self.stats / self.split
            + logits * self.loss.keeps_logits
            + self.loss_saved
        )
        # torch's pipelining keeps a stage's output until its backward; Megatron frees it once
        # sent (deallocate_pipeline_outputs, which megatron/training's
        # core_transformer_config_from_args sets)
        sent = xp.where(self.eng.torch_pipelining & self.piped, checkpoint, 0.0)
        saved = per + xp.where(last, head, sent)
        output = xp.where(last, logits, checkpoint)
        loss = loss_backward_bytes(
            self.tokens,
            self.logit_vocab,
            kernel=self.loss,
            activation_bytes=e,
            extra=xp.where(self.dtensor_loss, LOSS_PARALLEL_TEMPORARIES, 0),
        ) + loss_chunk_bytes(self.tokens, spec.d_model, kernel=self.loss, activation_bytes=e)
        d_ff = spec.d_ff_expert if spec.is_moe and not spec.d_ff else spec.d_ff
        mlp = MLP_BACKWARD_GRADIENTS * self.tokens * d_ff / L.tp * self.prec.grad_bytes
        transient = xp.where(last, loss, mlp)
        return saved, output, transient

    def _units(self):
        """(whether FSDP2's units back up one by one here, their sizes on this GPU): the root
        (embeddings, final norm, head), a block (its experts apart under expert parallelism,
        each a unit of its own: train.parallel.expert_parallel.fully_shard_experts), the root's
        gradients, and a block in backward with the next prefetched (gathered, unless the
        engine keeps everything gathered until backward ends) and its unsharded gradients."""
        L, xp, spec, eng, g, w = self.L, self.xp, self.spec, self.eng, self.g, self.w
        units = eng.unit_backward & xp.not_(L.dp * L.cp == 1) & xp.not_(self.piped)
        p = count_params(spec)
        embedding = p.embedding_token / (L.tp if self.fw.tp_splits_embedding else 1)
        root = embedding + p.head / L.tp + p.embedding_position + p.final_norm
        experts = xp.where(L.ep > 1, p.moe_experts / (L.ep * L.tp), 0.0)
        block = (self.rank_n - experts - root) / spec.n_layers
        one_expert = p.moe_experts / max(1, spec.n_moe_layers * spec.n_experts) / L.tp
        expert = xp.where(L.ep > 1, one_expert, 0.0)
        reshards = xp.not_(eng.gathered_until_backward)
        blocks = xp.where(reshards, 2 * (block + expert) * w, 0.0) + (block + expert) * g
        sizes = SimpleNamespace(
            root=root,
            block=block + expert,
            root_grads=((p.head or p.embedding_token) / L.tp + p.final_norm) * g,
            blocks=blocks,
        )
        return units, sizes

    def _largest_updated_tensor(self):
        """Elements of the largest tensor the update works on at once on this GPU: the
        largest parameter's tensor-parallel shard, cut again over the ZeRO group where the
        optimizer state is sharded element-wise (ZeRO's flat partitions, FSDP2's DTensor
        shards); whole under whole-tensor sharding (ZeroRedundancyOptimizer) or no ZeRO."""
        L, xp = self.L, self.xp
        shard = L.shard_dp * L.cp
        cut = (L.zero >= 1) & xp.not_(self.eng.whole_tensor_shards)
        return largest_tensor(self.spec) / L.tp / xp.where(cut, shard, 1)

    def pipeline_buffers(self, first, last):
        """(the receive buffers a stage holds through the step, a received input's gradient
        kept after its backward until the next step, whether the schedule keeps each
        micro-batch's output): torch 2.13 pipelining/stage.py allocates once, per micro-batch,
        a buffer for each input a stage receives and each gradient it is sent (_RecvInfo,
        _make_tensor_from_meta), and forward_one_chunk keeps every output to merge at the
        step's end (`Engine.torch_pipelining`); none of these elsewhere."""
        L, xp = self.L, self.xp
        torch_pp = self.eng.torch_pipelining & self.piped
        boundary = self.tokens * self.spec.d_model / self.split
        # what crosses between stages is the residual stream, and its gradient
        one = boundary * (
            xp.where(first, 0, self.residual) + xp.where(last, 0, self.prec.grad_bytes)
        )
        received = xp.where(torch_pp, L.grad_accum * one, 0.0)
        grad = boundary * self.prec.grad_bytes
        input_grad = xp.where(torch_pp & xp.not_(first), grad, 0.0)
        return received, input_grad, torch_pp

    def _tp_forward(self):
        """Bytes alive at a row-parallel linear's output in forward under TP. DTensor on gloo:
        its partial sum and the all-reduced copy; under SP, 3 + 2/tp such tensors (measured on
        the first stage of tests/train/observe/test_rank_memory.py's tp2 pp2 runs: 2 x 8,192 B
        without SP, 4 x 8,192 B with). Megatron-style: the partial sum all-reduced in place, or
        reduce-scattered into a 1/tp shard under SP (megatron/core/tensor_parallel/mappings.py:
        _reduce, _reduce_scatter_along_first_dim)."""
        L, xp = self.L, self.xp
        whole = self.tokens * self.spec.d_model * self.e
        dtensor = xp.where(L.sp, 3 + 2 / L.tp, 2)
        in_place = xp.where(L.sp, 1 + 1 / L.tp, 1)
        tensors = xp.where(self.eng.sp_keeps_gathered_input, dtensor, in_place)
        return xp.where(L.tp > 1, whole * tensors, 0.0)

    def _whole_vocabulary_grad(self, first):
        """Under DTensor's TP the vocabulary-parallel embedding's local gradient covers the
        whole vocabulary (measured, torch 2.13: a (V, d) fp32 .grad on each rank of
        tests/train/observe/test_rank_memory.py's tp2 pp2 run, beside its (V/tp, d) shard)."""
        L, xp, spec = self.L, self.xp, self.spec
        on = first & self.piped & self.eng.sp_keeps_gathered_input & (L.tp > 1)
        return xp.where(
            on, (spec.vocab_size - self.vocab) * spec.d_model * self.prec.grad_bytes, 0.0
        )
