"""The training loop: data, model, optimizer and schedule from a TrainConfig, and on every
logged step the plan (core) beside what was measured."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from trainbudget.core.errors import SpecError
from trainbudget.core.model_arg import resolve_model
from trainbudget.core.model_spec import ModelSpec
from trainbudget.model.optim import MasterWeightOptimizer, weight_dtype
from trainbudget.model.transformer import build_model
from trainbudget.profile.device import identify_device, resolve_device
from trainbudget.profile.memory import measure_step_memory
from trainbudget.train.accounting import make_budget
from trainbudget.train.checkpoint import load_checkpoint, save_checkpoint
from trainbudget.train.config import TrainConfig
from trainbudget.train.data import open_data
from trainbudget.train.distributed import (
    ShardingLoad,
    Snapshot,
    all_reduce_mean,
    barrier,
    full_state,
    grad_sync,
    init_distributed,
    is_sharded,
    shutdown,
    total_grad_norm,
    wrap_model,
)
from trainbudget.train.evaluate import evaluate, probe_probabilities, read_probes
from trainbudget.train.metrics import MetricsWriter, Progress
from trainbudget.train.optimizers import build_optimizer
from trainbudget.train.schedule import Schedule, apply_lr


def seed_everything(seed: int) -> None:
    """Python, numpy and torch (the seeds' advice: seed every source of randomness)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def model_spec(cfg: TrainConfig, vocab_size: int) -> ModelSpec:
    spec = resolve_model(cfg.model, cfg.overrides)
    if not isinstance(spec, ModelSpec):
        raise SpecError("model", cfg.model, "training needs an architecture, not dense:N")
    if spec.vocab_size < vocab_size:
        raise SpecError(
            "vocab_size",
            spec.vocab_size,
            f"is smaller than the data's tokenizer ({vocab_size} tokens)",
        )
    if spec.position == "learned" and cfg.seq_len > spec.max_seq_len:
        raise SpecError("seq_len", cfg.seq_len, f"exceeds max_seq_len ({spec.max_seq_len})")
    return spec


def make_optimizer(model, cfg: TrainConfig):
    if cfg.precision == "bf16-mixed":
        return MasterWeightOptimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    return build_optimizer(
        cfg.optimizer, model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
    )


def mixed_precision(precision: str, device: torch.device):
    """(autocast context, gradient scaler) for a precision policy: torch.autocast for the
    amp-* policies (fp32 weights, 16-bit matmuls), a GradScaler for fp16 (its small range
    underflows gradients without loss scaling, Micikevicius et al. 2018, arXiv 1710.03740);
    no-ops otherwise."""
    dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)
    autocast = (
        torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    )
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp-fp16")
    return autocast, scaler


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def train(cfg: TrainConfig) -> dict:
    """Run `cfg`; returns the summary (also written to <out>/summary.json)."""
    device = torch.device(resolve_device(cfg.device))
    info = init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    seed_everything(cfg.seed)
    run_dir = cfg.run_dir
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    data = open_data(cfg, main=info.is_main, barrier=lambda: barrier(info))
    spec = model_spec(cfg, data.vocab_size)
    model = build_model(
        spec,
        device=device,
        recompute=cfg.recompute,
        seed=cfg.seed,
        dtype=weight_dtype(cfg.precision),
    )
    model.train()
    # distributed: this rank's rows of one global batch per step, drawn alike by every rank
    # and by a 1-process run with the same global batch (see data.TrainBatches)
    batches = data.train_batches(
        cfg.micro_batch,
        cfg.seq_len,
        seed=cfg.seed,
        grad_accum=cfg.grad_accum,
        rank=info.rank,
        world_size=info.world_size,
    )
    start_step = 0
    if cfg.resume and (run_dir / "checkpoint").exists():
        start_step = load_checkpoint(run_dir / "checkpoint", model=model, loader=batches)
    if start_step >= cfg.steps:
        raise SpecError(
            "steps",
            cfg.steps,
            f"the checkpoint is already at step {start_step}; give more steps to continue",
        )
    net = wrap_model(model, info, cfg.strategy, device)
    optimizer = make_optimizer(model, cfg)  # after wrap_model: FSDP2's DTensor parameters
    if cfg.resume and (run_dir / "checkpoint").exists():
        # distributed: under FSDP2 the full saved optimizer state is cut into this rank's shards
        target = ShardingLoad(optimizer) if is_sharded(model) else optimizer
        load_checkpoint(run_dir / "checkpoint", optimizer=target)
    schedule = Schedule(
        kind=cfg.schedule,
        base_lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        total_steps=cfg.steps,
        min_lr_ratio=cfg.min_lr_ratio,
    )
    budget = make_budget(
        spec,
        device=identify_device(device),
        precision=cfg.precision,
        optimizer=cfg.optimizer,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        seq_len=cfg.seq_len,
        recompute=cfg.recompute,
        world_size=info.world_size,
    )
    if cfg.compile:
        net = torch.compile(net)
    writer = MetricsWriter(
        run_dir, tensorboard=cfg.tensorboard, enabled=info.is_main, append=start_step > 0
    )
    progress = Progress(cfg.steps, enabled=info.is_main)
    probes = read_probes(cfg.probes) if cfg.probes else []
    tokens_per_step = cfg.micro_batch * cfg.grad_accum * cfg.seq_len * info.world_size
    autocast, scaler = mixed_precision(cfg.precision, device)
    step_times: list[float] = []
    first_loss = last_loss = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    for step in range(start_step, cfg.steps):
        logged = (step + 1) % cfg.log_interval == 0 or step + 1 == cfg.steps
        phases = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
        lr = schedule.lr_at(step)
        apply_lr(optimizer, lr)
        _sync(device)
        t_step = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for micro in range(cfg.grad_accum):
            t = time.perf_counter()
            x, y, _ = batches.next_batch(device)
            phases["data"] += time.perf_counter() - t
            # distributed: gradients synced on the step's last micro-batch only (DDP and FSDP2)
            with grad_sync(net, info, cfg.strategy, sync=micro == cfg.grad_accum - 1):
                t = time.perf_counter()
                with autocast:
                    logits = net(x)[0]
                    # accumulation sums gradients: divide so the step uses the mean loss
                    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
                    loss = loss / cfg.grad_accum
                if logged:
                    _sync(device)
                phases["forward"] += time.perf_counter() - t
                t = time.perf_counter()
                scaler.scale(loss).backward()
                if logged:
                    _sync(device)
                phases["backward"] += time.perf_counter() - t
            loss_sum += loss.detach()
        t = time.perf_counter()
        scaler.unscale_(optimizer)  # fp16: clip and report the true gradient norm
        grad_norm = (
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if cfg.grad_clip > 0
            else total_grad_norm(model.parameters())  # distributed: the full norm under FSDP2
        )
        scaler.step(optimizer)  # skips the step when fp16 gradients overflowed
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        phases["optimizer"] = time.perf_counter() - t
        seconds = time.perf_counter() - t_step
        if step > start_step:  # the first step includes warm-up (allocation, compilation)
            step_times.append(seconds)
        if not logged and step + 1 < cfg.steps:
            continue
        loss_value = float(all_reduce_mean(loss_sum, info))
        first_loss = loss_value if first_loss is None else first_loss
        last_loss = loss_value
        tps = tokens_per_step / seconds
        record = {
            "step": step + 1,
            "loss": loss_value,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "tokens_per_second": tps,
            "step_seconds": seconds,
            "predicted_step_seconds": budget.predicted_step_seconds,
            "achieved_flops_per_second": budget.model_flops_per_token * tps,
            "mfu": budget.mfu(tps / info.world_size),
            "hfu": budget.hfu(tps / info.world_size),
            "memory_bytes": _memory(device, budget),
            "phases_seconds": phases,
        }
        if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.steps:
            record["eval"] = evaluate(model, data, cfg, device)
            if probes:
                record["probes"] = probe_probabilities(model, data.tokenizer, probes, device)
        writer.write(record)
        mfu = f"  MFU {100 * record['mfu']:.1f}%" if record["mfu"] is not None else ""
        progress.update(step + 1, f"loss {loss_value:.3f}  {tps:,.0f} tok/s{mfu}")
    progress.close()
    # distributed: every rank gathers (FSDP2's shards -> full tensors, a collective), rank 0
    # writes the single-process format
    model_state = full_state(model.state_dict(), info)
    optimizer_state = full_state(optimizer.state_dict(), info)
    if info.is_main:
        save_checkpoint(
            run_dir / "checkpoint",
            model=Snapshot(model_state),
            optimizer=Snapshot(optimizer_state),
            loader=batches,
            step=cfg.steps,
            config=dataclasses.asdict(cfg),
            spec=spec,
        )
    summary = _summary(
        cfg,
        data,
        budget,
        step_times,
        first_loss,
        last_loss,
        device,
        tokens_per_step,
        info.world_size,
        spec,
    )
    if info.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    writer.close()
    barrier(info)
    shutdown(info)
    return summary


