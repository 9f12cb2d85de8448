"""The peak of one training step on one GPU of any plan, phase by phase: the one memory model
behind `estimate`, `plan`, `report`, the planner's `fits` and the trainer's prediction.

Written once over `Ops` (core.ops): the same function takes one plan (numbers) or the planner's
grid (numpy arrays, one element per plan). A GPU holds its pipeline stage's share of the model
(`parallel_memory.rank_params`: its layers, the embeddings on the first stage, the final norm
and head on the last; tensor- and expert-parallel shards), its model state sharded by the ZeRO
stage over the shard group (`parallel_memory.zero_model_state`), the buffers of the engine that
runs that stage (`core.spec.engines`, named per ZeRO stage by the framework row), and the
activations of the micro-batches its schedule keeps in flight
(`parallel_memory.in_flight_micro_batches`).

The moments that compete (each measured with torch's MemTracker: the profile matrix for one
GPU, tests/train/test_rank_memory.py for every layout the trainer runs):

- a micro-batch's backward start: every micro-batch in flight holds its saved tensors; on the
  stage with the head, the logits, the loss's fp32 log-probabilities and the two fp32
  vocabulary-sized gradients its backward creates (one more under DTensor's loss parallel);
  on the others, a block's MLP gradients. The gradients of the micro-batches done so far are
  alive (unsharded while an engine accumulates without sync), and under a pipeline the outputs
  the schedule keeps to merge at the step's end. The micro-batches compared: the first, the
  second (the first with gradients), the one after the warm-up (most in flight with the most
  done) and the last;
- full recomputation on one GPU's stage: the last layer rebuilt beside the head's gradient;
- FSDP2's units in backward (the last block's and the first block's), on one stage;
- a forward at a row-parallel collective, under tensor parallelism with a pipeline;
- backward end (every gradient; a tied embedding's two gradients summed) and the optimizer
  step (the update's scratch, the size of the largest tensor).

Beside them: the pipeline's receive buffers (torch 2.13 pipelining/stage.py allocates one per
micro-batch for each input received and gradient sent, and keeps them), the engine's gradient
buckets or gathered parameters, the framework's runtime overhead. Offloaded state is counted on
the host, not the GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import (
    FULL,
    GPIPE,
    ON_GPU,
    SELECTIVE,
    SELECTIVE_OP,
    PlanNumbers,
)
from trainbudget.core.parallel.parallel_memory import (
    ModelState,
    in_flight_micro_batches,
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
    PhaseMemory,
    largest_tensor,
    loss_backward_bytes,
    norm_stats_bytes,
    tied_gradient_sum_bytes,
    update_scratch_bytes,
)
from trainbudget.core.spec.engines import ENGINE_COLUMNS, get_engine, get_loss_kernel
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision

MLP_BACKWARD_GRADIENTS = 2
"""Hidden-sized (tokens x d_ff) gradients alive inside a block's MLP backward on a stage without
the loss: of the activation's output and of its input (measured: the TEMP MemTracker reports on
the first stage of tests/train/test_rank_memory.py's pp2 runs, 2 x 64 x 64 x 4 bytes)."""

LOSS_PARALLEL_TEMPORARIES = 1
"""fp32 tensors of the rank's logits' size (tokens x V/tp) beyond the single device's two
gradients that DTensor's loss parallel holds at its backward's start: its log-softmax backward
handler (torch.distributed.tensor.parallel.loss_parallel, torch 2.13 _loss_ops) forms
exp(log-probs) beside the gradients rather than in place (an attribution, not traced: the one
term that closes the gap on tests/train/test_rank_memory.py's tp2 run, +1.0 % with it, +10 %
without)."""


@dataclass(frozen=True, kw_only=True)
class GpuPeak:
    """One GPU's step, phase by phase (numbers, or arrays of plans)."""

    stage: str
    phases: tuple[PhaseMemory, ...]
    state: ModelState
    """The model state on the GPU at rest (sharded; without what is offloaded)."""
    host_bytes: Any
    """Offloaded to CPU or NVMe (not on the GPU)."""

    @property
    def total_bytes(self) -> Any:
        """The peak: the largest phase."""
        totals = [p.total_bytes for p in self.phases]
        peak = totals[0]
        for t in totals[1:]:
            peak = _maximum(peak, t)
        return peak

    @property
    def peak(self) -> PhaseMemory:
        """The phase at the peak (one plan: the first of the largest)."""
        return max(self.phases, key=lambda p: p.total_bytes)


def _maximum(a: Any, b: Any) -> Any:
    if hasattr(a, "shape") or hasattr(b, "shape"):
        import numpy as np

        return np.maximum(a, b)
    return max(a, b)


