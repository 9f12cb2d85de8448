"""A decoder-only transformer built from `ModelSpec`: GPT-2 (LayerNorm, GELU, learned positions,
biases, tied head) to Llama/Mistral/Mixtral (RMSNorm, SwiGLU, RoPE, GQA, untied, MoE), with
Qwen3/Gemma's explicit head width, QK-norm and post-norms, sliding-window layers, and
DeepSeek-V3's multi-head latent attention and dense-then-MoE stack.

Every parameter the core's `count_params` counts exists here with the same shape, so
`sum(p.numel())` equals it exactly (a test checks every preset, on the meta device). It is the
spec's model, not a replica of each checkpoint's numerics: Gemma's embedding scale, (1 + w)
norm weights and logit soft-capping, and DeepSeek's sigmoid, group-limited routing are left out
(they add no parameter and no matmul).
Shapes: B batch, T sequence, D d_model, H query heads, K kv heads, E head dim, F d_ff, V vocab.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.mlp import MLP
from trainbudget.model.moe import MoE


class _RMSNormFunction(torch.autograd.Function):
    """y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) (Zhang & Sennrich 2019). Saves only x
    and the per-token rstd (fp32; fp64 for fp64 input), like a fused LayerNorm; the composite
    version would also keep x * rstd, one more activation-sized tensor per norm, on devices
    without a fused kernel."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)  # fp32 for 16-bit, fp64 stays
        rstd = torch.rsqrt(x.to(acc).pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        ctx.save_for_backward(x, weight, rstd)
        return (x.to(acc) * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        acc = rstd.dtype
        xhat = x.to(acc) * rstd  # recomputed instead of stored
        grad_w = (grad_y.to(acc) * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        g = grad_y.to(acc) * weight.to(acc)
        # d/dx of x * rstd: rstd * (g - xhat * mean(g * xhat))
        grad_x = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_w, None


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFunction.apply(x, self.weight, self.eps)


def _norm(spec: ModelSpec, factory: dict, width: int | None = None) -> nn.Module:
    """The spec's norm over `width` features (default d_model)."""
    width = spec.d_model if width is None else width
    if spec.norm == "rmsnorm":
        return RMSNorm(width, **factory)
    return nn.LayerNorm(width, bias=spec.bias, **factory)


def rope_tables(
    seq_len: int,
    d_head: int,
    device,
    base: float = 10000.0,
    *,
    positions: torch.Tensor | None = None,
) -> tuple:
    """cos, sin of shape (T, 1, E/2) for rotary embeddings (Su et al. 2021, arXiv 2104.09864),
    broadcasting over (B, T, H, E/2). `positions`: (T,) the tokens' places in the whole
    sequence when the rank holds only some of them (context parallelism); default 0..T-1."""
    inv_freq = 1.0 / base ** (
        torch.arange(0, d_head, 2, device=device, dtype=torch.float32) / d_head
    )
    if positions is None:
        positions = torch.arange(seq_len, device=device)
    angles = torch.outer(positions.to(device=device, dtype=torch.float32), inv_freq)
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., :E/2], x[..., E/2:]) of x: (B, T, H, E) by the position's angle.
    Applied before the head transpose, so q and k keep the (B, T, H, E) layout and SDPA's output
    transposes back to the projection's input without a copy."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, T, H, E/2) each
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Causal attention of q: (B, H, T, E) over k: (B, K, T, E), v: (B, K, T, Ev) -> (B, H, T, Ev);
    with window > 0 each query sees itself and the window - 1 keys before it."""
    t = q.shape[-2]
    gqa = k.shape[1] != q.shape[1]
    if not window or window >= t:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    pos = torch.arange(t, device=q.device)
    offset = pos[:, None] - pos[None, :]  # (T, T): query i minus key j
    band = (offset >= 0) & (offset < window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=band, enable_gqa=gqa)


class SequenceShard(Protocol):
    """This rank's part of each training sequence under context parallelism (the trainer's
    train.parallel.context implements it): the model runs embeddings, norms, MLPs and the head
    on the local tokens only, and reaches the other ranks' keys and values in attention."""

    def positions(self, n_local: int, device) -> torch.Tensor:
        """(n_local,) int64: the local tokens' places in the whole sequence."""
        ...

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int
    ) -> torch.Tensor:
        """`attend`'s causal attention of the local queries over the whole sequence's keys."""
        ...


