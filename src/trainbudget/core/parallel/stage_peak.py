"""The peak of one training step on one pipeline stage's rank, phase by phase: the stage's part
of the model (`parallel_memory.stage_params`: its layers, the embeddings on the first, the final
norm and head -- a copy of a tied embedding -- on the last) and the micro-batches the schedule
keeps in flight there (`parallel_memory.in_flight_micro_batches`: all of them under GPipe,
pp - i on stage i under 1F1B), what torch.distributed.pipelining runs (train.pipeline).

Three moments compete, measured with MemTracker on each rank of tests/train/test_rank_memory.py:

- first backward: every micro-batch in flight holds its saved tensors, no gradient exists yet;
  the last stage is at the start of its loss backward (the single device's two fp32
  vocabulary-sized gradients, and loss parallel's one more under tensor parallelism), the
  others inside a block's backward (`MLP_BACKWARD_GRADIENTS`);
- a later backward (several micro-batches): the stage's gradients accumulated from the earlier
  micro-batches, the output of each of them (the schedule keeps every micro-batch's output to
  merge them at the step's end: forward_one_chunk's save_forward_output, torch 2.13
  pipelining/stage.py), and the micro-batches still in flight -- under 1F1B a forward runs
  after each backward, so the first stage holds pp of them again;
- under tensor parallelism, a forward at a row-parallel linear's collective
  (`tp_forward_temporaries_bytes`).

Beside them, the schedule's receive buffers and the received inputs' gradients: torch
2.13's pipelining/stage.py allocates, once, a buffer per micro-batch for each input a stage
receives and each gradient it is sent (_RecvInfo.buffer, made by _make_tensor_from_meta) and
keeps them for the run; a received input is a leaf whose gradient autograd accumulates on the
buffer, set to None only by clear_runtime_states at the start of the next step
(schedules.py: PipelineScheduleSingle.step). Under tensor parallelism each rank holds its shard
(`rank_peak.tensor_shard`, the first stage's embedding gradient whole: measured), sequence
parallelism splitting the norms' inputs and what crosses between stages.

Covered (`covers_stage`): pipeline parallelism with or without tensor (and sequence)
parallelism, no data, context or expert parallelism, GPipe or 1F1B, no recomputation; the
rest is `parallel_memory`'s.
"""

from __future__ import annotations

from dataclasses import replace