def engine_columns(framework: Framework, zero: Any, alone: Any, xp: Ops = SCALAR) -> Any:
    """The engine row's columns for each plan: `framework.engines[0]` where no data-parallel
    wrapper runs (`alone`: one rank in the data-parallel group), else the row for its ZeRO
    stage (1 + zero). Numbers for one plan, arrays for a grid (a column the rows agree on
    stays one number)."""
    rows = [get_engine(name) for name in framework.engines]
    out = {}
    for column in ENGINE_COLUMNS:
        values = [getattr(r, column) for r in rows]
        value = values[4]
        if len(set(values[1:])) > 1:
            for stage in (2, 1, 0):
                value = xp.where(zero == stage, values[stage + 1], value)
        if len(set(values)) > 1:
            value = xp.where(alone, values[0], value)
        out[column] = value
    return SimpleNamespace(**out)


def gpu_peak(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    stage: str,
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework,
    xp: Ops = SCALAR,
    stage_index: Any = None,
    layers: Any = None,
    optimizer_share: Any = 1.0,
) -> GpuPeak:
    """The phases of one step on a GPU of pipeline stage `stage` ('only' for pp = 1, 'first',
    'middle' -- the second stage's schedule with the largest middle stage's layers, the most
    any middle stage holds -- or 'last') of plan(s) `L`. `stage_index` and `layers`: a
    particular stage instead (the trainer's ranks). `optimizer_share`: the optimizer state's
    multiple of the even share on this GPU (whole-tensor sharding: `rank_peak`)."""
    m = _Model(spec, L, seq_len, precision, optimizer, framework, xp)
    return m.stage(stage, stage_index, layers, optimizer_share)


def stage_peaks(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    stages: tuple[str, ...],
    seq_len: int,
    precision: Precision,
    optimizer: Optimizer,
    framework: Framework,
    xp: Ops = SCALAR,
    optimizer_share: Any = 1.0,
) -> dict[str, GpuPeak]:
    """`gpu_peak` of each named stage, the terms they share computed once."""
    m = _Model(spec, L, seq_len, precision, optimizer, framework, xp)
    return {name: m.stage(name, None, None, optimizer_share) for name in stages}


BACKWARD_STARTS = tuple(
    f"backward start ({which})"
    for which in (
        "last micro-batch",
        "after the pipeline warm-up",
        "second micro-batch",
        "first micro-batch",
    )
)
"""The micro-batches whose backward start can hold the most: the last (every earlier one's
gradients), the first after a pipeline's warm-up (the most in flight with the most done), the
second (the first with gradients) and the first. For one stage they differ only in the
gradients."""


@dataclass(frozen=True, kw_only=True)
class _Occurring(PhaseMemory):
    """A phase that occurs in some plans of a grid only: zero bytes in the others."""

    occurs: Any

    @property
    def total_bytes(self) -> Any:
        return super().total_bytes * self.occurs


def _occurs(condition: Any, phase: PhaseMemory, xp: Ops) -> PhaseMemory:
    """`phase` where `condition` holds, a phase of zero bytes elsewhere (a moment that does
    not occur in that plan): for one plan its parts zeroed, for a grid its total masked."""
    if xp.is_array:
        return _Occurring(**vars(phase), occurs=condition)
    if condition:
        return phase
    return replace(phase, **dict.fromkeys(_PARTS, 0.0))


_PARTS = (
    "params_bytes",
    "grads_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "temporaries_bytes",
    "buffers_bytes",
)


_NO_STATE = ModelState(
    params_bytes=0.0, grads_bytes=0.0, master_bytes=0.0, optimizer_state_bytes=0.0
)


