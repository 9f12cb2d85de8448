"""Validation loss and perplexity (per source: the article's "channel loss"), probability
probes (the article's Prob('北京' | '中国的首都是')), and sampling."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from trainbudget.core.errors import SpecError

EVAL_WINDOWS_PER_BATCH = 16
"""`eval_batches` counts batches of 16 windows (the default micro-batch) per source, whatever the
run's micro-batch: runs with different batch sizes are scored on the same held-out windows."""


def full_logits(logits: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) as a plain tensor: tensor parallelism's vocabulary-sharded DTensor
    logits (train.parallel.tensor_parallel) gathered on every rank."""
    return logits.full_tensor() if hasattr(logits, "full_tensor") else logits


@torch.no_grad()
def evaluate(model, data, cfg, device, info=None, *, sharded: bool = False) -> dict:
    """Mean loss and perplexity over the held-out split, overall and per source: the mean over
    tokens (every window has seq_len of them).

    Distributed (`info` with world_size > 1): the ranks split the batches and add up their sums,
    each batch scored once. Under FSDP2 (`sharded`) every rank runs every batch instead, since
    each forward is a collective that all ranks must join."""
    was_training = model.training
    model.eval()
    names = list(data.val.source_names)
    sums = torch.zeros(len(names), dtype=torch.float64, device=device)
    counts = torch.zeros(len(names), dtype=torch.float64, device=device)
    split = info is not None and info.world_size > 1 and not sharded
    rank, world = (info.rank, info.world_size) if split else (0, 1)
    windows = cfg.eval_batches * EVAL_WINDOWS_PER_BATCH
    for i, (x, y, source) in enumerate(data.eval_batches(cfg.micro_batch, cfg.seq_len, windows)):
        if i % world != rank:
            continue
        logits = full_logits(model(x.to(device))[0])  # (B, T, V)
        per_window = F.cross_entropy(
            logits.float().transpose(1, 2), y.to(device), reduction="none"
        ).mean(1)  # (B,)
        k = names.index(source)
        sums[k] += per_window.double().sum()
        counts[k] += len(per_window)
    if split:
        torch.distributed.all_reduce(sums)
        torch.distributed.all_reduce(counts)
    model.train(was_training)
    if not counts.sum():
        return {}
    val_loss = float(sums.sum() / counts.sum())
    return {
        "val_loss": val_loss,
        "val_perplexity": math.exp(val_loss),
        "per_source": {n: float(sums[k] / counts[k]) for k, n in enumerate(names) if counts[k]},
    }


@torch.no_grad()
def probe_probabilities(model, tokenizer, probes, device) -> dict[str, float]:
    """P(target | prompt) = product of the target tokens' probabilities after the prompt."""
    was_training = model.training
    model.eval()
    out = {}
    for prompt, target in probes:
        p_ids, t_ids = tokenizer.encode(prompt), tokenizer.encode(target)
        ids = torch.tensor([p_ids + t_ids], device=device)
        logits = full_logits(model(ids[:, :-1])[0]).float()  # (1, P + T - 1, V)
        logp = logits.log_softmax(-1)[0, len(p_ids) - 1 :]  # predictions of the target tokens
        out[f"{prompt}->{target}"] = math.exp(
            float(logp.gather(-1, torch.tensor(t_ids, device=device)[:, None]).sum())
        )
    model.train(was_training)
    return out


@torch.no_grad()
def sample(
    model,
    tokenizer,
    prompt: str,
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    device,
    seed: int = 0,
    on_token: Callable[[int], None] | None = None,
) -> str:
    """Autoregressive sampling (temperature, top-k) within the model's context; `on_token`
    is called with the count of new tokens after each one (progress)."""
    if temperature <= 0:
        raise SpecError("temperature", temperature, "must be positive")
    gen = torch.Generator(device=device).manual_seed(seed)
    # an empty prompt starts from the end-of-text token, as a new document would
    ids = torch.tensor([tokenizer.encode(prompt) or [tokenizer.eot_id]], device=device)
    n_prompt = ids.shape[1]
    context = model.spec.max_seq_len
    model.eval()
    for _ in range(max_new_tokens):
        logits = model(ids[:, -context:])[0][:, -1].float() / temperature  # (1, V)
        if top_k > 0:
            kth = logits.topk(min(top_k, logits.shape[-1])).values[:, -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        nxt = torch.multinomial(logits.softmax(-1), 1, generator=gen)
        ids = torch.cat([ids, nxt], dim=1)
        if on_token is not None:
            on_token(ids.shape[1] - n_prompt)
    return tokenizer.decode(ids[0].tolist())
