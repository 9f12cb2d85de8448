"""The measured FLOPs of one step put in the core's convention (`normalise_flops`: the fused
attention backward's recomputed scores moved to recompute, causal attention scaled by the
pairs the mask keeps) and compared with the core's prediction part by part (`compare_flops`).
Pure: no torch (`profile.flops` measures, module docstring: what FlopCounterMode counts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainbudget.core.single.flops import (
    ForwardFlops,
    forward_flops,
    recompute_flops,
    training_flops,
)
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.profile.flop_parts import (
    MeasuredFlops,
    frozen,
)


@dataclass(frozen=True, kw_only=True)
class NormalisedFlops:
    """Measured FLOPs of one step in the core's convention, per part: forward (one pass),
    backward (model FLOPs: 2 x forward per matmul), recompute (hardware FLOPs only)."""

    causal: bool
    flash_attention: bool
    forward: Mapping[str, float]
    backward: Mapping[str, float]
    recompute: Mapping[str, float]

    def step(self) -> dict[str, float]:
        """Hardware FLOPs of the step per part: forward + backward + recompute."""
        return {p: self.forward[p] + self.backward[p] + self.recompute[p] for p in self.forward}

    @property
    def forward_total(self) -> float:
        return sum(self.forward.values())

    @property
    def backward_total(self) -> float:
        return sum(self.backward.values())

    @property
    def recompute_total(self) -> float:
        return sum(self.recompute.values())

    @property
    def total(self) -> float:
        return self.forward_total + self.backward_total + self.recompute_total


def _exact(numerator: int, denominator: int) -> float:
    """numerator / denominator, as an int when it divides exactly."""
    q, r = divmod(numerator, denominator)
    return q if r == 0 else numerator / denominator


def normalise_flops(measured: MeasuredFlops, *, causal: bool = False) -> NormalisedFlops:
    """Put FlopCounterMode's counts in the core's convention (`trainbudget.core.single.flops`).

    Term by term (sources: torch/utils/flop_counter.py; trainbudget/core/single/flops.py):

    - matmuls: both count (M, K) @ (K, N) as 2*M*N*K and nothing else (norms, softmax,
      activations, bias adds are not counted by either): factor 1 for every linear part.
    - attention, causal: FlopCounterMode counts all T x T query-key pairs whatever `is_causal`
      says, which is the core's `causal=False`. With `causal=True` the attention core (scores,
      attn_values, in every phase) is scaled by the pairs a causal mask keeps,
      (T*(T+1)/2) / (T*T) = (T+1)/(2T), to compare with the core's `causal=True`.
    - attention backward: for the math fallback (bmm's) it is already 2 x forward. For a fused
      kernel (flash, memory-efficient, cuDNN) FlopCounterMode counts 5 T x T matmuls, 2.5 x
      forward: the 4 gradient matmuls (dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q) are
      the core's backward, 2 x forward, split evenly between scores and attn_values; the fifth
      is the recomputed S = Q K^T, which the core counts as hardware FLOPs
      (`recompute_flops(..., flash_attention=True)` adds `scores`): it goes to recompute.
    - checkpointing: the forward ops torch.utils.checkpoint re-runs inside backward are
      recompute, the core's `recompute_flops(..., "full")` (one more forward of every layer).
    - batch: all counts are for the step's `micro_batch` sequences; the core's are per
      sequence, multiplied by `micro_batch` on the predicted side.
    """
    t = measured.seq_len

    def attention_scale(flops: int) -> float:
        return _exact(flops * (t + 1), 2 * t) if causal else flops

    def scaled(parts: Mapping[str, int]) -> dict[str, float]:
        out: dict[str, float] = dict(parts)
        for p in ("scores", "attn_values"):
            out[p] = attention_scale(parts[p])
        return out

    forward = scaled(measured.forward_parts)
    backward = scaled(measured.backward_parts)
    recompute = scaled(measured.recompute_parts)
    if measured.fused_attention:
        core = measured.backward_parts["scores"] + measured.backward_parts["attn_values"]
        unit = attention_scale(core) / 5  # one T x T matmul of the fused backward
        backward["scores"] = backward["attn_values"] = 2 * unit
        recompute["scores"] += unit
    return NormalisedFlops(
        causal=causal,
        flash_attention=measured.fused_attention,
        forward=frozen(forward),
        backward=frozen(backward),
        recompute=frozen(recompute),
    )


def predicted_step_parts(
    spec: ModelSpec,
    *,
    micro_batch: int,
    seq_len: int,
    recompute: str = "none",
    causal: bool = False,
    flash_attention: bool = False,
) -> dict[str, int]:
    """The core's hardware FLOPs of one step per part: micro_batch x (3 x forward + recompute),
    the recompute split as `recompute_flops` defines it (full: every part but the head once
    more; flash attention: Q @ K^T once more) and checked against it."""
    fwd: ForwardFlops = forward_flops(spec, seq_len, causal=causal)
    parts = fwd.as_dict()
    extra = dict.fromkeys(parts, 0)
    if recompute == "full":
        extra.update({p: v for p, v in parts.items() if p != "logits"})
    elif recompute == "selective" and not flash_attention:
        extra.update(scores=fwd.scores, attn_values=fwd.attn_values)
    if flash_attention:
        extra["scores"] += fwd.scores
    if sum(extra.values()) != recompute_flops(fwd, recompute, flash_attention):
        raise AssertionError("predicted_step_parts disagrees with core.flops.recompute_flops")
    return {p: micro_batch * (3 * parts[p] + extra[p]) for p in parts}


def _relative(measured: float, predicted: float) -> float:
    if predicted == 0:
        return 0.0 if measured == 0 else float("inf")
    return (measured - predicted) / predicted


@dataclass(frozen=True, kw_only=True)
class FlopComparison:
    """The core's prediction against the normalised measurement, for one step."""

    measured: MeasuredFlops
    normalised: NormalisedFlops
    predicted_parts: Mapping[str, int]
    """Hardware FLOPs per part (3 x forward + recompute), micro_batch sequences."""
    measured_parts: Mapping[str, float]
    predicted_forward: int
    predicted_total: float
    """`training_flops(...).hardware_flops_per_token` x seq_len x micro_batch."""

    @property
    def measured_total(self) -> float:
        return self.normalised.total

    @property
    def total_error(self) -> float:
        """(measured - predicted) / predicted, FLOPs per step."""
        return _relative(self.measured_total, self.predicted_total)

    @property
    def forward_error(self) -> float:
        return _relative(self.normalised.forward_total, self.predicted_forward)

    @property
    def part_errors(self) -> dict[str, float]:
        return {
            p: _relative(self.measured_parts[p], self.predicted_parts[p])
            for p in self.predicted_parts
        }

    @property
    def max_error(self) -> float:
        """Largest |relative error| over the total and every part."""
        return max(abs(e) for e in (self.total_error, *self.part_errors.values()))


def comparison_of(measured: MeasuredFlops, spec: ModelSpec, *, causal: bool) -> FlopComparison:
    """A measured step (`profile.flops.measure_flops` of `spec`), normalised (`normalise_flops`)
    and set against the core's hardware FLOPs: `training_flops(spec, seq_len, causal=causal,
    recompute=recompute, flash_attention=<a fused kernel ran>)`, per part and in total."""
    micro_batch, seq_len, recompute = measured.micro_batch, measured.seq_len, measured.recompute
    normalised = normalise_flops(measured, causal=causal)
    flash = measured.fused_attention
    predicted = predicted_step_parts(
        spec,
        micro_batch=micro_batch,
        seq_len=seq_len,
        recompute=recompute,
        causal=causal,
        flash_attention=flash,
    )
    tf = training_flops(spec, seq_len, causal=causal, recompute=recompute, flash_attention=flash)
    predicted_total = tf.hardware_flops_per_token * seq_len * micro_batch
    return FlopComparison(
        measured=measured,
        normalised=normalised,
        predicted_parts=frozen(predicted),
        measured_parts=frozen(normalised.step()),
        predicted_forward=micro_batch * forward_flops(spec, seq_len, causal=causal).total,
        predicted_total=predicted_total,
    )
