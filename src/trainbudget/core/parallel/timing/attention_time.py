"""Fused attention's rate per pass from the measured kernel tables (core.spec.attention_curves),
for the step model: forward and backward apart, causal and not, by sequence length and head dim.

The tables hold published micro-benchmarks. Five gaps are filled by rules stated here, each
from the tables themselves:

- a GPU without curves borrows those of the GPU with its compute die, scaled by the two dense
  bf16 peaks (`CURVES_OF`);
- a GPU charted forward+backward only (A100: Dao 2023, Fig. 4) runs both passes at that
  rate, splitting the time by the papers' FLOP count (backward = 2.5 x forward);
- a pass charted without a mask only (H100's backward: Shah et al. 2024, Fig. 6) takes the
  same kernel's forward causal / non-causal ratio of rates (on H100 flash2, the one kernel
  charted both ways, the forward's and the forward+backward's time ratios agree within
  1 % from 2k to 8k: 0.607 and 0.604 at 2k, 0.556 and 0.544 at 8k);
- a kernel charted with a causal mask only (B200's cuDNN: NVIDIA's cudnn-frontend benchmark)
  runs an unmasked pass at its causal rate over twice the length (`_unmasked_from_causal`);
- beyond the longest charted sequence (16k; B200's cuDNN: 128k) a causal pass closes on the
  unmasked one, where an unmasked curve is charted: what a
  causal kernel loses is mostly its diagonal tiles, computed whole, whose share falls as the
  sequence grows. The charts show the causal / unmasked shortfall shrinking by a steady
  factor per doubling (FlashAttention-3 d128 forward 0.093, 0.068, 0.049 at 4k, 8k, 16k; cuDNN
  0.149, 0.118, 0.094), so past 16k it keeps shrinking by the curve's own last factor (8k to
  16k) per doubling, never growing (`causal_ratio_beyond_the_chart`); both passes scale by the
  forward's ratio, as above. Unmasked rates stay flat beyond the chart.

Every rate is then taken at the in-training share of the GEMMs (`Efficiency.in_training`):
the same launch gaps and clocks under sustained load slow the attention kernels beside them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import Ops
from trainbudget.core.spec.attention_curves import (
    CAUSAL_FLOPS_PER_FULL,
    PASS_FLOPS_PER_FORWARD,
    SEQ_LENS,
)
from trainbudget.core.spec.attention_kernels import attention_tflops_per_second, charted_seq_lens
from trainbudget.core.spec.hardware import HARDWARE

TFLOPS = 1e12
CURVES_OF = {
    "h200": "h100-sxm",
    "h800": "h100-sxm",
    "h100-nvl": "h100-sxm",
    "h100-pcie": "h100-sxm",
    "a100-40gb": "a100-80gb",
}
"""GPU -> the charted GPU with its compute die (GH100, GA100): H200 and H800 are the H100 SXM's
die at its clocks (the same 989.5 TFLOP/s dense bf16), H100 NVL and PCIe the same die with
fewer SMs or lower clocks, the A100 40GB the A100 80GB's die; rates scale by the bf16 peaks."""
BACKWARD_FLOPS_PER_FORWARD = PASS_FLOPS_PER_FORWARD["backward"]
RING_CHUNKS_PER_RANK = 2
"""Context parallelism under a causal mask splits the sequence into 2 cp chunks and gives rank
r chunks r and 2 cp - 1 - r, so every rank holds as many masked pairs as the others
(Megatron-Core utils.get_batch_on_this_cp_rank). Transformer Engine's ring
(AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py) then runs, per step, one causal kernel over the rank's own two chunks
(step 0), or an unmasked kernel of the rank's queries over the first half of the keys received
(steps i <= rank), or of the second half of its queries over all of them (steps i > rank)."""


