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
GPU, tests/train/observe/test_rank_memory.py for every layout the trainer runs):

- a micro-batch's backward start: every micro-batch in flight holds its saved tensors; on the
  stage with the head, what the framework's loss kernel keeps of the logits and creates at its
  backward's start (`engines.LOSS_KERNELS`: torch's cross-entropy keeps the logits and fp32
  log-probabilities and makes two fp32 gradients, one more under DTensor's loss parallel; a
  fused linear cross-entropy keeps the head's gradients and holds one chunk of logits);
  on the others, a block's MLP gradients. The gradients of the micro-batches done so far are
  alive (unsharded while an engine accumulates without sync), and under torch's pipelining
  the outputs the schedule keeps to merge at the step's end. The micro-batches compared: the
  first, the second (the first with gradients), the one after the warm-up (most in flight
  with the most done) and the last -- on one stage only the first and the last;
- full recomputation on one GPU's stage: the last layer rebuilt beside the head's gradient;
- FSDP2's units in backward (the last block's and the first block's), on one stage;
- a forward at a row-parallel collective, under tensor parallelism with a pipeline;
- backward end (every gradient; a tied embedding's two gradients summed; the reduced shard an
  engine keeps beside its gradient buffer, `Engine.keeps_reduced_grad_shard`) and the
  optimizer step (the update's scratch, the size of the largest tensor).

Beside them: under torch's pipelining its receive buffers (torch 2.13 pipelining/stage.py
allocates one per micro-batch for each input received and gradient sent, and keeps them), the
engine's gradient buckets or gathered parameters (and under DeepSpeed's ZeRO-3 its reduce
buffer), the framework's runtime overhead. Offloaded
state is counted on the host, not the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import (
    FULL,
    GPIPE,
    SELECTIVE_OP,
    PlanNumbers,
)
from trainbudget.core.parallel.memory.gpu_terms import GpuTerms
from trainbudget.core.parallel.memory.parallel_memory import (
    ModelState,
    in_flight_micro_batches,
)
from trainbudget.core.single.peak_memory import (
    PhaseMemory,
    tied_gradient_sum_bytes,
    update_scratch_bytes,
)
from trainbudget.core.spec.frameworks import Framework
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import Optimizer, Precision


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
    for which in ("last micro-batch", "after the pipeline warm-up", "first micro-batch")
)
"""The micro-batches whose backward start can hold the most: the last (every earlier one's
gradients), the first after a pipeline's warm-up (the most in flight with the most done; at
least the second, the first with gradients) and the first (no gradients yet). Micro-batch k
of m > 1 holds min(in flight, m - k) micro-batches' saved tensors and k kept outputs beside
the gradients: rising in k up to the warm-up's end, then falling or rising to the last, so
these three bound every k. For one stage they differ only in the gradients."""


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


class _Model(GpuTerms):
    """`gpu_peak` for one plan or grid: its terms (`GpuTerms`) composed into phases."""

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
        self.units = self._units()  # the stage's FSDP2 units, for the phases that read them
        saved, output, transient = self.micro_batch(layers, first, last)
        gathered = self.gathered(layers, first, last)
        phases = self.backward_phases(
            stage_index, first, last, state, base, gathered, saved, output, transient
        )
        phases += self.end_phases(state, base, first, last, output)
        if self.piped is not True:  # the phases of a GPU holding the whole depth
            phases += self.one_stage_phases(state, full_grads, base, gathered, saved)
        return GpuPeak(stage=stage, phases=tuple(phases), state=state, host_bytes=host)

    def backward_phases(
        self, stage_index, first, last, state, base, gathered, saved, output, transient
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
            self.unsharded_grads,
            sharded_grads,
        )
        accumulated = accumulated + self._whole_vocabulary_grad(first)
        received, input_grad, torch_pp = self.pipeline_buffers(first, last)
        kept = xp.where(torch_pp, output, 0.0)
        forward = self._tp_forward()
        # the warm-up's end (in micro-batches: under the interleaved schedule a fraction), or
        # the second micro-batch where the warm-up holds them all (0 when there is one)
        warm_up_end = m - in_flight
        after_warm_up = xp.where(warm_up_end > 0, warm_up_end, xp.minimum(1, m - 1))
        micro_batches = (
            (BACKWARD_STARTS[0], m - 1),
            (BACKWARD_STARTS[1], after_warm_up),
            (BACKWARD_STARTS[2], 0),
        )
        if piped is False:  # one stage: the backward starts differ only in the gradients
            micro_batches = micro_batches[::2]
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
            if piped is not False and name != BACKWARD_STARTS[0]:
                # under TP with a pipeline, a forward at the row-parallel collective: the
                # last of the warm-up (after no backward), or, 1F1B, the one after the
                # warm-up's backward (when forwards remain: m > in flight)
                warm_up = name == BACKWARD_STARTS[2]
                steady = (L.schedule != GPIPE) & (m - in_flight > 0)
                runs = piped & (L.tp > 1) & (warm_up or steady)
                at = "the warm-up's last" if warm_up else "after the warm-up"
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
        units, u = self.units
        received, input_grad, torch_pp = self.pipeline_buffers(first, last)
        buffers = base + received + m * input_grad
        # one stage's caller holds the logits through the step; torch's pipelining keeps every
        # micro-batch's output until the step ends
        acts = xp.where(
            piped,
            xp.where(torch_pp, m * output, 0.0),
            self.tokens * self.logit_vocab * self.e * self.loss.keeps_logits,
        )
        tied = xp.where(piped, 0.0, tied_gradient_sum_bytes(spec, self.g, L.tp))
        fused = eng.fused_update & self.opt.fused_kernel & (not prec.master_bytes)
        scratch = update_scratch_bytes(prec, self.opt, fused, xp)
        common = dict(
            params_bytes=state.params_bytes,
            grads_bytes=state.grads_bytes
            + self._whole_vocabulary_grad(first)
            + self.reduced_grad_shard(),
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

    def one_stage_phases(self, state, full_grads, base, gathered, saved):
        """On a GPU holding the whole depth (pp = 1): full recomputation's first rebuilt layer
        (beside the head's gradient and the residual stream's), and FSDP2's units in backward
        (`Engine.unit_backward`): the last block's and the first block's; zero bytes where
        they do not occur."""
        L, xp, spec, eng = self.L, self.xp, self.spec, self.eng
        units, u = self.units
        m = L.grad_accum
        accumulated = xp.where(
            m > 1, xp.where(eng.accumulates_unsharded, self.unsharded_grads, state.grads_bytes), 0.0
        )
        tokens, d, e, g, w = self.tokens, spec.d_model, self.e, self.g, self.w
        loss_saved = self.loss_saved
        logits = tokens * self.logit_vocab * e * self.loss.keeps_logits
        full = (L.recompute == FULL) & xp.not_(self.piped)
        rebuilt = saved - tokens * self.stats / self.split - loss_saved + self.working
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
            activations_bytes=saved - loss_saved,
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