from trainbudget.core.parallel.parallel_memory import (
    in_flight_micro_batches,
    stage_params,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.rank_peak import (
    LOSS_PARALLEL_TEMPORARIES,
    layer_sequence_split_bytes,
    pipeline_stage,
    tensor_shard,
)
from trainbudget.core.single.activations import FP32_BYTES, activation_memory
from trainbudget.core.single.peak_memory import (
    LAYERNORM_STATS_BYTES,
    RMSNORM_STATS_BYTES,
    PeakMemory,
    PhaseMemory,
)
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import get_precision, get_trainable_optimizer

MLP_BACKWARD_GRADIENTS = 2
"""Hidden-sized (tokens x d_ff) gradients alive inside a block's MLP backward on a stage without
the loss: of the activation's output and of its input (measured: the TEMP MemTracker reports on
the first stage of the test's pp2 runs, 2 x 64 x 64 x 4 bytes and 128 more)."""


def covers_stage(plan: Plan) -> bool:
    """Whether `stage_peak` models `plan`: pipeline parallel, GPipe or 1F1B, with or without
    tensor (and sequence) parallelism inside the stages, no data parallelism."""
    return (
        plan.pp > 1
        and (plan.dp, plan.cp, plan.ep, plan.vpp) == (1, 1, 1, 1)
        and plan.schedule in ("gpipe", "1f1b")
        and plan.recompute == "none"
    )


def stage_peak(
    spec: ModelSpec,
    plan: Plan,
    *,
    stage_index: int,
    precision: str,
    optimizer: str,
    seq_len: int,
) -> PeakMemory:
    """The phases of one step on the rank of stage `stage_index` of `plan` (`covers_stage`),
    with a fused optimizer update (no scratch: the trainer's Adam and AdamW)."""
    prec, opt = get_precision(precision), get_trainable_optimizer(optimizer)
    first, last = stage_index == 0, stage_index == plan.pp - 1
    n = stage_params(spec, plan, pipeline_stage(stage_index, plan.pp)).dense
    m = plan.grad_accum
    layers = plan.stage_layer_counts(spec.n_layers)[stage_index]
    saved, output, transient = _micro_batch(
        spec, plan, prec, seq_len=seq_len, layers=layers, first=first, last=last
    )
    params, grads = n * prec.weight_bytes, n * prec.grad_bytes
    if first:
        grads += _whole_vocabulary_gradient_bytes(spec, plan.tp, prec)
    state = n * (prec.master_bytes + opt.state_bytes_per_param(prec))
    boundary = seq_len * plan.micro_batch * spec.d_model / (plan.tp if plan.sp else 1)
    # the schedule's receive buffers, one per micro-batch: inputs from the previous stage,
    # gradients from the next; and, after the first stage, each input buffer's gradient, sent
    # back and kept until the next step starts (module docstring)
    received = boundary * (
        (0 if first else prec.activation_bytes) + (0 if last else prec.grad_bytes)
    )
    input_grad = 0.0 if first else boundary * prec.grad_bytes
    in_flight = in_flight_micro_batches(plan, stage_index=stage_index)
    common = dict(params_bytes=params, optimizer_bytes=state)
    # the backward of micro-batch k: k done (their gradients summed, their outputs kept), as
    # many in flight as the schedule has run forward and not yet backward
    phases = [
        PhaseMemory(
            phase="first backward" if k == 0 else f"backward {k + 1} of {m}",
            grads_bytes=grads if k else 0.0,
            activations_bytes=min(in_flight, m - k) * saved + k * output,
            temporaries_bytes=transient,
            buffers_bytes=m * received + k * input_grad,
            **common,
        )
        for k in range(m)
    ]
    # under tensor parallelism a forward outweighs a backward's MLP gradients: the one after
    # backward k (1F1B) meets the state backward k left, the last forward of the warm-up
    # (GPipe: of every micro-batch) the first backward's, beside the row-parallel output's
    # collective (`tp_forward_temporaries_bytes`)
    forward = tp_forward_temporaries_bytes(spec, plan, prec, seq_len=seq_len)
    after = range(1, m - in_flight + 1) if plan.schedule == "1f1b" and forward else ()
    phases += [
        replace(phases[k], phase=f"forward after backward {k}", temporaries_bytes=forward)
        for k in after
    ]
    if forward:
        phases.append(replace(phases[0], phase="last warm-up forward", temporaries_bytes=forward))
    phases.append(
        PhaseMemory(
            phase="optimizer step",
            grads_bytes=grads,
            activations_bytes=m * output,
            temporaries_bytes=0.0,
            buffers_bytes=m * (received + input_grad),
            **common,
        )
    )
    return PeakMemory(phases=tuple(phases))


def _micro_batch(
    spec: ModelSpec, plan: Plan, prec, *, seq_len: int, layers: int, first: bool, last: bool
) -> tuple[float, float, float]:
    """(one micro-batch's saved tensors on a stage of `layers` layers, its output the schedule
    keeps, the
    temporaries of its backward). Under tensor parallelism each rank holds its shard
    (`rank_peak.tensor_shard`); sequence parallelism splits what TP leaves whole
    (`rank_peak.layer_sequence_split_bytes`) and what crosses between stages."""
    shard = tensor_shard(spec, plan.tp)
    e, tokens = prec.activation_bytes, seq_len * plan.micro_batch
    split = plan.tp if plan.sp else 1
    acts = activation_memory(
        shard,
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        activation_bytes=e,
        flash_attention=True,
    )
    stats = LAYERNORM_STATS_BYTES if spec.norm == "layernorm" else RMSNORM_STATS_BYTES
    per_layer = acts.per_layer.total_bytes + 2 * tokens * stats / split
    per_layer -= layer_sequence_split_bytes(spec, plan, seq_len=seq_len, activation_bytes=e)
    # the layers' saved tensors with the norms' statistics; a stage after the first keeps its
    # input in the receive buffer (counted apart)
    saved = layers * per_layer - (0 if first else tokens * spec.d_model * e / split)
    logits = tokens * shard.vocab_size * e
    if last:
        # the final norm's input (split under SP) and the head's (whole), the logits, the
        # loss's fp32 log-probabilities; the loss backward's fp32 gradients of both, and loss
        # parallel's one more (`rank_peak.LOSS_PARALLEL_TEMPORARIES`)
        head = tokens * stats / split + tokens * spec.d_model * e * (1 + 1 / split)
        saved += head + logits + tokens * shard.vocab_size * FP32_BYTES
        fp32_vocab = 2 + (LOSS_PARALLEL_TEMPORARIES if plan.tp > 1 else 0)
        return saved, logits, fp32_vocab * tokens * shard.vocab_size * FP32_BYTES
    output = tokens * spec.d_model * e / split
    # inside a block's backward: the MLP's hidden-sized gradients
    hidden = MLP_BACKWARD_GRADIENTS * tokens * shard.d_ff * prec.grad_bytes
    return saved + output, output, hidden


def tp_forward_temporaries_bytes(spec: ModelSpec, plan: Plan, prec, *, seq_len: int) -> float:
    """Bytes alive beside a block's saved tensors at its row-parallel linear's output in
    forward, under tensor parallelism (none without): its local partial sum and the all-reduced
    copy (tokens x d each); under sequence parallelism the reduce-scatter instead, 3 + 2/tp
    such tensors on gloo -- the partial sum, its copy laid out along the scattered dimension,
    the collective's working buffer, the sequence shard it returns and the residual sum
    (measured with MemTracker on the first stage of tests/train/test_rank_memory.py's tp2 pp2
    runs: 2 x 8,192 B without SP, 4 x 8,192 B with; the attribution is not traced)."""
    if plan.tp == 1:
        return 0.0
    whole = seq_len * plan.micro_batch * spec.d_model * prec.activation_bytes
    return whole * ((3 + 2 / plan.tp) if plan.sp else 2)


def _whole_vocabulary_gradient_bytes(spec: ModelSpec, tp: int, prec) -> float:
    """Bytes the vocabulary-parallel embedding's gradient holds beyond its shard: under
    tensor parallelism its local gradient covers the whole vocabulary (measured, torch 2.13:
    a (V, d) fp32 .grad on each rank of tests/train/test_rank_memory.py's tp2 pp2 run, beside
    its (V/tp, d) shard)."""
    if tp == 1:
        return 0.0
    return (spec.vocab_size - spec.vocab_size / tp) * spec.d_model * prec.grad_bytes
