"""What a decoder layer's kernels move and launch beyond its GEMMs' FLOPs: the element-wise
traffic of norms, residual adds, activations, RoPE and dropout, per token; the kernels one
layer launches; the score tiles a FlashAttention kernel computes under a causal mask or a
sliding window; the mix of layers on the stage a step is timed on. Shared by the layer's time
(`layer_time`), the micro-batch's (`compute_time`) and the collectives' (`comm_time`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.timing.loss_time import UNFUSED_FP32_BYTES_PER_LOGIT
from trainbudget.core.spec.model_spec import ModelSpec

BACKWARD_PER_FORWARD = 2
"""Backward = 2 x forward FLOPs: the gradients of inputs and of weights (seed 001)."""
NORM_TRAFFIC_PER_D = 2 * 2
"""Two norms per layer, each reads and writes the hidden vector (elements per token / d)."""
POST_NORM_TRAFFIC_PER_D = 2 * 2
"""post_norms (Gemma 2/3's sandwich norms): two more norms per layer, on the attention and MLP
outputs, each reading and writing the hidden vector."""
INNER_NORM_TRAFFIC = 2
"""A norm inside attention reads and writes each element it normalises: QK-norm's query and
key heads (Qwen3, Gemma 3), MLA's query and key-value latents (DeepSeek-V2, Sec. 2.1.2)."""
RESIDUAL_TRAFFIC_PER_D = 2 * 3
"""Two residual adds per layer, each reads two hidden vectors and writes one."""
ACTIVATION_FN_TRAFFIC = {"swiglu": 3, "gelu": 2}
"""Elements moved per hidden unit: SwiGLU reads gate and up and writes their product; a plain
activation reads its input and writes its output."""
ROPE_TRAFFIC = 2
"""RoPE reads and writes every rotated element of q and k (d_rope per head; MLA rotates only
its rope_head_dim part, and one key shared by all heads)."""
HIDDEN_DROPOUTS = 2
"""Dropouts on the hidden vector per layer (ModelSpec.dropout): after attention's output
projection and after the MLP, each fused with its residual add (Megatron's
bias_dropout_add_fused_train), so beyond the add's traffic each writes a one-byte mask forward
and its backward reads the gradient and the mask and writes the gradient."""
MASK_BYTES = 1
"""A dropout mask element (a bool tensor)."""


def dropout_bytes(e: int, standalone: bool) -> float:
    """Bytes one dropped-out element moves, forward and backward together: the mask written
    and read, the gradient read and written (2 e), and, when the dropout is its own kernel (on
    unfused attention's probabilities), its input read and output written (2 e more)."""
    return 2 * MASK_BYTES + 2 * e + (2 * e if standalone else 0)


FLASH_BLOCK_TOKENS = 128
"""Query/key tile of FlashAttention-2's kernels (Dao 2023, arXiv 2307.08691, Sec. 3.1 and the
released kernels' 128-row blocks). Under a causal mask the kernel skips every tile above the
diagonal and computes the diagonal ones whole (Sec. 3.1.1, "Causal masking")."""
KERNELS_PER_LAYER_FORWARD = 48
"""Kernels one decoder layer launches forward in eager PyTorch: Hugging Face's Llama layer
(transformers modeling_llama.py, the v4.38 file) runs 8 per RMSNorm (two), 7 building the
rotary tables, 10 applying them to q and k, 4 projections, 5 in the MLP, 2 residual adds, and
the attention with its layout copies: about 45-50 (counted in core/spec/kernel_costs.py's
notes); the backward, timed as BACKWARD_PER_FORWARD x the rest of the forward, about twice
as many. Each pays `kernel_costs.kernel_floor_seconds`; a layer whose kernels run shorter than
the CPU takes to issue them (`kernel_costs.eager_dispatch_seconds_per_op`) waits on the CPU."""
FLASH_OWN_RECOMPUTE = 0.5
"""FlashAttention's backward recomputes the scores, Q K^T, half of the forward's two matmuls
(Dao 2023, Sec. 3.1.2): backward = 2.5 x forward in FLOPs, the papers' own count."""
LOSS_FP32_TRAFFIC_BYTES = UNFUSED_FP32_BYTES_PER_LOGIT
"""Per logit, beyond the logits read and their gradient written: an unfused loss's fp32
log-softmax written and read, and its fp32 gradient written and read by the head's backward
(`loss_time`: a fused loss kernel moves none)."""


def causal_tile_fraction(seq_len: int) -> float:
    """Share of the s x s score tiles a causal FlashAttention kernel computes: with n tiles
    per side, the n (n + 1) / 2 on or below the diagonal of n^2, i.e. (n + 1) / (2 n)."""
    n = math.ceil(seq_len / FLASH_BLOCK_TOKENS)
    return (n + 1) / (2 * n)


def flash_tile_fraction(seq_len: int, window: int = 0) -> float:
    """Share of the s x min(s, w) query-key pairs whose tiles a causal FlashAttention kernel
    computes. Without a window (or w >= s) it is `causal_tile_fraction`. With one, block row
    i (queries iB .. iB + B - 1) computes the key tiles from the one holding key iB - w + 1
    to the diagonal (FlashAttention 2.3's window_size=(w - 1, 0) skips the others)."""
    if not window or window >= seq_len:
        return causal_tile_fraction(seq_len)
    b = FLASH_BLOCK_TOKENS
    n = math.ceil(seq_len / b)
    tiles = sum(i - max(0, i * b - window + 1) // b + 1 for i in range(n))
    return tiles * b * b / (seq_len * window)


@dataclass(frozen=True, kw_only=True)
class StageLayers:
    """The layers of the pipeline stage the step is timed on: the last one (it also runs the
    head, and `step_time` reduces its gradients), its own layer count from `--pp-layers` or
    n // pp. Numbers or arrays."""

    layers: Any
    moe: Any
    """Its MoE layers: the dense ones come first, so min(n // pp, n_moe_layers) -- with pp > 1
    the last stage has the most expert layers of any stage."""
    sliding: Any
    """Its sliding-window layers."""


def stage_mix(spec: ModelSpec, L: PlanNumbers, xp: Ops = SCALAR) -> StageLayers:
    n = spec.n_layers
    layers = L.stage_layers(n, "last")
    moe = xp.minimum(layers, spec.n_moe_layers) if spec.is_moe else 0
    if not spec.sliding_window:
        sliding = 0
    elif not spec.global_every:
        sliding = layers
    else:  # layer i is global when (i + 1) % g == 0: i < x holds x // g of them
        g = spec.global_every
        sliding = layers - (n // g - (n - layers) // g)
    return StageLayers(layers=layers, moe=moe, sliding=sliding)
