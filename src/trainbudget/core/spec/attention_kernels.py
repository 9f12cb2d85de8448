"""Lookups in the measured attention-kernel tables (`attention_curves`): a kernel's TFLOP/s for
one pass, mask, sequence length and head dim (linear in log2 between measured points, held flat
beyond them), the lengths a curve was measured at, the papers' FLOP count and the time ratios
the tables imply (causal over unmasked, backward over forward)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainbudget.core.errors import SpecError, unknown_key
from trainbudget.core.spec.attention_curves import (
    CAUSAL_FLOPS_PER_FULL,
    KERNEL_CURVES,
    KERNELS,
    PASS_FLOPS_PER_FORWARD,
    PASSES,
    KernelCurve,
)
from trainbudget.core.spec.hardware import DTYPES, HARDWARE


def _index(curves: tuple[KernelCurve, ...]) -> Mapping[tuple, Mapping[int, KernelCurve]]:
    """(kernel, gpu, dtype, causal, pass_) -> {head_dim: curve}; a second curve for one key
    is an error (two readings of one bar series)."""
    table: dict[tuple, dict[int, KernelCurve]] = {}
    for c in curves:
        by_dim = table.setdefault((c.kernel, c.gpu, c.dtype, c.causal, c.pass_), {})
        if c.head_dim in by_dim:
            raise SpecError("KERNEL_CURVES", c.source, "two curves for one key and head_dim")
        by_dim[c.head_dim] = c
    return MappingProxyType(
        {k: MappingProxyType(dict(sorted(v.items()))) for k, v in table.items()}
    )


_BY_KEY = _index(KERNEL_CURVES)


def _log2_interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """y at x, piecewise linear in log2(x) between the points, held flat beyond the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
        if x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    raise AssertionError("unreachable: x < xs[-1]")


def attention_tflops_per_second(
    kernel: str,
    gpu: str,
    *,
    head_dim: int,
    causal: bool,
    pass_: str,
    seq_len: int,
    dtype: str = "bf16",
) -> float | None:
    """Measured TFLOP/s of `kernel` on `gpu` for one pass, in the papers' FLOP convention
    (causal = half the FLOPs; backward = 2.5 x forward): see the module docstring.

    Between measured sequence lengths: linear in log2(seq_len); outside them: the nearest
    end's value (512, and 16k for every curve but B200's, which ends at 128k). Between
    measured head dims: linear in log2(head_dim); outside them: the nearest measured head
    dim's value (so head dim 256 in the backward reads the 128 curve). None when no curve
    exists for (kernel, gpu, dtype, causal, pass_): an unmeasured GPU or kernel, A100's
    separate passes, H100's causal backward, B200 without a mask, FP8; the caller then keeps
    its own estimate. An unknown kernel, GPU key or pass
    is an error that lists the known ones.
    """
    _check_arguments(kernel, gpu, pass_, head_dim, seq_len, dtype)
    by_dim = _BY_KEY.get((kernel, gpu, "bf16" if dtype == "fp16" else dtype, causal, pass_))
    if by_dim is None:
        return None
    dims = tuple(by_dim)
    at_seq = tuple(
        _log2_interp(seq_len, by_dim[d].seq_lens, by_dim[d].tflops_per_second) for d in dims
    )
    return _log2_interp(head_dim, dims, at_seq)


def charted_seq_lens(
    kernel: str, gpu: str, *, head_dim: int, causal: bool, pass_: str, dtype: str = "bf16"
) -> tuple[int, ...]:
    """The sequence lengths the curve of (kernel, gpu, mask, pass) was measured at, for the
    charted head dim nearest `head_dim` in log2 (the one `attention_tflops_per_second` reads
    past the measured dims); () without a curve."""
    _check_arguments(kernel, gpu, pass_, head_dim, 1, dtype)
    by_dim = _BY_KEY.get((kernel, gpu, "bf16" if dtype == "fp16" else dtype, causal, pass_))
    if by_dim is None:
        return ()
    nearest = min(by_dim, key=lambda d: abs(math.log2(d) - math.log2(head_dim)))
    return by_dim[nearest].seq_lens