@dataclass(frozen=True)
class AttentionKernel:
    """The fused attention kernel a step runs on a GPU: the tables' kernel key, the GPU's
    catalog key and dense bf16 peak, and the in-training share its rates are taken at."""

    kernel: str
    gpu: str
    peak_flops_per_second: float
    in_training: float

    def pass_seconds_per_flop(
        self, head_dim: int, causal: bool, seq_len: Any, xp: Ops
    ) -> tuple[Any, Any] | None:
        """(forward, backward) seconds per FLOP of the forward pass counted without a mask
        (`layer_time`'s attention FLOPs), at queries of `seq_len` (numbers, or an array of
        a few distinct values); None where the tables have no curve for this kernel and GPU."""
        if not xp.is_array:
            return self._per_flop(head_dim, causal, int(seq_len))
        import numpy as np

        seq = np.asarray(seq_len)
        fwd, bwd = np.empty(seq.shape), np.empty(seq.shape)
        # the distinct values by a set: numpy's unique costs some 10 ms on its first call in a
        # process (what a one-search command like `estimate` pays)
        for value in sorted(set(seq.ravel().tolist())):
            rates = self._per_flop(head_dim, causal, int(value))
            if rates is None:
                return None
            at = seq == value
            fwd[at], bwd[at] = rates
        return fwd, bwd

    def ring_seconds_per_flop(
        self, head_dim: int, seq_len: Any, cp: Any, xp: Ops
    ) -> tuple[Any, Any] | None:
        """(forward, backward) seconds per FLOP (counted without a mask) of causal attention
        over `seq_len` queries split over a context-parallel ring of `cp` ranks, as
        Transformer Engine's ring runs it (`RING_CHUNKS_PER_RANK`): of a rank's query-key
        pairs under the mask, 1/cp are its own causal block (the causal curve at s/cp), the
        rest cp - 1 unmasked blocks of half a rank's chunk (the non-causal curve at
        s/(2 cp)). cp = 1: the causal curve at s. None without the curves."""
        own = self.pass_seconds_per_flop(head_dim, True, seq_len / cp, xp)
        if own is None:
            return None
        half = seq_len / (RING_CHUNKS_PER_RANK * cp)
        ring = self.pass_seconds_per_flop(head_dim, False, xp.maximum(1, half), xp)
        if ring is None:
            return own
        # the unmasked blocks hold (cp - 1) / cp of the rank's s^2 / (2 cp) masked pairs: in
        # FLOPs counted without a mask, (cp - 1) / (2 cp) of them
        off_diagonal = CAUSAL_FLOPS_PER_FULL * (cp - 1) / cp
        return own[0] / cp + off_diagonal * ring[0], own[1] / cp + off_diagonal * ring[1]

    def _per_flop(self, head_dim: int, causal: bool, seq_len: int) -> tuple[float, float] | None:
        rates = measured_rates(self.kernel, self.gpu, head_dim, causal, max(1, seq_len))
        if rates is None:
            return None
        own = HARDWARE[CURVES_OF.get(self.gpu, self.gpu)].peak_flops_per_second("bf16")
        scale = self.in_training * self.peak_flops_per_second / own
        share = CAUSAL_FLOPS_PER_FULL if causal else 1.0
        forward, backward = rates
        return (
            share / (forward * scale),
            share * BACKWARD_FLOPS_PER_FORWARD / (backward * scale),
        )


