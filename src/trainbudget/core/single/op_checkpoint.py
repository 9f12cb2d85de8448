"""Per-op selective activation checkpointing ("selective-op"), as torchtitan applies it.

torchtitan wraps each transformer block in a checkpoint whose policy decides op by op
(pytorch/torchtitan at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a,
torchtitan/distributed/activation_checkpoint.py, `_get_default_save_ops` and
`SelectiveAC._wrap_block`):
- saved (MUST_SAVE): the outputs of torch's compute-intensive ops (`aten.mm`, `addmm`, `bmm`,
  `_scaled_mm`, the flash / efficient SDPA kernels), of cuDNN and math SDPA, flex attention,
  `aten.max` (the fp8 amax), `aten.topk`, and of the `reduce_scatter_tensor` and
  `all_to_all_single` collectives;
- but of `aten.mm` / `aten.linear`, every second one is recomputed: a counter per block
  forward, incremented at each mm, saves the 1st, 3rd, 5th ... and recomputes the 2nd,
  4th ...; `addmm` (a linear with a bias) is saved and not counted;
- everything else is recomputed: norms, RoPE, the activation function, element-wise products,
  residual adds, and the all-gathers / all-reduces (they are not in the save list).
The block input is kept as the checkpoint's input. The recomputation replays the whole block
forward (`early_stop=False`), taking the saved outputs from the cache.

A dense block of torchtitan's llama3 runs its matmuls in the order wq, wk, wv (three separate
projections, `QKVLinear`), SDPA, wo, then w1 (gate), w3 (up), w2 (down) (`w2(silu(w1(x)) *
w3(x))`): saved are wq, wv, w1 and w2 outputs and the attention output with its logsumexp;
recomputed are wk, wo and w3. MoE experts (`_grouped_mm`, not in the list) and MLA are not
modelled here.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import ModelSpec

TORCHTITAN_SOURCE = (
    "https://github.com/pytorch/torchtitan/blob/b5bcd76c66d0acb1a08b176d9639425bc55e0b2a/"
    "torchtitan/distributed/activation_checkpoint.py"
)


@dataclass(frozen=True, kw_only=True)
class LayerMatmul:
    """One weight matmul of a block, in forward order."""

    name: str
    d_in: int
    d_out: int
    row_parallel: bool
    """TP splits the contraction (wo, the MLP down-projection): each rank's output is a full-
    width partial sum; otherwise the output columns are split."""
    min_local_out: int
    """Narrowest per-rank output (K and V heads are replicated when tp > n_kv_heads)."""
    biased: bool
    """A bias makes the linear an `addmm`: always saved, not counted by the alternation."""
    saved: bool = False


def unsupported(spec: ModelSpec) -> str:
    """Why selective-op is not modelled for `spec` ("" when it is)."""
    if spec.is_moe:
        return f"modelled for dense blocks; {spec.name} has MoE experts (grouped matmuls)"
    if spec.is_mla:
        return f"modelled for non-MLA attention; {spec.name} uses MLA"
    return ""


def layer_matmuls(spec: ModelSpec) -> tuple[LayerMatmul, ...]:
    """The block's weight matmuls in forward order, each marked saved or recomputed by the
    policy: counting the bias-free ones from 1, the odd ones are saved."""
    if unsupported(spec):
        raise SpecError("recompute", "selective-op", unsupported(spec))
    d, qkv_bias = spec.d_model, spec.bias or spec.qkv_bias
    order = [
        ("wq", d, spec.d_q, False, 0, qkv_bias),
        ("wk", d, spec.d_kv, False, spec.d_head, qkv_bias),
        ("wv", d, spec.d_v, False, spec.d_v_head, qkv_bias),
        ("wo", spec.d_attn_out, d, True, 0, spec.bias),
    ]
    if spec.mlp == "swiglu":
        # gate then up: torchtitan's FeedForward computes w2(silu(w1(x)) * w3(x))
        order += [("w1", d, spec.d_ff, False, 0, spec.bias)]
        order += [("w3", d, spec.d_ff, False, 0, spec.bias)]
    else:
        order += [("up", d, spec.d_ff, False, 0, spec.bias)]
    order += [("w2", spec.d_ff, d, True, 0, spec.bias)]
    count, out = 0, []
    for name, d_in, d_out, row, narrow, biased in order:
        count += 0 if biased else 1
        saved = biased or count % 2 == 1
        out.append(
            LayerMatmul(
                name=name,
                d_in=d_in,
                d_out=d_out,
                row_parallel=row,
                min_local_out=narrow,
                biased=biased,
                saved=saved,
            )
        )
    return tuple(out)


def recomputed_matmuls(spec: ModelSpec) -> tuple[LayerMatmul, ...]:
    return tuple(m for m in layer_matmuls(spec) if not m.saved)


def recomputed_flops(spec: ModelSpec, seq_len: int) -> int:
    """Forward FLOPs the backward repeats for one sequence, all layers: 2 * tokens * d_in *
    d_out for each matmul the policy does not save (FLOPs, not MACs; the attention core is
    saved, norms and element-wise ops are not counted as FLOPs)."""
    per_token = sum(2 * m.d_in * m.d_out for m in recomputed_matmuls(spec))
    return spec.n_layers * seq_len * per_token
