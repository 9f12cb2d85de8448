"""The pipeline's side of a training step and of an evaluation (train.parallel.pipeline says why the
result is one process's): the step's micro-batches through the schedule, the gradients made
whole (tied weights summed, the norm over every stage, clipping), and a forward-only pass of
the held-out batches along the stages."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainbudget.train.evaluate import EVAL_WINDOWS_PER_BATCH, full_logits
from trainbudget.train.launch.distributed import is_sharded
from trainbudget.train.parallel.context import local_batch
from trainbudget.train.parallel.parallelize import data_parallel_coordinate, reshard
from trainbudget.train.parallel.pipeline import clip_, grad_norm, sync_tied_grads
from trainbudget.train.parallel.tensor_parallel import loss_context

if TYPE_CHECKING:
    from trainbudget.train.run import Run


def forward_backward(run: Run, factor, sources, phases: dict) -> torch.Tensor:
    """The step's grad_accum micro-batches through the schedule (forward and backward
    interleaved: their seconds are all in phases["forward"]). Returns what this rank adds to
    the loop's loss all-reduce: the last stage's mean loss times pp (see train.parallel.pipeline), 0
    on the other stages."""
    pipe, cfg = run.net, run.cfg
    t = time.perf_counter()
    batches = [run.batches.next_batch(run.device) for _ in range(cfg.grad_accum)]
    phases["data"] += time.perf_counter() - t
    x = torch.cat([b[0] for b in batches])  # (grad_accum * B, T): the schedule re-cuts it
    y = torch.cat([b[1] for b in batches])
    x, y = local_batch(run.model, x, y)  # cp > 1: this rank's chunks of each sequence
    pipe.losses.clear()
    pipe.factor[0] = factor
    t = time.perf_counter()
    args = (x,) if pipe.is_first else ()
    target = {"target": y} if pipe.is_last else {}
    # tensor parallel: the last stage's loss (and its backward) of vocabulary-sharded logits
    with run.autocast, loss_context(cfg.tp):
        pipe.schedule.step(*args, **target)
    phases["forward"] += time.perf_counter() - t
    if not pipe.is_last:
        return torch.zeros((), device=run.device)
    # the micro-batches' token losses, in order; the first step's schedule also calls the loss
    # once before them, to infer the shapes of the gradients it will send
    token_losses = pipe.losses[-cfg.grad_accum :]
    if sources is not None:
        for losses, (_, _, source_ids) in zip(token_losses, batches, strict=True):
            sources.add(losses, source_ids)
    mean = torch.stack([tl.mean() for tl in token_losses]).sum() / cfg.grad_accum
    return mean * cfg.pp


def whole_gradient(run: Run, batch: int) -> float:
    """After the schedule: the tied weight's gradient summed, the whole model's gradient norm
    (clipped to grad_clip when set), the same on every rank."""
    pipe, part = run.net, run.model
    sync_tied_grads(part, pipe)
    if batch in run.faults.nan_grad_batches:
        next(p for p in part.parameters() if p.grad is not None).grad.fill_(math.nan)
    run.comm_counter.trainer(True)  # the norm's all-reduce over the stages: the trainer's
    norm = grad_norm(part, pipe)
    if run.cfg.grad_clip > 0:
        clip_(part, norm, run.cfg.grad_clip)
    return float(norm)


def _chain(run: Run, x: torch.Tensor) -> torch.Tensor | None:
    """One forward of `x` along the stages, activations sent from rank to rank; the logits on
    the rank of the last stage, None elsewhere."""
    pipe = run.net
    dtype = next(run.model.parameters()).dtype
    out = None
    for k, s in enumerate(pipe.stage_ids):
        if s == 0:
            inp = x
        else:
            # sequence parallel: this rank's T / tp positions
            # (train.parallel.pipeline._tensor_parallel)
            b, t = x.shape
            shape = (b, t // pipe.stages[k].seq_shards, run.spec.d_model)
            inp = torch.empty(shape, dtype=dtype, device=run.device)
            dist.recv(inp, src=pipe.owner(s - 1))
        out = pipe.stages[k](inp)
        if s < pipe.n_stages - 1:
            dist.send(out.contiguous(), dst=pipe.owner(s + 1))
    return full_logits(out) if pipe.is_last else None


@torch.no_grad()
def evaluate_pipeline(run: Run) -> dict:
    """train.evaluate.evaluate's figures along the pipeline: the data-parallel ranks split the
    held-out batches (under FSDP2 each runs all of them, and one counts them), the last stage
    scores them, and the sums are all-reduced."""
    part, cfg = run.model, run.cfg
    was_training = part.training
    part.eval()
    names = list(run.data.val.source_names)
    sums = torch.zeros(len(names), dtype=torch.float64, device=run.device)
    counts = torch.zeros(len(names), dtype=torch.float64, device=run.device)
    dp_rank, dp_size = data_parallel_coordinate(run.mesh)
    split = not is_sharded(part)
    windows = cfg.eval_batches * EVAL_WINDOWS_PER_BATCH
    batches = run.data.eval_batches(cfg.micro_batch, cfg.seq_len, windows)
    for i, (x, y, source) in enumerate(batches):
        if split and i % dp_size != dp_rank:
            continue
        logits = _chain(run, x.to(run.device))
        if logits is None or (not split and dp_rank != 0):
            continue
        per_window = F.cross_entropy(
            logits.float().transpose(1, 2), y.to(run.device), reduction="none"
        ).mean(1)  # (B,)
        k = names.index(source)
        sums[k] += per_window.double().sum()
        counts[k] += len(per_window)
    dist.all_reduce(sums)
    dist.all_reduce(counts)
    part.train(was_training)
    for stage in run.net.stages:  # zero2: the forwards without backward left them gathered
        reshard(stage)
    if not counts.sum():
        return {}
    val_loss = float(sums.sum() / counts.sum())
    return {
        "val_loss": val_loss,
        "val_perplexity": math.exp(val_loss),
        "per_source": {n: float(sums[k] / counts[k]) for k, n in enumerate(names) if counts[k]},
    }