@functools.lru_cache(maxsize=4096)
def measured_rates(
    kernel: str, gpu: str, head_dim: int, causal: bool, seq_len: int
) -> tuple[float, float] | None:
    """(forward, backward) FLOP/s of `kernel` on `gpu` in the papers' convention (a causal
    pass counts half the FLOPs), the module docstring's gaps filled; None without a curve."""
    charted = CURVES_OF.get(gpu, gpu)
    if charted not in HARDWARE:
        return None

    def rate(mask: bool, pass_: str) -> float | None:
        value = attention_tflops_per_second(
            kernel, charted, head_dim=head_dim, causal=mask, pass_=pass_, seq_len=seq_len
        )
        return None if value is None else value * TFLOPS

    both = rate(causal, "forward_backward")
    forward = rate(causal, "forward") or both
    backward = rate(causal, "backward") or both
    if causal and backward is None:
        full_backward, full_forward = rate(False, "backward"), rate(False, "forward")
        if full_backward is not None and forward is not None and full_forward is not None:
            backward = full_backward * forward / full_forward
    if not causal and forward is None and backward is None:
        return _unmasked_from_causal(kernel, gpu, head_dim, seq_len)
    if forward is None or backward is None:
        return None
    end = chart_end(kernel, charted, head_dim)
    if causal and seq_len > end:
        gain = causal_ratio_beyond_the_chart(kernel, charted, head_dim, seq_len, end)
        forward, backward = forward * gain, backward * gain
    return forward, backward


def _unmasked_from_causal(
    kernel: str, gpu: str, head_dim: int, seq_len: int
) -> tuple[float, float] | None:
    """A kernel charted under a causal mask only (B200's cuDNN) runs an unmasked pass over
    `seq_len` queries and keys at its causal rate over twice as many: a causal pass over 2 s
    holds the same query-key pairs per query row on average, plus its diagonal tiles. Read on
    the kernels charted both ways, causal at 16k over unmasked at 8k: H100 forward cuDNN 0.90,
    FlashAttention-3 0.95, FlashAttention-2 0.91 (Shah et al. 2024, Fig. 5; tests); cuDNN 9.22
    on GB200 (NVIDIA cudnn-frontend 3929da2, benchmark/sdpa_benchmark_training/results/
    llama3.1/gb200/llama3.1_20260424_100750.csv, causal 32k over unmasked 16k) forward 0.96,
    backward 0.89. So the unmasked pass is read 4-11 % slow; nothing is fitted to close it."""
    return measured_rates(kernel, gpu, head_dim, True, 2 * seq_len)


def chart_end(kernel: str, gpu: str, head_dim: int) -> int:
    """The longest sequence `kernel`'s causal forward (or forward+backward) curve on `gpu`
    reaches, at the charted head dim nearest `head_dim`: 16k for the papers' charts, 128k
    for B200's cuDNN table."""
    for pass_ in ("forward", "forward_backward"):
        lens = charted_seq_lens(kernel, gpu, head_dim=head_dim, causal=True, pass_=pass_)
        if lens:
            return lens[-1]
    return SEQ_LENS[-1]


def causal_ratio_beyond_the_chart(
    kernel: str, gpu: str, head_dim: int, seq_len: int, end: int = SEQ_LENS[-1]
) -> float:
    """How much faster a causal pass runs at `seq_len` (past the chart's `end`) than at the
    chart's end, from the curve's causal / unmasked ratio r at its last two lengths: the
    shortfall 1 - r shrinks by f = (1 - r(end)) / (1 - r(end / 2)) per doubling (f <= 1), so
    r(s) = 1 - (1 - r(end)) f^log2(s / end); the forward's curves, or the forward+backward's
    where only those are charted. 1 where the kernel has no unmasked curve."""
    before = end // 2

    def ratio(seq: int) -> float | None:
        for pass_ in ("forward", "forward_backward"):
            kw = dict(head_dim=head_dim, pass_=pass_, seq_len=seq)
            masked = attention_tflops_per_second(kernel, gpu, causal=True, **kw)
            full = attention_tflops_per_second(kernel, gpu, causal=False, **kw)
            if masked is not None and full is not None:
                return masked / full
        return None

    r_end, r_before = ratio(end), ratio(before)
    if r_end is None or r_before is None or r_end >= 1:
        return 1.0
    factor = min(1.0, (1 - r_end) / (1 - r_before)) if r_before < 1 else 1.0
    return (1 - (1 - r_end) * factor ** math.log2(seq_len / end)) / r_end
