"""A decoder-only transformer built from `ModelSpec`: GPT-2 (LayerNorm, GELU, learned positions,
biases, tied head) to Llama/Mistral/Mixtral (RMSNorm, SwiGLU, RoPE, GQA, untied, MoE).

Every parameter the core's `count_params` counts exists here with the same shape, so
`sum(p.numel())` equals it exactly (a test checks every preset, on the meta device).
Shapes: B batch, T sequence, D d_model, H query heads, K kv heads, E head dim, F d_ff, V vocab.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainbudget.core.spec.model_spec import ModelSpec


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


def _norm(spec: ModelSpec, factory: dict) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(spec.d_model, **factory)
    return nn.LayerNorm(spec.d_model, bias=spec.bias, **factory)


def rope_tables(seq_len: int, d_head: int, device, base: float = 10000.0) -> tuple:
    """cos, sin of shape (T, 1, E/2) for rotary embeddings (Su et al. 2021, arXiv 2104.09864),
    broadcasting over (B, T, H, E/2)."""
    inv_freq = 1.0 / base ** (
        torch.arange(0, d_head, 2, device=device, dtype=torch.float32) / d_head
    )
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., :E/2], x[..., E/2:]) of x: (B, T, H, E) by the position's angle.
    Applied before the head transpose, so q and k keep the (B, T, H, E) layout and SDPA's output
    transposes back to the projection's input without a copy."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, T, H, E/2) each
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.spec = spec
        d_q, d_kv = spec.n_heads * spec.d_head, spec.d_kv
        bias = spec.bias or spec.qkv_bias
        self.qkv = nn.Linear(spec.d_model, d_q + 2 * d_kv, bias=bias, **factory)
        self.proj = nn.Linear(d_q, spec.d_model, bias=spec.bias, **factory)

    def forward(self, x: torch.Tensor, rope: tuple | None) -> torch.Tensor:
        s = self.spec
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([s.n_heads * s.d_head, s.d_kv, s.d_kv], dim=-1)
        q = q.view(b, t, s.n_heads, s.d_head)  # (B, T, H, E)
        k = k.view(b, t, s.n_kv_heads, s.d_head)  # (B, T, K, E)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, E), (B, K, T, E)
        v = v.view(b, t, s.n_kv_heads, s.d_head).transpose(1, 2)  # (B, K, T, E)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=s.n_kv_heads != s.n_heads
        )  # (B, H, T, E)
        return self.proj(y.transpose(1, 2).reshape(b, t, s.n_heads * s.d_head))


class MLP(nn.Module):
    """GELU: down(gelu(up x)); SwiGLU: down(silu(gate x) * up x) (Shazeer 2020)."""

    def __init__(self, spec: ModelSpec, d_hidden: int, factory: dict) -> None:
        super().__init__()
        self.swiglu = spec.mlp == "swiglu"
        self.up = nn.Linear(spec.d_model, d_hidden, bias=spec.bias, **factory)
        self.gate = (
            nn.Linear(spec.d_model, d_hidden, bias=spec.bias, **factory) if self.swiglu else None
        )
        self.down = nn.Linear(d_hidden, spec.d_model, bias=spec.bias, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class MoE(nn.Module):
    """Top-k routed experts plus shared ones (Shazeer et al. 2017; Mixtral: softmax over the
    top-k router logits). Tokens are gathered per expert, so each expert runs one matmul."""

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.k = spec.experts_per_token
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=False, **factory)
        self.experts = nn.ModuleList(
            MLP(spec, spec.d_ff_expert, factory) for _ in range(spec.n_experts)
        )
        self.shared = nn.ModuleList(
            MLP(spec, spec.d_ff_expert, factory) for _ in range(spec.n_shared_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        flat = x.reshape(b * t, d)  # (N, D)
        weights, chosen = self.router(flat).topk(self.k, dim=-1)  # (N, k) each
        weights = weights.softmax(dim=-1, dtype=torch.float32).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        for expert in self.shared:
            out = out + expert(flat)
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        self.norm1, self.norm2 = _norm(spec, factory), _norm(spec, factory)
        self.attn = Attention(spec, factory)
        self.mlp = MoE(spec, factory) if spec.is_moe else MLP(spec, spec.d_ff, factory)

    def forward(self, x: torch.Tensor, rope: tuple | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, device=None, recompute: str = "none", dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        if recompute not in ("none", "full"):
            raise ValueError(f"recompute = {recompute!r}: the reference model supports none, full")
        if spec.position not in ("learned", "rope"):  # the core also estimates ALiBi models
            raise ValueError(
                f"position = {spec.position!r}: the reference model supports learned, rope"
            )
        self.spec, self.recompute = spec, recompute
        self.checkpoint_early_stop = False
        self.tok = nn.Embedding(spec.vocab_size, spec.d_model, **factory)
        self.pos = (
            nn.Embedding(spec.max_seq_len, spec.d_model, **factory)
            if spec.position == "learned"
            else None
        )
        self.blocks = nn.ModuleList(Block(spec, factory) for _ in range(spec.n_layers))
        self.norm = _norm(spec, factory)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False, **factory)
        if spec.tied_embeddings:
            self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx, targets: (B, T) token ids. Returns logits (B, T, V), and the mean loss."""
        b, t = idx.shape
        x = self.tok(idx)  # (B, T, D)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(t, device=idx.device))
        else:
            rope = rope_tables(t, self.spec.d_head, idx.device)
        for block in self.blocks:
            if self.recompute == "full" and self.training:
                # every layer's forward runs again in backward (Megatron's full recomputation,
                # what the core counts) unless checkpoint_early_stop lets torch skip each
                # block's last matmul, whose output nothing saves
                with set_checkpoint_early_stop(self.checkpoint_early_stop):
                    x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
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