def _memory(device: torch.device, budget) -> dict:
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"predicted_peak": budget.predicted_peak_memory_bytes, "measured_peak": measured}


def _summary(
    cfg, data, budget, step_times, first_loss, last_loss, device, tokens_per_step, world_size, spec
) -> dict:
    measured = statistics.median(step_times) if step_times else None
    tps = tokens_per_step / measured if measured else None
    out = {
        "steps": cfg.steps,
        "tokens_per_step": tokens_per_step,
        "loss_first_logged": first_loss,
        "loss_final": last_loss,
        "unigram_entropy_nats": data.unigram_entropy(),
        "step_seconds": {"measured_median": measured, "predicted": budget.predicted_step_seconds},
        "tokens_per_second": tps,
        "mfu": {"measured": budget.mfu(tps / world_size) if tps else None},
        "memory_bytes": _memory(device, budget),
        "device": budget.device.as_dict(),
        "world_size": world_size,
        "notes": list(budget.notes),
    }
    if out["step_seconds"]["predicted"] and measured:
        out["step_seconds"]["error"] = measured / out["step_seconds"]["predicted"] - 1
    mem = out["memory_bytes"]
    if mem["measured_peak"]:
        mem["error"] = mem["measured_peak"] / mem["predicted_peak"] - 1
    elif not spec.is_moe and world_size == 1 and not cfg.precision.startswith("amp"):
        # no allocator statistics off CUDA: PyTorch's MemTracker measures the same step of
        # the reference model on fake tensors instead (profile.memory)
        fake = measure_step_memory(
            spec,
            micro_batch=cfg.micro_batch,
            seq_len=cfg.seq_len,
            precision=cfg.precision,
            optimizer=cfg.optimizer,
            recompute=cfg.recompute,
            device="fake-cpu",
        )
        mem["measured_peak_fake_tensors"] = fake.peak
        mem["error"] = fake.peak / mem["predicted_peak"] - 1
        out["notes"].append(
            "peak memory measured by torch's MemTracker on fake tensors (one step of the "
            "reference model, single-tensor optimizer): the CPU allocator keeps no statistics"
        )
    if last_loss is not None and math.isfinite(last_loss):
        out["perplexity_final"] = math.exp(last_loss)
    return out
