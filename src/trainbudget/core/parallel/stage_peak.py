"""The peak of one training step on one pipeline stage's rank, phase by phase: the stage's part
of the model (`parallel_memory.stage_params`: its layers, the embeddings on the first, the final
norm and head -- a copy of a tied embedding -- on the last) and the micro-batches the schedule
keeps in flight there (`parallel_memory.in_flight_micro_batches`: all of them under GPipe,
pp - i on stage i under 1F1B), what torch.distributed.pipelining runs (train.pipeline).

Two moments compete, measured with MemTracker on each rank of tests/train/test_rank_memory.py:

- first backward: every micro-batch in flight holds its saved tensors, no gradient exists yet;
  the last stage is at the start of its loss backward (the single device's two fp32
  vocabulary-sized gradients), the others inside a block's backward (`MLP_BACKWARD_GRADIENTS`,
  beside the gradient the next stage sent);
- a later backward (several micro-batches): the stage's gradients accumulated from the earlier
  micro-batches, the output of each of them (the schedule keeps every micro-batch's output to
  merge them at the step's end: forward_one_chunk's save_forward_output, torch 2.13
  pipelining/stage.py), and the micro-batches still in flight -- under 1F1B a forward runs
  after each backward, so the first stage holds pp of them again.

Covered (`covers_stage`): pipeline parallelism alone (dp, tp, cp, ep 1), GPipe or 1F1B, no
recomputation; the rest is `parallel_memory`'s.
"""

from __future__ import annotations

from trainbudget.core.parallel.parallel_memory import (
    in_flight_micro_batches,
    stage_params,
)
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.parallel.rank_peak import pipeline_stage
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
    """Whether `stage_peak` models `plan`: pipeline parallel alone, GPipe or 1F1B."""
    return (
        plan.pp > 1
        and (plan.dp, plan.tp, plan.cp, plan.ep, plan.vpp) == (1, 1, 1, 1, 1)
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
    stage = pipeline_stage(stage_index, plan.pp)
    n = stage_params(spec, plan, stage).dense
    layers = plan.stage_layer_counts(spec.n_layers)[stage_index]
    last = stage_index == plan.pp - 1
    e, tokens = prec.activation_bytes, seq_len * plan.micro_batch
    acts = activation_memory(
        spec,
        seq_len=seq_len,
        micro_batch=plan.micro_batch,
        activation_bytes=e,
        flash_attention=True,
    )
    stats = LAYERNORM_STATS_BYTES if spec.norm == "layernorm" else RMSNORM_STATS_BYTES
    logits = tokens * spec.vocab_size * e
    # one micro-batch's saved tensors: its layers' (with the norms' statistics), and either the
    # head's (final norm input, head input, logits, the loss's fp32 log-probabilities) or the
    # stage's output, kept for the backward the next stage's gradient starts
    saved = layers * (acts.per_layer.total_bytes + 2 * tokens * stats)
    if last:
        output = logits
        saved += tokens * stats + acts.head_bytes + logits + tokens * spec.vocab_size * FP32_BYTES
        # the loss backward's fp32 gradients of the log-probabilities and of the logits
        transient = 2 * tokens * spec.vocab_size * FP32_BYTES
    else:
        output = tokens * spec.d_model * e
        saved += output
        # inside a block's backward, beside the gradient of the output the next stage sent
        hidden = MLP_BACKWARD_GRADIENTS * tokens * spec.d_ff * prec.grad_bytes
        transient = hidden + tokens * spec.d_model * prec.grad_bytes
    params, grads = n * prec.weight_bytes, n * prec.grad_bytes
    state = n * (prec.master_bytes + opt.state_bytes_per_param(prec))
    in_flight = in_flight_micro_batches(plan, stage_index=stage_index)
    m = plan.grad_accum
    common = dict(params_bytes=params, optimizer_bytes=state, temporaries_bytes=transient)
    # the backward of micro-batch k: k done (their gradients summed, their outputs kept), as
    # many in flight as the schedule has run forward and not yet backward
    phases = [
        PhaseMemory(
            phase="first backward" if k == 0 else f"backward {k + 1} of {m}",
            grads_bytes=grads if k else 0.0,
            activations_bytes=min(in_flight, m - k) * saved + k * output,
            **common,
        )
        for k in range(m)
    ]
    step = dict(common, temporaries_bytes=0.0)
    phases.append(
        PhaseMemory(phase="optimizer step", grads_bytes=grads, activations_bytes=m * output, **step)
    )
    return PeakMemory(phases=tuple(phases))
