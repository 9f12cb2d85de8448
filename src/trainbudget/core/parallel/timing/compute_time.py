"""Compute time of one micro-batch on one GPU: a roofline per op class (matmuls, attention,
memory-bound element-wise work), forward and backward, recomputation, and the head and loss.
Every function takes numbers for one plan or arrays for the planner's grid (`xp`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import NONE, SELECTIVE, SELECTIVE_OP, PlanNumbers
from trainbudget.core.parallel.timing.attention_time import AttentionKernel
from trainbudget.core.parallel.timing.efficiency import Efficiency
from trainbudget.core.parallel.timing.gemm_time import matmul_seconds
from trainbudget.core.parallel.timing.loss_time import (
    UNFUSED_FP32_BYTES_PER_LOGIT,
    gathered_logits_copy_seconds,
    loss_logits,
    loss_seconds,
)
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.flops import forward_flops, matmul_flops
from trainbudget.core.single.params import attention_matrices
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
class LayerCompute:
    """Forward seconds of one layer for one micro-batch on one GPU, and two of its parts:
    the mean over the layers of the timed stage (`stage_mix`), which mixes global and
    sliding-window attention, dense and MoE MLPs."""

    forward_seconds: Any
    attention_seconds: Any
    """The attention core (scores, softmax, values)."""
    attention_backward_seconds: Any
    """Its backward, with what the kernel recomputes in it (FlashAttention's scores)."""
    memory_bound_seconds: Any
    """Norms, residual adds, the activation function, RoPE (dropout: `_memory_bound_seconds`)."""
    op_recomputed_matmul_seconds: Any = 0.0
    """The weight matmuls selective-op recomputes (`core/single/op_checkpoint.py`)."""
    linear_seconds: Any = 0.0
    """The linear layers' GEMMs (projections and MLP): what a tensor-parallel collective can
    be pipelined with (`comm_time`, `Framework.tp_comm_overlap`)."""
    linear_backward_seconds: Any = 0.0
    """Their backward: each input-gradient and weight-gradient GEMM at its own shape."""

    @property
    def backward_seconds(self) -> Any:
        """The layer's backward: the linear layers' and the attention core's own, and
        BACKWARD_PER_FORWARD x the forward of the rest (norms, activations, the router)."""
        rest = self.forward_seconds - self.attention_seconds - self.linear_seconds
        return (
            BACKWARD_PER_FORWARD * rest
            + self.linear_backward_seconds
            + self.attention_backward_seconds
        )


def _mean(a: Any, n_a: Any, b: Any, n_b: Any, xp: Ops) -> Any:
    """Mean per layer of n_a layers costing a and n_b costing b."""
    return (n_a * a + n_b * b) / xp.maximum(1, n_a + n_b)


def attention_projection_seconds(spec: ModelSpec, rows: Any, t: Any, gemm: Any) -> Any:
    """One layer's Q, K, V and output projections on one GPU, each timed by `gemm(m, n, k)`
    for its (rows, k) @ (k, n) shape: one fused QKV GEMM, or MLA's four, whose FLOPs are
    forward_flops' qkv. MLA's down-projections are replicated on each TP rank (Megatron-Core's
    MLASelfAttention builds linear_q_down_proj and linear_kv_down_proj with parallel_mode=
    "duplicated"), the others column-parallel; the output projection's k is d_attn_out / tp."""
    seconds = gemm(rows, spec.d_model, spec.d_attn_out / t)
    for name, n_in, n_out, _ in attention_matrices(spec):
        seconds = seconds + gemm(rows, n_out if name.endswith("_down") else n_out / t, n_in)
    return seconds


@dataclass(frozen=True, kw_only=True)
class KernelModel:
    """What a GPU's kernels do beyond the roofline of their FLOPs and bytes (the step model's
    mechanisms from kernel benchmarks, core.spec.kernel_costs): `linear_peak` and
    `linear_fraction`, the linear layers' rate under a low-precision recipe (None: the other
    matmuls' peak and `eff.matmul`); `cast`, the recipe's cast kernels' bytes per element of
    each linear's input, weight and output gradient; `serial_epilogue`, the output written
    after the K loop (`EPILOGUE`); `kernel_gap` and `dispatch`, each kernel's launch cost on the
    GPU and the CPU, for `kernels_per_layer` of them; `attention`, fused attention's measured
    rates (`attention_time`; None: the fraction of the peak `eff.attention`, the backward
    BACKWARD_PER_FORWARD x the forward plus its own recomputation of the scores);
    `loss_extra_bytes`, the bytes per logit the loss kernel moves beyond reading the logits
    and writing their gradient once (`loss_time.loss_extra_bytes_per_logit`)."""

    linear_peak: float | None = None
    linear_fraction: float | None = None
    cast: tuple[float, float, float] = (0.0, 0.0, 0.0)
    serial_epilogue: bool = False
    kernel_gap: float = 0.0
    dispatch: float = 0.0
    kernels_per_layer: int = KERNELS_PER_LAYER_FORWARD
    attention: AttentionKernel | None = None
    loss_extra_bytes: float = LOSS_FP32_TRAFFIC_BYTES
    loss_whole_vocabulary: bool = False
    """The head's logits gathered whole to every TP rank before the loss
    (`loss_kernels.LossKernel.whole_vocabulary`): the loss runs over tokens x V on each rank
    and DTensor's copies around the gather are timed (`loss_time`)."""


ROOFLINE_ONLY = KernelModel()
"""No mechanism beyond the roofline (a calibration's measured rates hold them already)."""


@dataclass(frozen=True)
class _Roofline:
    """The device and dtypes every op of a layer is timed against: `peak` for the matmuls
    outside a low-precision recipe (the attention core, the head, the router), and what its
    kernels do beyond the roofline (`k`)."""

    e: int
    peak: float
    hbm: float
    eff: Efficiency
    xp: Ops
    sms: int = 0
    k: KernelModel = ROOFLINE_ONLY

    def mm(self, flops: Any, m: Any, n: Any, k: Any, batch: Any = 1) -> Any:
        return matmul_seconds(
            flops,
            m,
            n,
            k,
            self.e,
            self.peak,
            self.hbm,
            self.eff,
            self.xp,
            self.sms,
            batch,
            serial_epilogue=self.k.serial_epilogue,
        )

    def gemm(self, m: Any, n: Any, k: Any) -> Any:
        """(m, k) @ (k, n) outside the recipe, its FLOPs from the shape."""
        return self.mm(matmul_flops(m, k, n), m, n, k)

    def _linear_gemm(self, m: Any, n: Any, k: Any) -> Any:
        peak = self.peak if self.k.linear_peak is None else self.k.linear_peak
        return matmul_seconds(
            matmul_flops(m, k, n),
            m,
            n,
            k,
            self.e,
            peak,
            self.hbm,
            self.eff,
            self.xp,
            self.sms,
            fraction=self.k.linear_fraction,
            serial_epilogue=self.k.serial_epilogue,
        )

    def linear(self, m: Any, n: Any, k: Any) -> Any:
        """A linear layer's forward, (m, k) @ (k, n) at the recipe's rate, with the casts of
        its input and weight."""
        x, w, _ = self.k.cast
        return self._linear_gemm(m, n, k) + (m * k * x + k * n * w) / self.hbm_rate

    def linear_backward(self, m: Any, n: Any, k: Any) -> Any:
        """Its backward: the input's gradient (m, n) @ (n, k), the weight's (k, m) @ (m, n),
        each timed at its own shape, and the cast of the output gradient."""
        _, _, g = self.k.cast
        return self._linear_gemm(m, k, n) + self._linear_gemm(k, n, m) + m * n * g / self.hbm_rate

    @property
    def hbm_rate(self) -> float:
        return self.hbm * self.eff.hbm


def layer_compute(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    causal: bool = True,
    xp: Ops = SCALAR,
    sms: int = 0,
    kernels: KernelModel = ROOFLINE_ONLY,
) -> LayerCompute:
    """`causal`: a causal mask, whose upper tiles FlashAttention skips (the unfused kernel
    computes the whole s x s scores and masks them, so it costs the same). A sliding-window
    layer's queries see min(s, w) keys in both kernels (an unfused kernel that built the
    whole s x s scores and masked the band would cost what a global layer costs)."""
    r = _Roofline(e=e, peak=peak, hbm=hbm, eff=eff, xp=xp, sms=sms, k=kernels)
    rows = L.micro_batch * seq_len / L.cp  # tokens through each weight matmul on this GPU
    mix = stage_mix(spec, L, xp)
    mlp_mm, mlp_act = _mlp_seconds(spec, L, mix, rows, r)
    matmuls = attention_projection_seconds(spec, rows, L.tp, r.linear) + mlp_mm
    mlp_back, _ = _mlp_seconds(spec, L, mix, rows, r, backward=True)
    matmuls_back = attention_projection_seconds(spec, rows, L.tp, r.linear_backward) + mlp_back

    def core(window: int) -> Any:
        return _attention_core_seconds(spec, L, seq_len, window, rows, r, causal)

    if not spec.sliding_window:
        attention, backward = core(0)
    elif not spec.global_every:
        attention, backward = core(spec.sliding_window)
    else:
        n_global = mix.layers - mix.sliding
        (whole, whole_b), (band, band_b) = core(0), core(spec.sliding_window)
        attention = _mean(whole, n_global, band, mix.sliding, xp)
        backward = _mean(whole_b, n_global, band_b, mix.sliding, xp)
    memory_bound = _memory_bound_seconds(spec, L, rows, e, r.hbm_rate, xp) + mlp_act
    kernels_seconds = matmuls + attention + memory_bound
    n = r.k.kernels_per_layer
    forward = xp.maximum(kernels_seconds + n * r.k.kernel_gap, n * r.k.dispatch)
    return LayerCompute(
        forward_seconds=forward,
        attention_seconds=attention,
        attention_backward_seconds=backward,
        memory_bound_seconds=memory_bound,
        op_recomputed_matmul_seconds=matmuls * _op_recomputed_share(spec, seq_len),
        linear_seconds=matmuls,
        linear_backward_seconds=matmuls_back,
    )


def _mlp_seconds(
    spec: ModelSpec,
    L: PlanNumbers,
    mix: StageLayers,
    rows: Any,
    r: _Roofline,
    backward: bool = False,
) -> tuple[Any, Any]:
    """(matmul, activation-function) seconds of a layer's MLP, the mean over the stage's dense
    and MoE layers; MoE layers add their router. Forward, or the matmuls' `backward`."""
    t, d = L.tp, spec.d_model
    linear = r.linear_backward if backward else r.linear

    def mlp(d_hidden: int, visits: int) -> tuple[Any, Any]:
        """An MLP of width d_hidden each token visits `visits` times (the experts it is routed
        to, and the shared ones)."""
        up = d_hidden / t * (2 if spec.mlp == "swiglu" else 1)
        mm = linear(rows * visits, up, d) + linear(rows * visits, d, d_hidden / t)
        act = rows * ACTIVATION_FN_TRAFFIC[spec.mlp] * d_hidden * visits / t * r.e / r.hbm_rate
        return mm, act

    if not spec.is_moe:
        return mlp(spec.d_ff, 1)
    moe_mm, moe_act = mlp(spec.d_ff_expert, spec.experts_per_token + spec.n_shared_experts)
    # the router: each TP rank routes 1/tp of the tokens (Megatron-Core's MoE runs with SP)
    router_flops = matmul_flops(rows, d, spec.n_experts) / t
    router = r.mm(router_flops, rows, spec.n_experts, d)
    moe_mm = moe_mm + (BACKWARD_PER_FORWARD * router if backward else router)
    if not spec.n_dense_layers:
        return moe_mm, moe_act
    dense_mm, dense_act = mlp(spec.d_ff, 1)
    n_dense = mix.layers - mix.moe
    return (
        _mean(dense_mm, n_dense, moe_mm, mix.moe, r.xp),
        _mean(dense_act, n_dense, moe_act, mix.moe, r.xp),
    )


def _attention_core_seconds(
    spec: ModelSpec,
    L: PlanNumbers,
    seq_len: int,
    window: int,
    rows: Any,
    r: _Roofline,
    causal: bool,
) -> tuple[Any, Any]:
    """(forward, backward) seconds of the attention core of a layer whose queries see
    min(s, window) keys (all s without a window), FlashAttention or unfused."""
    s, b, t = seq_len, L.micro_batch, L.tp
    keys = min(s, window) if window else s
    pair_flops = 2 * (spec.d_q + spec.d_attn_out)  # scores and values, per pair (flops.py)
    flops = s * keys * pair_flops * b / (t * L.cp)  # forward, every pair
    flash, flash_backward = _flash_seconds(spec, L, flops, s, window, r, causal)
    if L.flash is True:  # every plan runs FlashAttention (the planner's grid holds one flag)
        return flash, flash_backward
    # unfused: batched GEMMs (s/cp, d_head) @ (d_head, keys) and (s/cp, keys) @ (keys,
    # d_v_head) per head, whose k = d_head makes them memory-bound on the s x keys operand;
    # then softmax (read and write the scores)
    q_rows, per_seq = s / L.cp, b / (t * L.cp)
    heads = b * spec.n_heads / t  # the batch of per-head GEMMs
    scores = r.mm(2 * s * keys * spec.d_q * per_seq, q_rows, keys, spec.d_head, heads)
    values = r.mm(2 * s * keys * spec.d_attn_out * per_seq, q_rows, spec.d_v_head, keys, heads)
    per_score = 2 * r.e  # the softmax reads and writes the scores
    if spec.dropout:  # the attention dropout, its own kernel on the probabilities
        per_score = per_score + dropout_bytes(r.e, standalone=True) / (1 + BACKWARD_PER_FORWARD)
    unfused = scores + values + rows * (spec.n_heads / t) * keys * per_score / r.hbm_rate
    forward = r.xp.where(L.flash, flash, unfused)
    return forward, r.xp.where(L.flash, flash_backward, BACKWARD_PER_FORWARD * unfused)


def _flash_seconds(
    spec: ModelSpec, L: PlanNumbers, flops: Any, s: int, window: int, r: _Roofline, causal: bool
) -> tuple[Any, Any]:
    """(forward, backward) seconds of a FlashAttention core of `flops` forward FLOPs (every
    pair): at the kernel's measured rates per pass (`attention_time`): causal, as the
    context-parallel ring's blocks (`AttentionKernel.ring_seconds_per_flop`), else unmasked
    at s / cp (a window's band at the window's length, its tiles counted); else at
    the fraction `eff.attention` of the peak, causal as the tiles it computes
    (`flash_tile_fraction`), the backward BACKWARD_PER_FORWARD x the forward and half a
    forward more (the scores recomputed)."""
    banded = bool(window) and window < s
    if r.k.attention is not None:
        kernel = r.k.attention
        if causal and not banded:  # the ring's blocks under CP (cp = 1: the causal curve at s)
            rates = kernel.ring_seconds_per_flop(spec.d_head, s, L.cp, r.xp)
        else:
            seq = window if banded else s / L.cp
            rates = kernel.pass_seconds_per_flop(spec.d_head, False, seq, r.xp)
        if rates is not None:
            share = flash_tile_fraction(s, window) * 2 if banded and causal else 1.0
            return flops * share * rates[0], flops * share * rates[1]
    forward = flops / (r.peak * r.eff.attention)
    if causal:
        forward = forward * flash_tile_fraction(s, window)
    return forward, (BACKWARD_PER_FORWARD + FLASH_OWN_RECOMPUTE) * forward


def _op_recomputed_share(spec: ModelSpec, seq_len: int) -> float:
    """The share of a layer's weight-matmul FLOPs that selective-op recomputes (llama: wk,
    wo, w3); their time is taken as that share of the layer's matmul time (the layer's GEMMs
    are compute-bound at training shapes, so time follows FLOPs)."""
    if op_checkpoint.unsupported(spec):
        return 0.0
    fwd = forward_flops(spec, seq_len)
    weights = fwd.qkv + fwd.attn_proj + fwd.mlp_up + fwd.mlp_gate + fwd.mlp_down + fwd.router
    return op_checkpoint.recomputed_flops(spec, seq_len) / weights


def _memory_bound_seconds(
    spec: ModelSpec, L: PlanNumbers, rows: Any, e: int, hbm_rate: float, xp: Ops
) -> Any:
    """One layer's memory-bound ops but the MLP's activation: norms and residual adds (run
    redundantly on each TP rank without SP), QK-norm or MLA's latent norms, RoPE, and the
    hidden dropouts where the model has them (HIDDEN_DROPOUTS; the attention dropout is timed
    with the attention core). Bytes of the forward pass: the layer's backward is timed as
    BACKWARD_PER_FORWARD times its forward, so a dropout's forward-and-backward bytes enter
    divided by 1 + BACKWARD_PER_FORWARD."""
    t, d = L.tp, spec.d_model
    rep = xp.where(L.sp, t, 1)
    norms = NORM_TRAFFIC_PER_D + (POST_NORM_TRAFFIC_PER_D if spec.post_norms else 0)
    per_token = (norms * d + RESIDUAL_TRAFFIC_PER_D * d) / rep  # elements per token
    if spec.qk_norm:
        per_token = per_token + INNER_NORM_TRAFFIC * (spec.d_q + spec.d_kv) / t
    if spec.is_mla:  # latents computed whole on each TP rank (duplicated down-projections)
        per_token = per_token + INNER_NORM_TRAFFIC * (spec.q_lora_rank + spec.kv_lora_rank)
    if spec.position == "rope":
        # each query head's d_rope rotary dims; each key head's, or MLA's one shared key
        q_rope = spec.n_heads * spec.d_rope / t
        k_rope = spec.rope_head_dim if spec.is_mla else spec.n_kv_heads * spec.d_rope / t
        per_token = per_token + ROPE_TRAFFIC * (q_rope + k_rope)
    moved = rows * per_token * e
    if spec.dropout:  # as forward-pass bytes: the layer's backward is timed as 2 x its forward
        hidden = HIDDEN_DROPOUTS * d / rep * dropout_bytes(e, standalone=False)
        moved = moved + rows * hidden / (1 + BACKWARD_PER_FORWARD)
    return moved / hbm_rate


@dataclass(frozen=True, kw_only=True)
class MicroBatchCompute:
    """One micro-batch on the last pipeline stage, and on the largest (numbers, or arrays)."""

    forward_seconds: Any
    """The last stage's layers, forward."""
    backward_seconds: Any
    """The last stage's layers, backward, with what recomputation repeats."""
    head_seconds: Any
    """The head's matmuls, forward and backward, and the loss's memory traffic of both passes
    (the last stage's extra work)."""
    attention_seconds: Any
    """One layer's attention core, forward (what CP's ring exchange hides behind)."""
    linear_seconds: Any
    """One layer's linear-layer GEMMs, forward (what TP's collectives can pipeline with)."""
    stage_seconds: Any
    """The slowest stage: the last one's layers and head (`head_seconds`), or the largest
    stage's layers when an uneven split makes another stage slower (with an even split the
    last stage is the slowest)."""
    pipeline_seconds: Any
    """One micro-batch through every stage, forward and backward: all the model's layers (at
    the last stage's mean layer time, its mix of MoE or sliding-window layers) and the head
    (= stage_seconds without pipeline parallelism)."""


def micro_batch_compute(
    spec: ModelSpec,
    L: PlanNumbers,
    *,
    seq_len: int,
    e: int,
    peak: float,
    hbm: float,
    eff: Efficiency,
    causal: bool = True,
    xp: Ops = SCALAR,
    sms: int = 0,
    kernels: KernelModel = ROOFLINE_ONLY,
    recompute_from_first: bool = True,
    selective_reruns_attention: bool = False,
) -> MicroBatchCompute:
    """`eff` resolved against the GPU (`Efficiency.resolved`), whose SM count is `sms`;
    `peak` the rate of the matmuls outside a low-precision recipe; `kernels` what the GPU's
    kernels do beyond the roofline (`KernelModel`); `recompute_from_first` how every-K-th
    recomputation counts its layers (`PlanNumbers.recomputed_layers`);
    `selective_reruns_attention` whether selective recomputation runs a fused attention's
    forward again (`Framework.selective_reruns_fused_attention`)."""
    layer = layer_compute(
        spec,
        L,
        seq_len=seq_len,
        e=e,
        peak=peak,
        hbm=hbm,
        eff=eff,
        causal=causal,
        xp=xp,
        sms=sms,
        kernels=kernels,
    )
    fwd, attn = layer.forward_seconds, layer.attention_seconds
    layer_backward = layer.backward_seconds
    layers = L.stage_layers(spec.n_layers, "last")
    largest = L.stage_layers(spec.n_layers, "max")
    rerun = selective_reruns_attention
    recompute = _recompute_per_layer(L, layers, layer, xp, recompute_from_first, rerun)
    recompute_largest = _recompute_per_layer(L, largest, layer, xp, recompute_from_first, rerun)
    tokens = L.micro_batch * seq_len / L.cp
    whole = kernels.loss_whole_vocabulary
    logits = loss_logits(tokens, spec.vocab_size, L.tp, whole)  # elements on this GPU
    r = _Roofline(e=e, peak=peak, hbm=hbm, eff=eff, xp=xp, sms=sms, k=kernels)
    head_gemm = r.gemm(tokens, spec.vocab_size / L.tp, spec.d_model)  # vocab-parallel logits
    # the logits read, their gradient written, the loss kernel's fp32 traffic: both passes
    loss = loss_seconds(logits, e, kernels.loss_extra_bytes, hbm * eff.hbm)
    if whole:  # the gather's copies (the gather itself: comm_time's TP collectives)
        loss = loss + gathered_logits_copy_seconds(
            tokens, spec.vocab_size, L.tp, e, hbm * eff.hbm, xp
        )
    head = (1 + BACKWARD_PER_FORWARD) * head_gemm + loss
    forward = layers * fwd
    backward = layers * (layer_backward + recompute)
    last = forward + backward + head
    largest = largest * fwd + largest * (layer_backward + recompute_largest)
    stage = xp.maximum(largest, last)
    # every stage's layers at the last stage's per-layer time, and the head once
    every = spec.n_layers * (forward + backward) / layers + head
    return MicroBatchCompute(
        forward_seconds=forward,
        backward_seconds=backward,
        head_seconds=head,
        attention_seconds=attn,
        linear_seconds=layer.linear_seconds,
        stage_seconds=stage,
        pipeline_seconds=xp.where(L.pp == 1, stage, every),
    )


def _recompute_per_layer(
    L: PlanNumbers,
    layers: Any,
    layer: LayerCompute,
    xp: Ops,
    from_first: bool = True,
    rerun_fused: bool = False,
) -> Any:
    """Backward seconds per layer that recomputation adds on a stage of `layers`: the attention
    core's forward (selective; under FlashAttention nothing, as it keeps no scores and its
    backward recomputes them itself, in `attention_backward_seconds` -- unless the framework
    checkpoints the fused kernel anyway and runs its forward again, `rerun_fused`), the
    memory-bound ops
    and the unsaved matmuls (selective-op) or the whole layer's forward (full; of every K-th
    layer, ceil(layers / K) of them, spread over the stage's layers)."""
    fwd, attn = layer.forward_seconds, layer.attention_seconds
    full = L.recomputed_layers(layers, from_first) * fwd / layers
    by_op = layer.memory_bound_seconds + layer.op_recomputed_matmul_seconds
    recompute = xp.where(L.recompute == SELECTIVE_OP, by_op, full)
    skipped = L.flash & (not rerun_fused)
    recompute = xp.where(L.recompute == SELECTIVE, xp.where(skipped, 0.0, attn), recompute)
    return xp.where(L.recompute == NONE, 0.0, recompute)