class Attention(nn.Module):
    """Multi-head / grouped-query attention, with QK-norm (an RMSNorm over each q and k head,
    Dehghani et al. 2023, arXiv:2302.05442) when the spec asks for it.

    One fused projection `qkv` whose output rows are grouped by kv head: for each of the K kv
    heads, its G = H / K query heads, then its key, then its value ([q_g | k_g | v_g], g = 0..K-1).
    Grouped so that a split of the rows into tp equal parts (tensor parallelism's column split,
    train.parallel.tensor_parallel) gives each rank whole kv groups with their own query heads; [q |
    k | v] in three blocks would give the first rank all of q and part of k. The forward reads the
    number of kv heads from the output's width (-1), so a rank's part runs as it is."""

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.spec = spec
        bias = spec.bias or spec.qkv_bias
        self.qkv = nn.Linear(spec.d_model, spec.d_q + spec.d_kv + spec.d_v, bias=bias, **factory)
        self.proj = nn.Linear(spec.d_attn_out, spec.d_model, bias=spec.bias, **factory)
        self.q_norm = _norm(spec, factory, spec.d_head) if spec.qk_norm else None
        self.k_norm = _norm(spec, factory, spec.d_head) if spec.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple | None,
        window: int = 0,
        *,
        shard: SequenceShard | None = None,
    ) -> torch.Tensor:
        s = self.spec
        b, t, _ = x.shape
        g = s.n_heads // s.n_kv_heads  # query heads per kv head
        group = (g + 1) * s.d_head + s.d_v_head  # one kv group's rows: G q heads, k, v
        qkv = self.qkv(x).view(b, t, -1, group)  # (B, T, K, G*E + E + Ev)
        q, k, v = qkv.split([g * s.d_head, s.d_head, s.d_v_head], dim=-1)
        q = q.unflatten(-1, (g, s.d_head))  # (B, T, K, G, E), a view
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            cos, sin = rope
            q = apply_rope(q, cos[:, None], sin[:, None])  # tables broadcast over (K, G)
            k = apply_rope(k, cos, sin)
        # (B, T, H, E), query head h in kv group h // G, as SDPA's enable_gqa pairs them: a view
        # after RoPE or QK-norm (new tensors) or with G = 1, else a copy
        q = q.flatten(2, 3)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, E), (B, K, T, E)
        v = v.transpose(1, 2)  # (B, K, T, Ev)
        y = attend(q, k, v, window) if shard is None else shard.attend(q, k, v, window)
        return self.proj(y.transpose(1, 2).flatten(2))  # (B, T, H*Ev) in, (B, T, D) out


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1): queries and
    keys/values are projected through normalised low-rank latents; each q and k head is a
    non-rotary part from the latent and a rotary part (R = rope_head_dim), the key's shared by
    all heads and projected straight from x."""

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.spec = spec
        d, n_heads = spec.d_model, spec.n_heads
        self.d_nope = spec.d_head - spec.rope_head_dim
        if spec.q_lora_rank:
            self.q_down = nn.Linear(d, spec.q_lora_rank, bias=False, **factory)
            self.q_norm = _norm(spec, factory, spec.q_lora_rank)
            self.q_up = nn.Linear(spec.q_lora_rank, spec.d_q, bias=False, **factory)
        else:
            self.q = nn.Linear(d, spec.d_q, bias=False, **factory)
        self.kv_down = nn.Linear(d, spec.kv_lora_rank + spec.rope_head_dim, bias=False, **factory)
        self.kv_norm = _norm(spec, factory, spec.kv_lora_rank)
        kv_width = n_heads * (self.d_nope + spec.d_v_head)
        self.kv_up = nn.Linear(spec.kv_lora_rank, kv_width, bias=False, **factory)
        self.proj = nn.Linear(spec.d_attn_out, d, bias=False, **factory)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple,
        window: int = 0,
        *,
        shard: SequenceShard | None = None,
    ) -> torch.Tensor:
        s = self.spec
        b, t, _ = x.shape
        h, r = s.n_heads, s.rope_head_dim
        q = self.q_up(self.q_norm(self.q_down(x))) if s.q_lora_rank else self.q(x)
        q_nope, q_rope = q.view(b, t, h, s.d_head).split([self.d_nope, r], dim=-1)
        c_kv, k_rope = self.kv_down(x).split([s.kv_lora_rank, r], dim=-1)  # (B, T, C), (B, T, R)
        kv = self.kv_up(self.kv_norm(c_kv)).view(b, t, h, self.d_nope + s.d_v_head)
        k_nope, v = kv.split([self.d_nope, s.d_v_head], dim=-1)
        k_rope = apply_rope(k_rope[:, :, None, :], *rope).expand(b, t, h, r)  # (B, T, H, R)
        q = torch.cat((q_nope, apply_rope(q_rope, *rope)), dim=-1).transpose(1, 2)  # (B,H,T,E)
        k = torch.cat((k_nope, k_rope), dim=-1).transpose(1, 2)  # (B, H, T, E)
        v = v.transpose(1, 2)  # (B, H, T, Ev)
        y = attend(q, k, v, window) if shard is None else shard.attend(q, k, v, window)
        return self.proj(y.transpose(1, 2).reshape(b, t, s.d_attn_out))


class Block(nn.Module):
    """Layer `index` of the spec: global or sliding-window attention, dense MLP or experts,
    and with post_norms a norm on each branch's output before the residual add (Gemma 2)."""

    def __init__(self, spec: ModelSpec, factory: dict, index: int = 0) -> None:
        super().__init__()
        self.norm1, self.norm2 = _norm(spec, factory), _norm(spec, factory)
        self.attn = LatentAttention(spec, factory) if spec.is_mla else Attention(spec, factory)
        self.window = spec.sliding_window if spec.is_sliding_layer(index) else 0
        moe = spec.is_moe_layer(index)
        self.mlp = MoE(spec, factory) if moe else MLP(spec, spec.d_ff, factory)
        self.post_norm1 = _norm(spec, factory) if spec.post_norms else None
        self.post_norm2 = _norm(spec, factory) if spec.post_norms else None

    def forward(
        self, x: torch.Tensor, rope: tuple | None, *, shard: SequenceShard | None = None
    ) -> torch.Tensor:
        """`shard` a keyword: tensor parallelism's input plans (train.tensor_parallel) count
        the positional inputs."""
        a = self.attn(self.norm1(x), rope, self.window, shard=shard)
        x = x + (a if self.post_norm1 is None else self.post_norm1(a))
        m = self.mlp(self.norm2(x))
        return x + (m if self.post_norm2 is None else self.post_norm2(m))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, device=None, recompute: str = "none", dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        if recompute not in ("none", "full"):
            raise ValueError(f"recompute = {recompute!r}: the reference model supports none, full")
        if spec.dropout:  # the core's activations count masks this model would not keep
            raise SpecError(
                "dropout", True, "the reference model (train, profile) trains without dropout"
            )
        if spec.position not in ("learned", "rope"):  # the core also estimates ALiBi models
            raise ValueError(
                f"position = {spec.position!r}: the reference model supports learned, rope"
            )
        self.spec, self.recompute = spec, recompute
        self.checkpoint_early_stop = False
        self.sequence_shard: SequenceShard | None = None
        """Context parallelism (set by the trainer): training forwards see this rank's tokens
        only; in eval mode (evaluation, probes, sampling) the model runs whole sequences."""
        self.tok = nn.Embedding(spec.vocab_size, spec.d_model, **factory)
        self.pos = (
            nn.Embedding(spec.max_seq_len, spec.d_model, **factory)
            if spec.position == "learned"
            else None
        )
        self.blocks = nn.ModuleList(Block(spec, factory, i) for i in range(spec.n_layers))
        self.norm = _norm(spec, factory)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False, **factory)
        if spec.tied_embeddings:
            self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx, targets: (B, T) token ids (under a sequence shard, in training: this rank's T
        tokens of each sequence). Returns logits (B, T, V), and the mean loss over those."""
        b, t = idx.shape
        shard = self.sequence_shard if self.training else None
        where = None if shard is None else shard.positions(t, idx.device)  # (T,) global places
        x = self.tok(idx)  # (B, T, D)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(t, device=idx.device) if where is None else where)
        else:
            rope = rope_tables(t, self.spec.d_rope, idx.device, positions=where)
        for block in self.blocks:
            if self.recompute == "full" and self.training:
                # every layer's forward runs again in backward (Megatron's full recomputation,
                # what the core counts) unless checkpoint_early_stop lets torch skip each
                # block's last matmul, whose output nothing saves
                with set_checkpoint_early_stop(self.checkpoint_early_stop):
                    x = checkpoint(block, x, rope, shard=shard, use_reentrant=False)
            else:
                x = block(x, rope, shard=shard)
        logits = self.head(self.norm(x))  # (B, T, V)
        if targets is None:
            return logits, None
        # the loss in fp32 whatever the activation dtype (log-softmax of bf16 logits loses bits)
        loss = F.cross_entropy(logits.float().view(b * t, -1), targets.view(b * t))
        return logits, loss


@torch.no_grad()
def init_weights(model: Transformer, generator: torch.Generator | None = None) -> None:
    """std = 1/sqrt(fan_in), truncated at 3 std (seed 001, module_parameters: the output's scale
    does not grow with the input width). Embeddings use fan_in = d_model so a tied head gets
    the same scale; norms start at 1 and biases at 0."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            std = 1 / math.sqrt(module.in_features)
            nn.init.trunc_normal_(
                module.weight, std=std, a=-3 * std, b=3 * std, generator=generator
            )
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding) and module.weight is not getattr(
            model.head, "weight", None
        ):
            std = 1 / math.sqrt(module.embedding_dim)
            nn.init.trunc_normal_(
                module.weight, std=std, a=-3 * std, b=3 * std, generator=generator
            )


def build_model(
    spec: ModelSpec,
    *,
    device=None,
    recompute: str = "none",
    seed: int = 0,
    dtype: torch.dtype | None = None,
    init: bool = True,
) -> Transformer:
    """The reference model for `spec`, initialised unless on the meta device or init=False
    (fake tensors have no values to draw)."""
    if not init or torch.device(device or "cpu").type == "meta":
        # built directly in its dtype: fake and meta tensors cannot be converted in place
        return Transformer(spec, device=device, recompute=recompute, dtype=dtype)
    model = Transformer(spec, device=device, recompute=recompute)  # drawn in fp32
    init_weights(model, torch.Generator(device=device or "cpu").manual_seed(seed))
    return model.to(dtype) if dtype is not None else model


def count_model_params(model: nn.Module) -> int:
    """Distinct parameters (a tied head is counted once, as model.parameters() yields it once)."""
    return sum(p.numel() for p in model.parameters())
