"""Compute time of one micro-batch on one GPU: a roofline per op class (matmuls, attention,
memory-bound element-wise work), forward and backward, recomputation, and the head and loss.
Every function takes numbers for one plan or arrays for the planner's grid (`xp`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import NONE, SELECTIVE, SELECTIVE_OP, PlanNumbers
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.activations import FP32_BYTES, MASK_BYTES
from trainbudget.core.single.flops import forward_flops
from trainbudget.core.spec.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks. One set for every plan and model: they
    are properties of the kernels, not tuned per case (docs/validation.md shows the errors)."""

    matmul: float = 0.70
    """Fraction of the dense peak that transformer GEMMs sustain end to end. Large bf16 GEMMs
    alone reach 70-80 % with cuBLAS on A100/H100, but kernel launch gaps, shapes that tile
    badly and clock throttling under sustained load take more. 0.70 is the one value from the
    grid {0.60, 0.65, 0.70, 0.75} with the smallest mean absolute error over all published
    runs in docs/validation.md, where the leave-one-out error of this choice is reported too."""
    attention: float = 0.5
    """FlashAttention-2 forward+backward reaches 50-73 % of A100 peak (Dao 2023, arXiv
    2307.08691, Fig. 4-6); the backward is the slower half."""
    hbm: float = 0.85
    """Fraction of HBM bandwidth memory-bound kernels achieve (STREAM-like copy rates)."""


DEFAULT_EFFICIENCY = Efficiency()

BACKWARD_PER_FORWARD = 2
"""Backward = 2 x forward FLOPs: the gradients of inputs and of weights (seed 001)."""
NORM_TRAFFIC_PER_D = 2 * 2
"""Two norms per layer, each reads and writes the hidden vector (elements per token / d)."""
RESIDUAL_TRAFFIC_PER_D = 2 * 3
"""Two residual adds per layer, each reads two hidden vectors and writes one."""
ACTIVATION_FN_TRAFFIC = {"swiglu": 3, "gelu": 2}
"""Elements moved per hidden unit: SwiGLU reads gate and up and writes their product; a plain
activation reads its input and writes its output."""
ROPE_TRAFFIC = 2
"""RoPE reads and writes every element of q and k."""
FLASH_BLOCK_TOKENS = 128
"""Query/key tile of FlashAttention-2's kernels (Dao 2023, arXiv 2307.08691, Sec. 3.1 and the
released kernels' 128-row blocks). Under a causal mask the kernel skips every tile above the
diagonal and computes the diagonal ones whole (Sec. 3.1.1, "Causal masking")."""
LOSS_FP32_TRAFFIC_BYTES = 4 * FP32_BYTES
"""Per logit, beyond writing and reading the logits themselves: the fp32 log-softmax written
and read by the loss, and its fp32 gradient written and read by the head's backward."""


def causal_tile_fraction(seq_len: int) -> float:
    """Share of the s x s score tiles a causal FlashAttention kernel computes: with n tiles
    per side, the n (n + 1) / 2 on or below the diagonal of n^2, i.e. (n + 1) / (2 n)."""
    n = math.ceil(seq_len / FLASH_BLOCK_TOKENS)
    return (n + 1) / (2 * n)


def matmul_seconds(
    flops: Any,
    m: Any,
    n: Any,
    k: Any,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    xp: Ops = SCALAR,
) -> Any:
    """Roofline of one GEMM shape (m, k) @ (k, n): compute at the achievable peak, or the bytes
    of both operands and the result at the achievable HBM bandwidth, whichever is slower."""
    bytes_moved = e * (m * k + k * n + m * n)
    return xp.maximum(
        flops / (peak * eff.matmul), flops / (2 * m * n * k) * bytes_moved / (hbm * eff.hbm)
    )


@dataclass(frozen=True, kw_only=True)
class LayerCompute:
    """Forward seconds of one layer for one micro-batch on one GPU, and two of its parts."""

    forward_seconds: Any
    attention_seconds: Any
    """The attention core (scores, softmax, values)."""
    memory_bound_seconds: Any
    """Norms, residual adds, the activation function, RoPE, dropout."""
    op_recomputed_matmul_seconds: Any = 0.0
    """The matmuls torchtitan's per-op policy does not save (selective-op; llama: wk, wo,
    w3); 0 where the policy is not modelled (MoE, MLA)."""