class _Model:
    """The terms of `gpu_peak` for one plan or grid (a namespace for its shared inputs)."""

    def __init__(self, spec, L, seq_len, prec, opt, framework, xp):
        self.spec, self.L, self.seq_len, self.prec, self.opt = spec, L, seq_len, prec, opt
        self.fw, self.xp = framework, xp
        eng = engine_columns(framework, L.zero, L.dp * L.cp == 1, xp)
        self.eng = eng
        self.e, self.w = prec.activation_bytes, prec.weight_bytes
        self.g = framework.main_grad_bytes or prec.grad_bytes
        self.tokens = seq_len * L.micro_batch / L.cp
        self.split = xp.where(L.sp, L.tp, 1)
        self.vocab = spec.vocab_size / L.tp
        self.stats = norm_stats_bytes(spec)
        self.dtensor_loss = eng.sp_keeps_gathered_input & (L.tp > 1)
        self.loss = get_loss_kernel(framework.loss_kernel)
        # the residual stream's bytes: the weights' under autocast (activations.residual_bytes)
        self.residual = residual_bytes(self.e, prec.weight_bytes)

    def stage(self, stage, stage_index, layers, optimizer_share) -> GpuPeak:
        """`gpu_peak` of one stage (see there). A named stage says whether the GPU holds the
        first and last layers and whether a pipeline runs ('only': both, no pipeline), so on a
        grid those are numbers, not arrays; a stage given by index reads them from the plan."""
        L, spec = self.L, self.spec
        if stage_index is None:
            first, last = stage in ("only", "first"), stage in ("only", "last")
            self.piped = stage != "only"
            stage_index = {"only": 0, "first": 0, "middle": 1}.get(stage, L.pp - 1)
        else:
            first, last, self.piped = stage_index == 0, stage_index == L.pp - 1, L.pp > 1
        if layers is None:
            layers = spec.n_layers if stage == "only" else L.stage_layers(spec.n_layers, stage)
        state, host, full_grads, base = self.state(layers, first, last, optimizer_share)
        saved, output, transient = self.micro_batch(layers, first, last)
        gathered = self.gathered(layers, first, last)
        phases = self.backward_phases(
            stage_index, first, last, state, full_grads, base, gathered, saved, output, transient
        )
        phases += self.end_phases(state, base, first, last, output)
        if self.piped is not True:  # the phases of a GPU holding the whole depth
            phases += self.one_stage_phases(state, full_grads, base, gathered, saved)
        return GpuPeak(stage=stage, phases=tuple(phases), state=state, host_bytes=host)

    # -- model state and the engine's buffers ------------------------------------------------

    def state(self, layers, first, last, optimizer_share):
        """(model state on the GPU, bytes offloaded, the rank's unsharded gradients, the
        buffers every phase holds)."""
        L, xp, eng, prec = self.L, self.xp, self.eng, self.prec
        p = rank_params(self.spec, L, layers=layers, first=first, last=last, xp=xp)
        shard = L.shard_dp * L.cp  # ZeRO's group: dp * cp, or the HSDP shard times cp
        expert_shard = xp.maximum(1, shard // L.ep)
        kw = dict(precision=prec, optimizer=self.opt, grad_bytes=self.g, xp=xp)
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
        state = ModelState(
            params_bytes=xp.where(off_params, 0.0, params),
            grads_bytes=dense.grads_bytes + experts.grads_bytes,
            master_bytes=xp.where(off_opt, 0.0, master),
            optimizer_state_bytes=xp.where(off_opt, 0.0, opt_state),
        )
        n = p.dense + p.experts
        self.rank_n = n
        full_grads = n * self.g
        wrapped = xp.not_(L.dp * L.cp == 1)
        # DDP's buckets copy every gradient but the experts' (train.expert_parallel has DDP
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
        base = buckets + xp.where(zero3, layer_gather, 0.0) + self.fw.runtime_overhead_bytes
        return state, host, full_grads, base

    def gathered(self, layers, first, last):
        """Parameters gathered whole beside their shard until backward ends (FSDP2 without
        resharding after forward; under a pipeline, FSDP2 for the whole step)."""
        L, xp, eng = self.L, self.xp, self.eng
        if eng.gathered_until_backward is False and eng.pipeline_keeps_unsharded is False:
            return 0.0
        sharded = xp.not_(L.dp * L.cp == 1)
        keeps = eng.gathered_until_backward | (eng.pipeline_keeps_unsharded & self.piped)
        return xp.where(keeps & sharded, self.rank_n * self.w, 0.0)

    # -- activations ---------------------------------------------------------------------------

    @property
    def loss_saved_fp32(self):
        """The loss kernel's fp32 logit-sized tensors saved for backward."""
        return self.loss.saved_fp32_tensors * self.tokens * self.vocab * FP32_BYTES

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
        recomputed = L.recomputed_layers(layers)
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
        logits = self.tokens * self.vocab * e
        head_input = self.tokens * spec.d_model * e
        # the final norm's input (the residual stream), the head's input (whole under
        # DTensor's SP: the column-parallel head gathers it), under autocast the head's
        # 16-bit weight copy, and what the loss kernel keeps of the logits
        head = (
            self.tokens * spec.d_model * self.residual / self.split
            + xp.where(self.eng.sp_keeps_gathered_input, head_input, head_input / self.split)
            + weight_copy_bytes(self.vocab * spec.d_model, e, self.prec.weight_bytes)
            + self.tokens * self.stats / self.split
            + logits * self.loss.keeps_logits
            + self.loss_saved_fp32
        )
        # a stage that sends its output on keeps it until its backward (the schedule holds it)
        saved = per + xp.where(last, head, checkpoint)
        output = xp.where(last, logits, checkpoint)
        loss = loss_backward_bytes(
            self.tokens,
            self.vocab,
            kernel=self.loss,
            activation_bytes=e,
            extra=xp.where(self.dtensor_loss, LOSS_PARALLEL_TEMPORARIES, 0),
        )
        d_ff = spec.d_ff_expert if spec.is_moe and not spec.d_ff else spec.d_ff
        mlp = MLP_BACKWARD_GRADIENTS * self.tokens * d_ff / L.tp * self.prec.grad_bytes
        transient = xp.where(last, loss, mlp)
        return saved, output, transient

    # -- phases --------------------------------------------------------------------------------

    def backward_phases(
        self, stage_index, first, last, state, full_grads, base, gathered, saved, output, transient
    ):
        """A micro-batch's backward start, for the micro-batches that can hold the most (the
        module docstring), and under TP with a pipeline a forward at the row-parallel
        collective."""
        L, xp, eng = self.L, self.xp, self.eng
        m = L.grad_accum
        piped = self.piped
        # one stage runs its micro-batches one after the other, whatever the schedule's name
        in_flight = xp.where(piped, in_flight_micro_batches(L, xp, stage_index), 1)
        op = L.recompute == SELECTIVE_OP
        sharded_grads = state.grads_bytes
        accumulated = xp.where(
            eng.accumulates_unsharded | (eng.pipeline_keeps_unsharded & piped),
            full_grads,
            sharded_grads,
        )
        accumulated = accumulated + self._whole_vocabulary_grad(first)
        received, input_grad, torch_pp = self.pipeline_buffers(first, last)
        kept = xp.where(torch_pp, output, 0.0)
        forward = self._tp_forward()
        after_warm_up = xp.maximum(m - in_flight, 0)
        micro_batches = (
            (BACKWARD_STARTS[0], m - 1),
            (BACKWARD_STARTS[1], after_warm_up),
            (BACKWARD_STARTS[2], xp.minimum(1, m - 1)),
            (BACKWARD_STARTS[3], 0),
        )
        if piped is False:  # one stage: the backward starts differ only in the gradients
            micro_batches = micro_batches[::3]
        phases = []
        for name, k in micro_batches:
            held = xp.minimum(in_flight, m - k) * saved + k * kept + self.working * (piped | op)
            common = dict(
                params_bytes=state.params_bytes,
                grads_bytes=xp.where(k > 0, accumulated, 0.0),
                optimizer_bytes=state.optimizer_bytes,
                activations_bytes=held,
                buffers_bytes=base + gathered + received + k * input_grad,
            )
            phases.append(PhaseMemory(phase=name, temporaries_bytes=transient, **common))
            if piped is not False and name in (BACKWARD_STARTS[1], BACKWARD_STARTS[3]):
                # under TP with a pipeline, a forward at the row-parallel collective: the
                # last of the warm-up (after no backward), or the one after backward k (1F1B)
                runs = piped & (L.tp > 1) & ((k == 0) | (L.schedule != GPIPE) & (k > 0))
                at = "the warm-up's last" if name == BACKWARD_STARTS[3] else "after the warm-up"
                phases.append(
                    _occurs(
                        runs,
                        PhaseMemory(
                            phase=f"forward at a tensor-parallel collective ({at})",
                            temporaries_bytes=forward,
                            **common,
                        ),
                        xp,
                    )
                )
        return phases

    def end_phases(self, state, base, first, last, output):
        """Backward end (every gradient, a tied embedding's two summed) and the optimizer
        step (the update's scratch)."""
        L, xp, spec, prec, eng = self.L, self.xp, self.spec, self.prec, self.eng
        m = L.grad_accum
        piped = self.piped
        units, u = self._units()
        received, input_grad, torch_pp = self.pipeline_buffers(first, last)
        buffers = base + received + m * input_grad
        # one stage's caller holds the logits through the step; torch's pipelining keeps every
        # micro-batch's output until the step ends
        acts = xp.where(
            piped,
            xp.where(torch_pp, m * output, 0.0),
            self.tokens * self.vocab * self.e * self.loss.keeps_logits,
        )
        tied = xp.where(piped, 0.0, tied_gradient_sum_bytes(spec, self.g, L.tp))
        fused = eng.fused_update & self.opt.fused_kernel & (not prec.master_bytes)
        scratch = update_scratch_bytes(prec, self.opt, fused, xp)
        common = dict(
            params_bytes=state.params_bytes,
            grads_bytes=state.grads_bytes + self._whole_vocabulary_grad(first),
            optimizer_bytes=state.optimizer_bytes,
            activations_bytes=acts,
        )
        return [
            PhaseMemory(
                phase="backward end",
                temporaries_bytes=tied,
                # FSDP2's root: gathered again for the head's backward, its gradients
                # unsharded until its post-backward at the very end
                buffers_bytes=buffers + xp.where(units, u.root * (self.w + self.g), 0.0),
                **common,
            ),
            PhaseMemory(
                phase="optimizer step",
                temporaries_bytes=self._largest_updated_tensor() * scratch,
                buffers_bytes=buffers,
                **common,
            ),
        ]

    def _units(self):
        """(whether FSDP2's units back up one by one here, their sizes on this GPU): the root
        (embeddings, final norm, head), a block (its experts apart under expert parallelism,
        each a unit of its own: train.expert_parallel.fully_shard_experts), the root's
        gradients, and a block in backward with the next prefetched (gathered, unless the
        engine keeps everything gathered until backward ends) and its unsharded gradients."""
        L, xp, spec, eng, g, w = self.L, self.xp, self.spec, self.eng, self.g, self.w
        units = eng.unit_backward & xp.not_(L.dp * L.cp == 1) & xp.not_(self.piped)
        p = count_params(spec)
        root = (p.embedding_token + p.head) / L.tp + p.embedding_position + p.final_norm
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

    def one_stage_phases(self, state, full_grads, base, gathered, saved):
        """On a GPU holding the whole depth (pp = 1): full recomputation's first rebuilt layer
        (beside the head's gradient and the residual stream's), and FSDP2's units in backward
        (`Engine.unit_backward`): the last block's and the first block's; zero bytes where
        they do not occur."""
        L, xp, spec, eng = self.L, self.xp, self.spec, self.eng
        units, u = self._units()
        m = L.grad_accum
        accumulated = xp.where(
            m > 1, xp.where(eng.accumulates_unsharded, full_grads, state.grads_bytes), 0.0
        )
        tokens, d, e, g, w = self.tokens, spec.d_model, self.e, self.g, self.w
        vocab_fp32 = self.loss_saved_fp32
        logits = tokens * self.vocab * e * self.loss.keeps_logits
        full = (L.recompute == FULL) & xp.not_(self.piped)
        rebuilt = saved - tokens * self.stats / self.split - vocab_fp32 + self.working
        head_grads = self.vocab * d * self.prec.grad_bytes
        common = dict(params_bytes=state.params_bytes, optimizer_bytes=state.optimizer_bytes)
        recomputation = PhaseMemory(
            phase="first recomputation",
            grads_bytes=accumulated + xp.where(units, 0.0, head_grads),
            activations_bytes=rebuilt,
            temporaries_bytes=tokens * d * self.prec.grad_bytes
            + xp.where(units, u.root_grads, 0.0),
            buffers_bytes=base + gathered + xp.where(units, u.root * w + u.blocks, 0.0),
            **common,
        )
        last_block = PhaseMemory(
            phase="last block backward",
            grads_bytes=accumulated,
            activations_bytes=saved - vocab_fp32,
            temporaries_bytes=u.root_grads,
            buffers_bytes=base + gathered + u.blocks,
            **common,
        )
        first_block = PhaseMemory(
            phase="first block backward",
            # every other block's gradients reduce-scattered into their shards
            grads_bytes=(self.rank_n - u.root - u.block) * g * state.grads_bytes / full_grads,
            # the block's saved tensors and its input, the logits the caller holds
            activations_bytes=self.layer_bytes + tokens * d * e + logits,
            temporaries_bytes=u.root_grads + tokens * d * g,
            buffers_bytes=base + u.root * w + u.block * (w + g),
            **common,
        )
        return [
            _occurs(full, recomputation, xp),
            _occurs(units & xp.not_(full), last_block, xp),
            _occurs(units, first_block, xp),
        ]

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
        the first stage of tests/train/test_rank_memory.py's tp2 pp2 runs: 2 x 8,192 B without
        SP, 4 x 8,192 B with). Megatron-style: the partial sum all-reduced in place, or
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
        tests/train/test_rank_memory.py's tp2 pp2 run, beside its (V/tp, d) shard)."""
        L, xp, spec = self.L, self.xp, self.spec
        on = first & self.piped & self.eng.sp_keeps_gathered_input & (L.tp > 1)
        return xp.where(
            on, (spec.vocab_size - self.vocab) * spec.d_model * self.prec.grad_bytes, 0.0
        )
