"""The largest model that trains on a set of GPUs, activations included.

The seed's rule (seed 000, S-max-model) pools the GPUs' memory for the model state alone:
8 x 80 GB / 16 B = 40e9 parameters. A model that size leaves no room for the activations of even
one sequence, so `fit` also solves for the largest model whose fully sharded state (ZeRO-3 over
all GPUs) plus one micro-batch's activations fit each GPU. Activations depend on the shape, not
only on the count: the candidate models follow one stated shape rule (FIT_SHAPE_RULE).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.single.activations import activation_memory
from trainbudget.core.single.memory import fit_max_params
from trainbudget.core.single.params import count_params
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.spec.precision import dense_bytes_per_param, get_optimizer, get_precision

FIT_WIDTH_PER_LAYER = 128
"""d_model / n_layers of the candidate shapes: Llama 2 7B (4096 / 32) and 13B (5120 / 40)
(Touvron et al. 2023, arXiv:2307.09288, Table 1 / config.json)."""
FIT_HEAD_DIM = 128
"""Width of each attention head (Llama 2)."""
FIT_VOCAB = 32000
"""Llama 2's vocabulary."""
FIT_SHAPE_RULE = (
    f"Llama-2-shaped candidates: SwiGLU MLP 8/3 d wide, heads of {FIT_HEAD_DIM}, d_model = "
    f"{FIT_WIDTH_PER_LAYER} x n_layers, vocabulary {FIT_VOCAB:,}, untied head"
)


def candidate_shape(n_layers: int) -> ModelSpec:
    """The FIT_SHAPE_RULE model with `n_layers` blocks."""
    d_model = FIT_WIDTH_PER_LAYER * n_layers
    d_ff = -(-8 * d_model // 3 // 256) * 256  # 8/3 d, rounded up to a multiple of 256
    return ModelSpec(
        name=f"fit-{n_layers}L",
        vocab_size=FIT_VOCAB,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=d_model // FIT_HEAD_DIM,
        d_ff=d_ff,
        max_seq_len=4096,
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        tied_embeddings=False,
    )


@dataclass(frozen=True, kw_only=True)
class Fit:
    """The largest candidate that fits, and what each GPU holds for it."""

    state_only_params: float
    """The seed's rule: pooled memory / bytes per parameter, activations excluded."""
    model: ModelSpec | None
    """The largest candidate that fits with its activations (None: not even one layer)."""
    params: int
    state_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    limit_bytes_per_gpu: float


def fit_with_activations(
    *,
    n_gpus: int,
    memory_bytes_per_gpu: float,
    precision: str,
    optimizer: str,
    reserve_fraction: float,
    seq_len: int,
    micro_batch: int = 1,
    recompute: str = "full",
) -> Fit:
    """The largest FIT_SHAPE_RULE model whose ZeRO-3 state over `n_gpus` plus one micro-batch's
    activations (FlashAttention, `recompute`) fit (1 - reserve_fraction) of each GPU."""
    if seq_len <= 0:
        raise SpecError("seq_len", seq_len, "must be a positive integer")
    if micro_batch <= 0:
        raise SpecError("micro_batch", micro_batch, "must be a positive integer")
    state_only = fit_max_params(
        n_gpus=n_gpus,
        memory_bytes_per_gpu=memory_bytes_per_gpu,
        precision=precision,
        optimizer=optimizer,
        reserve_fraction=reserve_fraction,
    )
    prec = get_precision(precision)
    per_param = dense_bytes_per_param(prec, get_optimizer(optimizer))
    limit = memory_bytes_per_gpu * (1 - reserve_fraction)

    def held(n_layers: int) -> tuple[ModelSpec, float, float]:
        spec = candidate_shape(n_layers)
        state = count_params(spec).total * per_param / n_gpus
        acts = activation_memory(
            spec,
            seq_len=seq_len,
            micro_batch=micro_batch,
            activation_bytes=prec.activation_bytes,
            weight_bytes=prec.weight_bytes,  # amp-*: fp32 weights, 16-bit matmuls
            recompute=recompute,
            flash_attention=True,
        ).total_bytes
        return spec, state, acts

    low, high = 0, 1  # the largest fitting layer count lies in [low, high)
    while sum(held(high)[1:]) <= limit:
        low, high = high, 2 * high
    while high - low > 1:  # memory grows with the layer count: bisect
        mid = (low + high) // 2
        low, high = (mid, high) if sum(held(mid)[1:]) <= limit else (low, mid)
    if low == 0:
        return Fit(
            state_only_params=state_only,
            model=None,
            params=0,
            state_bytes_per_gpu=0.0,
            activation_bytes_per_gpu=0.0,
            limit_bytes_per_gpu=limit,
        )
    spec, state, acts = held(low)
    return Fit(
        state_only_params=state_only,
        model=spec,
        params=count_params(spec).total,
        state_bytes_per_gpu=state,
        activation_bytes_per_gpu=acts,
        limit_bytes_per_gpu=limit,
    )
