"""One training step: forward and backward over the step's micro-batches (or the pipeline
schedule's), the gradient norm, the loss and flags all-reduced in one packet, the guard's
verdict and the update it allows (`train_step`)."""

from __future__ import annotations

import math
import time

import torch

from trainbudget.train.checkpointing.recovery import (
    time_due,
)
from trainbudget.train.guard import Verdict
from trainbudget.train.launch.distributed import (
    all_reduce_sum,
    arrive,
    clip_grad_norm,
    grad_sync,
    total_grad_norm,
)
from trainbudget.train.observe.moe_tally import MoeTally, moe_record
from trainbudget.train.observe.source_loss import SourceLoss
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.parallel.context import local_batch
from trainbudget.train.parallel.tensor_parallel import loss_context, per_token_loss
from trainbudget.train.pipeline_step import forward_backward, whole_gradient
from trainbudget.train.run import Run


def train_step(run: Run, logged: bool):
    """One iteration: forward and backward over grad_accum micro-batches, the global loss and
    gradient norm, and the update unless the guard says no. Returns (loss, grad_norm, verdict,
    flags agreed by all ranks -- and the MoE layers' figures, flags["moe"] --, phase seconds,
    per-source loss fields -- on logged steps only)."""
    if run.cfg.pp > 1:
        return _pipeline_step(run, logged)
    phases = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
    batch = run.batches.step + 1  # 1-based, as faults count batches
    arrive(run.info, f"the forward and backward of step {run.state.step + 1} (gradient sync)")
    factor = run.faults.loss_factor(batch)
    moe = MoeTally(run.device)  # MoE models: auxiliary losses, dropped tokens
    # per-source loss on logged steps only: off the hot path of the others
    sources = SourceLoss(run.batches.dataset.source_names, run.device) if logged else None
    loss_sum = _accumulate(run, logged, phases, factor, moe, sources)
    t = time.perf_counter()
    arrive(run.info, f"the gradient-norm and loss all-reduces of step {run.state.step + 1}")
    if batch in run.faults.nan_grad_batches:
        next(p for p in run.model.parameters() if p.grad is not None).grad.fill_(math.nan)
    loss_value, grad_norm_value, verdict, packet = _update(run, loss_sum, moe, sources)
    phases["optimizer"] = time.perf_counter() - t
    flags, by_source = _decode_packet(packet, moe, sources)
    return loss_value, grad_norm_value, verdict, flags, phases, by_source


def _accumulate(run: Run, logged: bool, phases: dict, factor, moe: MoeTally, sources):
    """Forward and backward of the step's grad_accum micro-batches, gradients summed (synced on
    the last); the phases' seconds added to `phases`; returns the summed (mean) loss."""
    cfg = run.cfg
    loss_sum = torch.zeros((), device=run.device)
    for micro in range(cfg.grad_accum):
        t = time.perf_counter()
        x, y, source_ids = run.batches.next_batch(run.device)
        x, y = local_batch(run.model, x, y)  # cp > 1: this rank's chunks of each sequence
        phases["data"] += time.perf_counter() - t
        # distributed: gradients synced on the step's last micro-batch only (DDP and FSDP2)
        # tensor parallel: the loss (and its backward) of vocabulary-sharded logits
        with (
            grad_sync(run.net, run.info, cfg.strategy, sync=micro == cfg.grad_accum - 1),
            loss_context(cfg.tp),
        ):
            t = time.perf_counter()
            with run.autocast:
                logits = run.net(x)[0]
                token_losses = per_token_loss(logits, y)  # (B, T)
                # accumulation sums gradients: divide so the step uses the mean loss
                loss = token_losses.mean() / cfg.grad_accum
                if factor is not None:
                    loss, token_losses = loss * factor, token_losses * factor
                total = moe.add_losses(run.model, loss, cfg)
            if logged:
                sync(run.device)
            phases["forward"] += time.perf_counter() - t
            t = time.perf_counter()
            run.scaler.scale(total).backward()
            if logged:
                sync(run.device)
            phases["backward"] += time.perf_counter() - t
        loss_sum += loss.detach()
        if sources is not None:
            sources.add(token_losses, source_ids)
    return loss_sum