def _check_arguments(
    kernel: str, gpu: str, pass_: str, head_dim: int, seq_len: int, dtype: str
) -> None:
    if kernel not in KERNELS:
        raise unknown_key("attention kernel", kernel, KERNELS)
    if gpu not in HARDWARE:
        raise unknown_key("gpu", gpu, HARDWARE)
    if pass_ not in PASSES:
        raise unknown_key("pass_", pass_, PASSES)
    if head_dim <= 0:
        raise SpecError("head_dim", head_dim, "must be > 0")
    if seq_len <= 0:
        raise SpecError("seq_len", seq_len, "must be > 0")
    if dtype not in DTYPES:
        raise unknown_key("dtype", dtype, DTYPES)


def paper_attention_flops(
    seq_len: int, head_dim: int, n_heads: int, *, causal: bool, pass_: str
) -> float:
    """FLOPs the papers count for one sequence's attention core in `pass_`:
    4 s^2 d h (Dao 2023 Sec. 4.1), halved under a causal mask, x 2.5 for the backward and
    x 3.5 for forward + backward. Time = this / TFLOP/s of the matching curve."""
    if pass_ not in PASSES:
        raise unknown_key("pass_", pass_, PASSES)
    forward = 4.0 * seq_len * seq_len * head_dim * n_heads
    return forward * (CAUSAL_FLOPS_PER_FULL if causal else 1.0) * PASS_FLOPS_PER_FORWARD[pass_]


def causal_per_noncausal_seconds(
    kernel: str, gpu: str, *, head_dim: int, pass_: str, seq_len: int, dtype: str = "bf16"
) -> float | None:
    """Time of the causal pass over the time of the same pass without a mask, at one seq_len:
    (F / 2) / causal TFLOP/s over F / non-causal TFLOP/s. An ideal skip of the upper half
    would give 0.5; the measured kernels give more, most at short sequences. None without
    both curves."""
    args = dict(head_dim=head_dim, pass_=pass_, seq_len=seq_len, dtype=dtype)
    masked = attention_tflops_per_second(kernel, gpu, causal=True, **args)
    full = attention_tflops_per_second(kernel, gpu, causal=False, **args)
    if masked is None or full is None:
        return None
    return CAUSAL_FLOPS_PER_FULL * full / masked


def backward_per_forward_seconds(
    kernel: str, gpu: str, *, head_dim: int, causal: bool, seq_len: int, dtype: str = "bf16"
) -> float | None:
    """Time of the backward pass over the forward's: 2.5 F / backward TFLOP/s over
    F / forward TFLOP/s. 2.5 when both run at one rate; the measured backward is slower, so
    more (never the 2 of the 'backward = 2 x forward' rule for weight matmuls). None without
    both curves."""
    args = dict(head_dim=head_dim, causal=causal, seq_len=seq_len, dtype=dtype)
    forward = attention_tflops_per_second(kernel, gpu, pass_="forward", **args)
    backward = attention_tflops_per_second(kernel, gpu, pass_="backward", **args)
    if forward is None or backward is None:
        return None
    return PASS_FLOPS_PER_FORWARD["backward"] * forward / backward


@dataclass(frozen=True, kw_only=True)
class AttentionTimeRatios:
    """The time ratios the step model needs at one (kernel, gpu, head_dim, seq_len), each
    None where the tables lack a curve it needs."""

    forward_causal_per_noncausal_seconds: float | None
    backward_causal_per_noncausal_seconds: float | None
    forward_backward_causal_per_noncausal_seconds: float | None
    noncausal_backward_per_forward_seconds: float | None
    causal_backward_per_forward_seconds: float | None


def attention_time_ratios(
    kernel: str, gpu: str, *, head_dim: int, seq_len: int, dtype: str = "bf16"
) -> AttentionTimeRatios:
    """`causal_per_noncausal_seconds` for each pass and `backward_per_forward_seconds` for
    each mask, at one point."""
    at = dict(head_dim=head_dim, seq_len=seq_len, dtype=dtype)
    return AttentionTimeRatios(
        forward_causal_per_noncausal_seconds=causal_per_noncausal_seconds(
            kernel, gpu, pass_="forward", **at
        ),
        backward_causal_per_noncausal_seconds=causal_per_noncausal_seconds(
            kernel, gpu, pass_="backward", **at
        ),
        forward_backward_causal_per_noncausal_seconds=causal_per_noncausal_seconds(
            kernel, gpu, pass_="forward_backward", **at
        ),
        noncausal_backward_per_forward_seconds=backward_per_forward_seconds(
            kernel, gpu, causal=False, **at
        ),
        causal_backward_per_forward_seconds=backward_per_forward_seconds(
            kernel, gpu, causal=True, **at
        ),
    )
