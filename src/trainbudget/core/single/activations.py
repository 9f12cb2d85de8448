"""Activation memory of training, per layer and at peak.

The per-layer count follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Sec. 4.1, eq. 1: s*b*h*(34 + 5*a*s/h) bytes with 16-bit
activations and dropout), term by term, adapted to:
- grouped-query attention (K and V are s*b*d_kv, not s*b*h);
- SwiGLU (gate, up, silu(gate) and their product are saved: 4*s*b*d_ff instead of GELU's 2);
- MoE (each token's hidden tensors exist once per expert it visits, plus the router scores);
  with dense layers before the MoE ones, a layer's figure is the mean over the stack, so that
  n_layers times it is the stack's total;
- MLA (its latents and assembled Q, K; see `_qkv_bytes`) and Gemma's post-norms (two more
  s*b*h norm inputs);
- no dropout unless the spec says so (`ModelSpec.dropout`: modern LLM pre-training has none;
  with it, the paper's masks);
- FlashAttention (Dao et al. 2022, arXiv 2205.14135): no s*s matrix, an fp32 logsumexp instead;
- weights wider than the activations (`weight_bytes`: PyTorch autocast, fp32 weights and 16-bit
  matmuls): the residual stream, which the embedding lookup starts and the residual adds
  promote, stays in the weights' dtype (so do the norm inputs it feeds and each layer's
  checkpoint), and each matmul saves the 16-bit copy autocast makes of its weight
  (`weight_copy_bytes`). Matmul inputs and outputs, hence everything else here, are 16-bit.
With dropout, MHA, GELU and d_ff = 4h the count equals the paper's 34*s*b*h + 5*a*s*s*b exactly
(a test checks it). Norm statistics (mean/rstd, s*b fp32 each) are left out as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbudget.core.errors import SpecError
from trainbudget.core.ops import SCALAR, Ops
from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.single.op_checkpoint import layer_matmuls
from trainbudget.core.single.params import matrix_shapes
from trainbudget.core.spec.model_spec import ModelSpec

FP32_BYTES = 4  # softmax statistics and the loss are kept in fp32 whatever the policy
NON_LAYER_MATRICES = ("embedding/token", "embedding/position", "head")
"""`params.matrix_shapes` rows outside the layers (the head's matmul is counted with the head)."""
MASK_BYTES = 1  # a dropout mask is one byte per element (Korthikanti et al., Sec. 4.1)


@dataclass(frozen=True, kw_only=True)
class LayerActivations:
    """Bytes one transformer layer saves for backward, for one micro-batch, by tensor group."""

    norm_inputs_bytes: float
    """Inputs of the two norms (the attention one is the layer input)."""
    attention_linear_inputs_bytes: float
    """Inputs of the qkv and output projections."""
    qkv_bytes: float
    """Q, K, V kept for the attention backward (with RoPE, also the rotated Q and K)."""
    attention_matrix_bytes: float
    """softmax(Q K^T): a*s*s*b elements; 0 with FlashAttention or selective recompute."""
    flash_stats_bytes: float
    """FlashAttention's fp32 logsumexp, a*s*b values."""
    mlp_bytes: float
    """MLP (or routed experts') inputs and hidden tensors, plus router scores."""
    dropout_bytes: float
    """Dropout masks and outputs; 0 without dropout."""
    weight_copies_bytes: float = 0.0
    """Under autocast, the 16-bit copies of the layer's matmul weights (`weight_copy_bytes`)."""

    @property
    def total_bytes(self) -> float:
        return (
            self.weight_copies_bytes
            + self.norm_inputs_bytes
            + self.attention_linear_inputs_bytes
            + self.qkv_bytes
            + self.attention_matrix_bytes
            + self.flash_stats_bytes
            + self.mlp_bytes
            + self.dropout_bytes
        )


def layer_activations(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: Any,
    activation_bytes: int,
    weight_bytes: int | None = None,
    flash_attention: Any = False,
    drop_attention_matrix: Any = False,
    tp: Any = 1,
    sp: Any = False,
    cp: Any = 1,
    xp: Ops = SCALAR,
    linear_input_bytes: Any = None,
) -> LayerActivations:
    """Bytes one layer stores on one GPU for backward (no recomputation), for `micro_batch`
    sequences, under tensor (tp), sequence (sp) and context (cp) parallelism. The layout
    arguments may be numbers or, with `xp=numpy_ops()`, arrays (one element per plan).

    Korthikanti et al. 2022, Sec. 4.2: with TP alone the norm inputs, the inputs of the first
    linear of each block and the dropout masks stay replicated (10*s*b*h of eq. 2) while the
    rest splits by t (24*s*b*h/t + 5*a*s*s*b/t); SP splits the replicated part too (eq. 3).
    CP keeps s/cp queries per GPU (attention scores: s/cp queries x s keys). K/V heads are
    replicated when tp > n_kv_heads, as Megatron does. `weight_bytes` (default
    `activation_bytes`): bytes per element of the weights the forward reads, the residual
    stream's width (see the module docstring on autocast). `linear_input_bytes` (default
    `activation_bytes`): bytes per element a linear layer saves of its input
    (`fp8_recipes.Fp8Recipe.saved_input_bytes`: 1 under Transformer Engine's FP8): the qkv,
    MLP-in and MLP-out inputs are saved at that width; the output projection's input, which
    the attention kernel also saves (FlashAttention's output), at the activation width plus
    the linear's narrower copy.
    """
    if not xp.is_array:
        _check_positive(seq_len=seq_len, micro_batch=micro_batch, tp=tp, cp=cp)
    s, b, h, e = seq_len, micro_batch, spec.d_model, activation_bytes
    li = e if linear_input_bytes is None else linear_input_bytes
    # a linear's own narrower copy of an input another op saves at the activation width
    copy = xp.where(li < e, li, 0)
    w = residual_bytes(activation_bytes, weight_bytes)
    tokens = s * b / cp  # tokens this GPU holds along the sequence
    rep = xp.where(sp, tp, 1)  # divisor of the tensors TP alone leaves replicated
    d_q = spec.d_q / tp
    d_kv = xp.maximum(spec.d_kv / tp, spec.d_head)  # K heads replicated when tp > n_kv_heads
    d_v = xp.maximum(spec.d_v / tp, spec.d_v_head)
    store_matrix = xp.not_(flash_attention | drop_attention_matrix)
    # local queries x all keys, local heads; a sliding layer without FlashAttention still
    # materialises the whole masked s x s matrix
    matrix_elements = _score_elements(spec, s, b, tp, cp)
    dropout_bytes = _dropout_bytes(spec, tokens, rep, store_matrix, matrix_elements, e, xp)
    casts = autocasts(activation_bytes, weight_bytes)
    # copies of the attention norm's output its matmuls keep (MLA: the q and kv down-projections)
    n_norm_out = norm_output_copies(2 if spec.is_mla else 1, casts)
    # the two pre-norms read the residual stream; post-norms read an attention or MLP output
    post_norms = 2 if spec.post_norms else 0
    return LayerActivations(
        norm_inputs_bytes=tokens * h * (2 * w + post_norms * e) / rep,
        attention_linear_inputs_bytes=tokens
        * (n_norm_out * h / rep * li + spec.d_attn_out / tp * (e + copy))
        + _mla_latent_bytes(spec, tokens, e),
        qkv_bytes=_qkv_bytes(spec, tokens, d_q, d_kv, d_v, tp, e),
        attention_matrix_bytes=xp.where(store_matrix, matrix_elements * e, 0),
        flash_stats_bytes=xp.where(flash_attention, _logsumexp_bytes(spec, tokens, tp), 0),
        mlp_bytes=_mlp_bytes(spec, tokens, rep, tp, e, weight_bytes, li),
        dropout_bytes=dropout_bytes,
        weight_copies_bytes=weight_copy_bytes(
            layer_matrix_elements(spec) / tp, activation_bytes, weight_bytes
        ),
    )


def _check_positive(**counts: Any) -> None:
    for name, value in counts.items():
        if value <= 0:
            raise SpecError(name, value, "must be a positive integer")


def _dropout_bytes(
    spec: ModelSpec, tokens: Any, rep: Any, store_matrix: Any, matrix_elements: Any, e: int, xp: Ops
) -> Any:
    """Dropout's saved masks: after attention and MLP (s*b*h each, split as the replicated
    tensors are); on a stored attention matrix, its mask and its dropped-out copy (the softmax
    output itself is counted with the matrix)."""
    if not spec.dropout:
        return 0.0
    masks = 2 * tokens * spec.d_model * MASK_BYTES / rep
    return masks + xp.where(store_matrix, matrix_elements * (MASK_BYTES + e), 0)


def residual_bytes(activation_bytes: int, weight_bytes: int | None) -> int:
    """Bytes per element of the residual stream: the weights' dtype (the embedding lookup
    returns it and each residual add promotes the 16-bit branch output back to it)."""
    return activation_bytes if weight_bytes is None else weight_bytes


def autocasts(activation_bytes: int, weight_bytes: int | None) -> bool:
    """Whether matmuls cast their operands: weights (and the residual stream) wider than the
    matmuls' dtype, as under torch.autocast (fp32 weights, bf16/fp16 compute)."""
    return weight_bytes is not None and weight_bytes > activation_bytes


def weight_copy_bytes(elements: Any, activation_bytes: int, weight_bytes: int | None) -> Any:
    """Bytes of the copies autocast makes of `elements` weight elements read by matmuls: each
    linear casts its weight to `activation_bytes` and saves that copy for its input gradient
    (addmm's backward reads the weight it multiplied), so every copy lives until the layer's
    backward (torch.autocast docs, "Ops that can autocast to lower precision": linear, matmul;
    measured with MemTracker: tests/profile/test_profile_matrix.py). Biases are cast too but
    not saved (the bias gradient is a sum of the output gradient)."""
    return elements * activation_bytes if autocasts(activation_bytes, weight_bytes) else 0.0


def norm_output_copies(n_matmuls: int, casts: Any) -> Any:
    """Copies of one norm's output that the `n_matmuls` reading it keep: the one tensor they
    share, or, under autocast (the output in the weights' wider dtype), each matmul's own
    16-bit cast: autocast caches only the casts of leaf tensors (weights), so SwiGLU's gate
    and up each cast the same input."""
    return n_matmuls if casts else 1


def layer_matrix_elements(spec: ModelSpec) -> float:
    """Weight-matrix elements of one layer, the mean over the stack (`params.matrix_shapes`:
    attention, MLP or experts and router)."""
    elements = sum(
        rows * cols * count
        for name, rows, cols, count in matrix_shapes(spec)
        if name not in NON_LAYER_MATRICES
    )
    return elements / spec.n_layers


def _score_elements(spec: ModelSpec, s: int, b: Any, tp: Any, cp: Any) -> Any:
    """Attention scores on one GPU: local heads x local queries x all keys x sequences."""
    return spec.n_heads / tp * (s / cp) * s * b


def _logsumexp_bytes(spec: ModelSpec, tokens: Any, tp: Any) -> Any:
    """FlashAttention's fp32 logsumexp: one value per local head and token."""
    return spec.n_heads / tp * tokens * FP32_BYTES


def _mla_latent_bytes(spec: ModelSpec, tokens: Any, e: int) -> Any:
    """MLA: the normalised q and kv latents, inputs of the up-projections (not split by TP:
    the down-projections are replicated)."""
    return tokens * (spec.q_lora_rank + spec.kv_lora_rank) * e if spec.is_mla else 0.0


def _qkv_bytes(spec: ModelSpec, tokens: Any, d_q: Any, d_kv: Any, d_v: Any, tp: Any, e: int) -> Any:
    """Q, K, V as attention keeps them, and what their producers keep.

    RoPE writes rotated copies of q and k while the fused qkv output stays alive (V is a view
    of it): d_q + d_kv more per token than learned positions. QK-norm keeps its inputs, which
    are views of that output; with RoPE its outputs are not kept (rotation needs only cos and
    sin), without RoPE attention keeps them. MLA keeps its latents before their norms
    (q_lora_rank + kv_lora_rank + rope_head_dim), the kv up-projection's output (k_nope and
    V are views of it) and Q, K assembled from their rotary and non-rotary parts.
    """
    if spec.is_mla:
        latents = spec.q_lora_rank + spec.kv_lora_rank + spec.rope_head_dim
        kv_up = spec.n_heads * (spec.d_head - spec.rope_head_dim + spec.d_v_head) / tp
        return tokens * (latents + kv_up + d_q + d_kv) * e
    fused = tokens * (d_q + d_kv + d_v) * e
    if spec.position == "rope" or spec.qk_norm:
        fused = fused + tokens * (d_q + d_kv) * e
    return fused


def _mlp_bytes(
    spec: ModelSpec,
    tokens: Any,
    rep: Any,
    tp: Any,
    e: int,
    weight_bytes: int | None,
    linear_input_bytes: Any = None,
) -> Any:
    """MLP inputs and hidden tensors, the mean over the layers (dense-then-MoE stacks); under
    autocast SwiGLU's gate and up keep one cast of the input each. The MLP's input and the
    last hidden tensor (the down-projection's input, which only that linear saves) at
    `linear_input_bytes` (layer_activations); routed experts at the activation width."""
    li = e if linear_input_bytes is None else linear_input_bytes
    casts = autocasts(e, weight_bytes)
    h, n_in = spec.d_model, norm_output_copies(2 if spec.mlp == "swiglu" else 1, casts)
    hidden = (saved_hidden_tensors(spec) - 1) * e + li
    dense = tokens * (n_in * h / rep * li + hidden * spec.d_ff / tp)
    if not spec.is_moe:
        return dense
    moe = moe_layer_bytes(spec, tokens, rep, tp, e, weight_bytes)
    n_moe = spec.n_moe_layers
    if n_moe == spec.n_layers:
        return moe
    return (n_moe * moe + (spec.n_layers - n_moe) * dense) / spec.n_layers


MOE_ROW_COPIES = 3
"""(token, expert) rows of width d_model a routed assignment keeps in the reference MoE layer
(model.moe._dispatch): its expert's input (the gathered token), the expert's output (which the
gate multiplies) and the gated output (index_add_'s source, saved for its backward's shape)
-- measured with MemTracker (`trainbudget profile --device cpu` on a 4-expert top-2 model:
three (N k, d) tensors a layer)."""

ROUTER_FP32_COPIES = 2
"""fp32 (tokens x n_experts) tensors the router keeps: its logits (the z-loss's logsumexp saves
them) and the softmax probabilities (saved for the gates' gradient)."""

ROUTING_BYTES_PER_SLOT = 3 * 8 + 2 * 4
"""Bytes per (token, expert) assignment of the routing's saved bookkeeping: three int64
indices (the chosen experts the gates' gather saves, the queue positions and the token rows
index_add_ and the row gather save) and two fp32 gates (as gathered, and per dispatched row).
Measured: about 10 KB a layer beyond the tensors above at 128 tokens, top-2 (8 KB here)."""


def moe_layer_bytes(
    spec: ModelSpec, tokens: Any, rep: Any, tp: Any, e: int, weight_bytes: int | None = None
) -> Any:
    """What one MoE layer of the reference implementation (model.moe) keeps for backward: the
    normalised input the router and the shared experts read (tokens x d, once), each kept
    routed slot's (`kept_slots_per_token`) `MOE_ROW_COPIES` rows, its expert's hidden tensors
    and its routing bookkeeping (`ROUTING_BYTES_PER_SLOT`), each shared expert's hidden
    tensors, the router's `ROUTER_FP32_COPIES`.

    Under autocast (`weight_bytes`, see the module docstring) the normalised input is in the
    residual's dtype: the router and each input matmul of each expert keep their own 16-bit
    cast of it (`norm_output_copies`), and the gated output takes the gates' dtype, the
    input's (measured on CPU: tests/profile/test_profile_matrix.py, the MoE step)."""
    casts, w = autocasts(e, weight_bytes), residual_bytes(e, weight_bytes)
    n_in = norm_output_copies(2 if spec.mlp == "swiglu" else 1, casts)  # per expert's input
    h, hidden = spec.d_model, saved_hidden_tensors(spec) * spec.d_ff_expert / tp
    slots = kept_slots_per_token(spec) * tokens
    # the expert's own row (input casts and hidden tensors), its output and the gated output
    rows = expert_row_bytes(spec, rep=rep, tp=tp, e=e, input_copies=n_in)
    rows = rows + ((MOE_ROW_COPIES - 1) * e + w - e) * h / rep
    routed = slots * (rows + ROUTING_BYTES_PER_SLOT / rep)
    # with casts the shared experts' inputs are their own copies, not the router's
    shared_inputs = spec.n_shared_experts * n_in if casts else 0
    shared = spec.n_shared_experts * tokens * hidden * e
    router = ROUTER_FP32_COPIES * tokens * spec.n_experts * FP32_BYTES / rep
    return (1 + shared_inputs) * tokens * h * e / rep + routed + shared + router


def saved_hidden_tensors(spec: ModelSpec) -> int:
    """Hidden (d_ff-wide) tensors an MLP keeps for backward: the up-projection's output and the
    activation's (GELU), or the gate's, the up's, the SiLU's and the product (SwiGLU)."""
    return 4 if spec.mlp == "swiglu" else 2


def expert_row_bytes(
    spec: ModelSpec, *, rep: Any = 1, tp: Any = 1, e: int, input_copies: int = 1
) -> Any:
    """What a routed expert keeps for one row it runs on: the row (its input; under autocast
    one cast per input matmul, `input_copies`) and its hidden tensors."""
    hidden = saved_hidden_tensors(spec) * spec.d_ff_expert / tp
    return (input_copies * spec.d_model / rep + hidden) * e


def kept_slots_per_token(spec: ModelSpec) -> float:
    """Assignments per token the reference MoE layer keeps, with balanced routing: every one of
    the experts_per_token, or a capacity factor C < 1's share of them (model.moe: each expert
    takes ceil(C N k / E) of the N k assignments, its queue is not padded). Frameworks that
    pad the experts' buffers to the capacity (GShard) fill C k slots:
    `ModelSpec.routed_slots_per_token`, which the all-to-all bytes use."""
    c = spec.capacity_factor
    return spec.experts_per_token * (min(c, 1.0) if c else 1.0)


@dataclass(frozen=True, kw_only=True)
class OpCheckpointLayer:
    """What one layer keeps under per-op selective checkpointing (`op_checkpoint`), one
    micro-batch on one GPU: the block input (the checkpoint's own argument), the outputs of
    the matmuls the policy saves (llama: wq, wv, w1, w2; a row-parallel one, w2, as the
    full-width partial sum before TP's reduction), the attention kernel's outputs (O and the
    fp32 logsumexp with flash, O and the s x s probabilities with math SDPA) and, with SP,
    the outputs of the two reduce-scatters (after wo and w2), saved as comm ops."""

    total_bytes: Any
    unread_bytes: Any
    """Of the total, what the layer's backward never reads (saved anyway): the output of a
    saved row-parallel matmul and the reduce-scatter outputs."""


def op_checkpoint_layer(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: Any,
    activation_bytes: int,
    flash_attention: Any = False,
    tp: Any = 1,
    sp: Any = False,
    cp: Any = 1,
    xp: Ops = SCALAR,
) -> OpCheckpointLayer:
    """Bytes one layer keeps under torchtitan's per-op policy (`op_checkpoint.layer_matmuls`
    says which matmuls); recomputed, so not kept: the norms' outputs, RoPE's rotated Q and K,
    the activation function and the gate x up product, the unsaved matmuls' outputs (llama:
    wk, wo, w3), the residual sum between attention and MLP, and all-gather outputs."""
    e, h = activation_bytes, spec.d_model
    tokens = seq_len * micro_batch / cp  # tokens through each matmul on this GPU
    saved = [m for m in layer_matmuls(spec) if m.saved]
    # elements per token. Row-parallel outputs are full-width partial sums on each TP rank;
    # column-parallel ones split by tp (K and V no narrower than one head)
    row = sum(m.d_out for m in saved if m.row_parallel)
    split = sum(m.d_out for m in saved if not m.row_parallel and not m.min_local_out)
    # the block input (h, split by tp under SP) and SP's two reduce-scatter outputs (h/tp)
    width = xp.where(sp, 3 * h / tp, h) + row + (split + spec.d_attn_out) / tp
    for m in saved:
        if m.min_local_out and not m.row_parallel:
            width = width + xp.maximum(m.d_out / tp, m.min_local_out)
    kernel = xp.where(
        flash_attention,
        _logsumexp_bytes(spec, tokens, tp),
        _score_elements(spec, seq_len, micro_batch, tp, cp) * e,
    )
    return OpCheckpointLayer(
        total_bytes=tokens * width * e + kernel,
        unread_bytes=tokens * (row + xp.where(sp, 2 * h / tp, 0)) * e,
    )


def op_checkpoint_working_bytes(layer: Any, kept: OpCheckpointLayer, xp: Ops = SCALAR) -> Any:
    """Extra bytes while one layer is recomputed for its backward: the replay rebuilds what
    the backward reads and the policy did not keep (`layer`: the no-recompute set)."""
    return xp.maximum(layer - (kept.total_bytes - kept.unread_bytes), 0.0)


@dataclass(frozen=True, kw_only=True)
class ActivationMemory:
    """Activation bytes held at the peak of one micro-batch's backward pass."""

    recompute: str
    per_layer: LayerActivations
    """One layer's stored tensors without recomputation."""
    layers_bytes: float
    """All layers under the recompute policy, including the one being recomputed at peak."""
    checkpoint_bytes: float
    """One layer's input (s*b*h, the residual stream): what full recomputation keeps a layer."""
    head_bytes: float
    """Final norm input and head input (s*b*h each); under autocast also the head's 16-bit
    weight copy (V*h)."""
    logits_bytes: float
    """Logits (activation dtype), fp32 log-probabilities kept by the loss, and their fp32
    gradient at the start of backward: s*b*V*(e + 4 + 4)."""

    @property
    def total_bytes(self) -> float:
        return self.layers_bytes + self.head_bytes + self.logits_bytes


def activation_memory(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: int,
    activation_bytes: int,
    recompute: str = "none",
    flash_attention: bool = False,
    weight_bytes: int | None = None,
) -> ActivationMemory:
    """Peak activation bytes for one micro-batch under a recompute policy.

    - none: every layer keeps everything (Korthikanti eq. 1 x L);
    - selective: the s*s attention matrix is recomputed, not kept (Korthikanti eq. 6);
    - full: each layer keeps only its input (s*b*h), and at peak one layer's tensors are
      rebuilt for its backward (Korthikanti Sec. 4.3, 2*s*b*h*L, plus that working layer);
    - selective-op: each layer keeps its input and the outputs torchtitan's per-op policy
      saves (`op_checkpoint_layer`), plus, at peak, what the replay of one layer rebuilds.

    `weight_bytes`: as in `layer_activations` (autocast keeps the residual stream, hence the
    checkpoints and the final norm's input, in the weights' dtype).
    """
    if recompute not in RECOMPUTE_KINDS:
        raise SpecError("recompute", recompute, "must be one of " + ", ".join(RECOMPUTE_KINDS))
    layer = layer_activations(
        spec,
        seq_len=seq_len,
        micro_batch=micro_batch,
        activation_bytes=activation_bytes,
        weight_bytes=weight_bytes,
        flash_attention=flash_attention,
        drop_attention_matrix=recompute == "selective",
    )
    tokens = seq_len * micro_batch
    h, e = spec.d_model, activation_bytes
    residual = tokens * h * residual_bytes(e, weight_bytes)  # a layer's input, (s, b, h)
    if recompute == "full":
        # the layer under recomputation holds its full set; its own input is part of that set
        layers = (spec.n_layers - 1) * residual + layer.total_bytes
    elif recompute == "selective-op":
        kept = op_checkpoint_layer(
            spec,
            seq_len=seq_len,
            micro_batch=micro_batch,
            activation_bytes=activation_bytes,
            flash_attention=flash_attention,
        )
        working = op_checkpoint_working_bytes(layer.total_bytes, kept)
        layers = spec.n_layers * kept.total_bytes + working
    else:
        layers = spec.n_layers * layer.total_bytes
    # the final norm's input (the residual stream) and the head's input, and the head's weight
    # copy (a tied head casts the embedding matrix)
    head_weight_copy = weight_copy_bytes(spec.vocab_size * h, e, weight_bytes)
    return ActivationMemory(
        recompute=recompute,
        per_layer=layer,
        layers_bytes=layers,
        checkpoint_bytes=residual,
        head_bytes=residual + tokens * h * e + head_weight_copy,
        logits_bytes=tokens * spec.vocab_size * (activation_bytes + 2 * FP32_BYTES),
    )