def _update(run: Run, loss_sum, moe: MoeTally, sources):
    """The gradient sync's rest, the norm (clipped), the loss and flags all-reduced, the guard's
    verdict and the update it allows: (loss, grad norm, verdict, packet)."""
    cfg = run.cfg
    expert_parallel.sync_expert_grads(run.model)  # EP: the experts' part of the gradient sync
    run.scaler.unscale_(run.optimizer)  # fp16: clip and judge the true gradient norm
    run.comm_counter.trainer(True)  # the norm's and the packet's all-reduces: the trainer's
    grad_norm = (
        expert_parallel.grad_norm(run.model, cfg.grad_clip)
        if cfg.ep > 1
        else clip_grad_norm(run.model.parameters(), cfg.grad_clip)  # several meshes under tp
        if cfg.grad_clip > 0
        else total_grad_norm(run.model.parameters())  # distributed: the full norm under FSDP2
    )
    packet = _all_reduce_packet(run, loss_sum, moe, sources)
    run.comm_counter.trainer(False)
    loss_value = packet[0] / run.info.world_size
    grad_norm_value = float(grad_norm)
    verdict = run.guard.judge(loss_value, grad_norm_value)
    if verdict.reason == "nonfinite" and run.scaler.is_enabled() and math.isfinite(loss_value):
        verdict = Verdict()  # fp16 overflow: GradScaler skips the update and lowers its scale
    if verdict.ok:
        run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    sync(run.device)
    return loss_value, grad_norm_value, verdict, packet


def _pipeline_step(run: Run, logged: bool):
    """`train_step` with pp > 1: the schedule runs the micro-batches (train.pipeline_step); the
    loss, flags and update as `train_step` does them, the gradient norm over every stage."""
    phases = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
    batch = run.batches.step + 1  # 1-based, as faults count batches
    arrive(run.info, f"the pipeline schedule of step {run.state.step + 1}")
    moe = MoeTally(run.device)  # preflight refuses MoE models with pp > 1: zeros
    sources = SourceLoss(run.batches.dataset.source_names, run.device) if logged else None
    loss_sum = forward_backward(run, run.faults.loss_factor(batch), sources, phases)
    t = time.perf_counter()
    arrive(run.info, f"the gradient-norm and loss all-reduces of step {run.state.step + 1}")
    grad_norm_value = whole_gradient(run, batch)
    packet = _all_reduce_packet(run, loss_sum, moe, sources)
    run.comm_counter.trainer(False)
    loss_value = packet[0] / run.info.world_size
    verdict = run.guard.judge(loss_value, grad_norm_value)
    if verdict.ok:
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    sync(run.device)
    phases["optimizer"] = time.perf_counter() - t
    flags, by_source = _decode_packet(packet, moe, sources)
    return loss_value, grad_norm_value, verdict, flags, phases, by_source


def _all_reduce_packet(run: Run, loss_sum, moe: MoeTally, sources) -> list[float]:
    """The step's one all-reduce, summed over ranks: the loss, the flags every rank must agree
    on, the MoE layers' sums and, on logged steps, the per-source loss sums and token counts."""
    save_by_time = run.info.is_main and time_due(run)
    packet = torch.cat(
        [
            torch.stack(
                [
                    loss_sum.float(),
                    torch.tensor(float(run.state.signal), device=run.device),
                    torch.tensor(float(save_by_time), device=run.device),
                ]
            ),
            moe.sums,
        ]
    )
    if sources is not None:
        packet = torch.cat([packet, sources.packet()])
    return all_reduce_sum(packet, run.info).tolist()


def _decode_packet(packet: list[float], moe: MoeTally, sources) -> tuple[dict, dict]:
    """The flags (signal, time_due, the MoE record) and the per-source fields of a packet."""
    n_moe = 3 + len(moe.sums)  # the packet: loss and two flags, the MoE sums, the sources'
    flags = {
        "signal": packet[1],
        "time_due": packet[2] > 0,
        "moe": moe_record(packet[3:n_moe]),
    }
    by_source = sources.record(packet[n_moe:]) if sources is not None else {}
    return flags, by_source


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
