"""Time of one decoder layer for one micro-batch on one GPU: a roofline per op class (the
linear layers' GEMMs at their shapes, the attention core from the measured kernel tables or a
fraction of the peak, the memory-bound element-wise work from its bytes), forward and
backward, with what a GPU's kernels do beyond the roofline (`KernelModel`). Numbers for one
plan or arrays for the planner's grid (`xp`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.timing.attention_time import AttentionKernel
from trainbudget.core.parallel.timing.efficiency import Efficiency
from trainbudget.core.parallel.timing.gemm_time import matmul_seconds
from trainbudget.core.parallel.timing.layer_traffic import (
    ACTIVATION_FN_TRAFFIC,
    BACKWARD_PER_FORWARD,
    FLASH_OWN_RECOMPUTE,
    HIDDEN_DROPOUTS,
    INNER_NORM_TRAFFIC,
    KERNELS_PER_LAYER_FORWARD,
    LOSS_FP32_TRAFFIC_BYTES,
    NORM_TRAFFIC_PER_D,
    POST_NORM_TRAFFIC_PER_D,
    RESIDUAL_TRAFFIC_PER_D,
    ROPE_TRAFFIC,
    StageLayers,
    dropout_bytes,
    flash_tile_fraction,
    stage_mix,
)
from trainbudget.core.single import op_checkpoint
from trainbudget.core.single.flops import forward_flops, matmul_flops
from trainbudget.core.single.params import attention_matrices
from trainbudget.core.spec.model_spec import ModelSpec


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
class Roofline:
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
    r = Roofline(e=e, peak=peak, hbm=hbm, eff=eff, xp=xp, sms=sms, k=kernels)
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
    r: Roofline,
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
    r: Roofline,
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
    spec: ModelSpec, L: PlanNumbers, flops: Any, s: int, window: int, r: Roofline, causal: bool
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