def layer_compute(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    dropout: bool,
    causal: bool = False,
    xp: Ops = SCALAR,
) -> LayerCompute:
    """`causal`: a causal mask, whose upper tiles FlashAttention skips (the unfused kernel
    computes the whole s x s scores and masks them, so it costs the same)."""
    fwd = forward_flops(spec, seq_len)
    n_layers, t, b = spec.n_layers, L.tp, L.micro_batch
    rows = b * seq_len / L.cp  # tokens through each weight matmul on this GPU
    d, d_q = spec.d_model, spec.n_heads * spec.d_head
    d_hidden = spec.d_ff_expert if spec.is_moe else spec.d_ff
    k_experts = (spec.experts_per_token + spec.n_shared_experts) if spec.is_moe else 1
    scale = b / (t * L.cp * n_layers)  # one layer's share of one sequence's FLOPs, per GPU

    def mm(flops: float, m: Any, n: Any, k: Any) -> Any:
        return matmul_seconds(flops * scale, m, n, k, e, peak, hbm, eff, xp)

    up_width = d_hidden / t * (2 if spec.mlp == "swiglu" else 1)
    matmuls = (
        mm(fwd.qkv, rows, (d_q + 2 * spec.d_kv) / t, d)
        + mm(fwd.attn_proj, rows, d, d_q / t)
        + mm(fwd.mlp_up + fwd.mlp_gate, rows * k_experts, up_width, d)
        + mm(fwd.mlp_down, rows * k_experts, d, d_hidden / t)
        + mm(fwd.router, rows, spec.n_experts or 1, d)
    )
    hbm_rate = hbm * eff.hbm
    flash = (fwd.scores + fwd.attn_values) * scale / (peak * eff.attention)
    if causal:
        flash = flash * causal_tile_fraction(seq_len)
    # unfused: batched GEMMs (s/cp, d_head) @ (d_head, s) and (s/cp, s) @ (s, d_head) per
    # head, whose k = d_head makes them memory-bound on the s x s operand; then softmax
    # (read and write the s x s scores) and, with dropout, its mask and dropped copy
    q_rows = seq_len / L.cp
    unfused = mm(fwd.scores, q_rows, seq_len, spec.d_head)
    unfused = unfused + mm(fwd.attn_values, q_rows, spec.d_head, seq_len)
    per_score = 2 * e + ((2 * e + MASK_BYTES) if dropout else 0)
    unfused = unfused + rows * (spec.n_heads / t) * seq_len * per_score / hbm_rate
    attention = xp.where(L.flash, flash, unfused)
    # memory-bound ops, elements per token of one layer; norms and residuals run redundantly
    # on each TP rank without SP
    rep = xp.where(L.sp, t, 1)
    per_token = (NORM_TRAFFIC_PER_D * d + RESIDUAL_TRAFFIC_PER_D * d) / rep
    per_token = per_token + ACTIVATION_FN_TRAFFIC[spec.mlp] * d_hidden * k_experts / t
    if spec.position == "rope":
        per_token = per_token + ROPE_TRAFFIC * (d_q + spec.d_kv) / t
    memory_bound = rows * per_token * e / hbm_rate
    if dropout:  # two hidden dropouts: read, write and a mask
        memory_bound = memory_bound + rows * 2 * d / rep * (2 * e + MASK_BYTES) / hbm_rate
    return LayerCompute(
        forward_seconds=matmuls + attention + memory_bound,
        attention_seconds=attention,
        memory_bound_seconds=memory_bound,
        op_recomputed_matmul_seconds=matmuls * _op_recomputed_share(spec, fwd),
    )


def _op_recomputed_share(spec: ModelSpec, fwd: Any) -> float:
    """The share of a layer's weight-matmul FLOPs that selective-op recomputes (llama: wk,
    wo, w3); their time is taken as that share of the layer's matmul time (the layer's GEMMs
    are compute-bound at training shapes, so time follows FLOPs)."""
    if op_checkpoint.unsupported(spec):
        return 0.0
    weights = fwd.qkv + fwd.attn_proj + fwd.mlp_up + fwd.mlp_gate + fwd.mlp_down + fwd.router
    return op_checkpoint.recomputed_flops(spec, fwd.seq_len) / weights


@dataclass(frozen=True, kw_only=True)
class MicroBatchCompute:
    """One micro-batch on the busiest pipeline stage (numbers, or arrays over plans)."""

    forward_seconds: Any
    """The stage's layers, forward."""
    backward_seconds: Any
    """The stage's layers, backward, with what recomputation repeats."""
    head_forward_seconds: Any
    """Head matmul and loss, forward (the last stage's extra work)."""
    attention_seconds: Any
    """One layer's attention core, forward (what CP's ring exchange hides behind)."""

    @property
    def stage_seconds(self) -> Any:
        """Forward and backward of the layers, and the head's (x 3 for its backward)."""
        head = (1 + BACKWARD_PER_FORWARD) * self.head_forward_seconds
        return self.forward_seconds + self.backward_seconds + head


def micro_batch_compute(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    dropout: bool,
    causal: bool = False,
    xp: Ops = SCALAR,
) -> MicroBatchCompute:
    layer = layer_compute(
        spec,
        L,
        seq_len=seq_len,
        e=e,
        peak=peak,
        hbm=hbm,
        eff=eff,
        dropout=dropout,
        causal=causal,
        xp=xp,
    )
    fwd, attn = layer.forward_seconds, layer.attention_seconds
    # recomputation repeats forward work in the backward: the attention core (selective),
    # the memory-bound ops and the unsaved matmuls (selective-op) or the whole layer (full);
    # FlashAttention's backward recomputes Q K^T itself
    layers = spec.n_layers // L.pp
    recomputed = L.recomputed_layers(layers)
    # full recomputation of every K-th layer: the others recompute what they would without it
    flash_own = xp.where(L.flash, attn / 2, 0.0)
    every_kth = (recomputed * fwd + (layers - recomputed) * flash_own) / layers
    full = xp.where(L.recompute_every == 1, fwd, every_kth)
    by_op = layer.memory_bound_seconds + layer.op_recomputed_matmul_seconds + flash_own
    recompute = xp.where(L.recompute == SELECTIVE_OP, by_op, full)
    recompute = xp.where(L.recompute == SELECTIVE, attn, recompute)
    recompute = xp.where(L.recompute == NONE, 0.0, recompute)
    recompute = xp.where(
        L.flash & ((L.recompute == NONE) | (L.recompute == SELECTIVE)), attn / 2, recompute
    )
    tokens = L.micro_batch * seq_len / L.cp
    logits = tokens * spec.vocab_size / L.tp  # elements on this GPU (vocab-parallel)
    head = 2 * tokens * spec.d_model * spec.vocab_size / L.tp / (peak * eff.matmul)
    head = head + logits * (2 * e + LOSS_FP32_TRAFFIC_BYTES) / (hbm * eff.hbm)
    return MicroBatchCompute(
        forward_seconds=layers * fwd,
        backward_seconds=layers * (BACKWARD_PER_FORWARD * fwd + recompute),
        head_forward_seconds=head,
        attention_seconds=attn,
    )
