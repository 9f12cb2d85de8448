"""A run made ready before its first step: the run folder claimed (or resumed), the plan and
budget the log lines compare with, the model, optimizer, data and schedule built for the
config's strategy (`start_run`); `train.loop` then runs it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path

import torch

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.optim import mixed_precision, weight_dtype
from trainbudget.model.transformer import build_model
from trainbudget.profile.device import identify_device
from trainbudget.train.checkpointing.checkpoint import CHECKPOINTS_DIR, clean_partial
from trainbudget.train.checkpointing.resume import find_checkpoint, log_main, restore_run
from trainbudget.train.checkpointing.space import (
    predicted_checkpoint_bytes,
    prepare_checkpoint_folder,
)
from trainbudget.train.data import open_data
from trainbudget.train.guard import StepGuard
from trainbudget.train.launch.distributed import (
    DistInfo,
    arrive,
    barrier,
)
from trainbudget.train.launch.faults import Faults
from trainbudget.train.launch.run_lock import make_room, own_run_folder
from trainbudget.train.observe.accounting import Budget, make_budget, run_plan
from trainbudget.train.observe.comm_count import make_counter
from trainbudget.train.observe.memory_check import Step, check_run
from trainbudget.train.observe.rank_memory import PeakMeter, tracks_cpu_peak
from trainbudget.train.observe.startup import Say
from trainbudget.train.parallel.parallelize import (
    build_mesh,
    data_parallel_coordinate,
    parallel_optimizer,
    parallelize,
)
from trainbudget.train.parallel.setup import seed_everything
from trainbudget.train.run import Run
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.preflight import preflight
from trainbudget.train.spec.run_files import (
    CONFIG_FILE,
    has_summary,
    read_run,
)
from trainbudget.train.spec.schedule import Schedule
from trainbudget.train.spec.strategy import alone_note


def start_run(
    cfg: TrainConfig,
    faults: Faults,
    device: torch.device,
    info: DistInfo,
    held: contextlib.ExitStack,
) -> tuple[Run, Say]:
    """Check everything, then build the run; resume it when asked. Nothing is written before
    the checks pass and the run folder is ours (its lock, released by `held`); the model is
    built only when the predicted peak memory fits."""
    say = Say(enabled=info.is_main)
    pre = preflight(cfg, world_size=info.world_size)
    cfg, spec = pre.config, pre.spec
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    plan = _plan(cfg, info)
    _say_layout(cfg, plan, info, say)
    _claim(cfg, spec, plan, device, info, held, say)
    root = _run_folder(cfg, info)
    say("preparing the data" if not cfg.data else f"opening the data in {cfg.data}")
    arrive(info, "start-up: the data (rank 0 prepares it, the others wait)")
    data = open_data(cfg, main=info.is_main, barrier=lambda: barrier(info))
    say(f"building the model {spec.name} on {device}")
    mesh = build_mesh(info, cfg, device)
    model = _model(cfg, spec, device)
    arrive(info, "start-up: the model's wrapper (DDP broadcasts the parameters)")
    parallel = parallelize(model, info, cfg, device, mesh=mesh)
    net = parallel.net
    if parallel.model is not None:  # pp > 1: this rank's stages (train.parallel.pipeline)
        model = parallel.model
    # the data-parallel coordinate: the ranks of one pipeline read the same rows
    dp_rank, dp_size = data_parallel_coordinate(parallel.mesh)
    batches = _batches(cfg, data, dp_rank, dp_size)
    # after parallelize: FSDP2's DTensor parameters; zero1's sharded state over the mesh
    optimizer = parallel_optimizer(model, cfg, parallel)
    autocast, scaler = mixed_precision(cfg.precision, device)
    say(
        "predicting step time and memory (off the catalog: timing this machine at the run's shapes)"
    )
    budget = _budget(cfg, spec, plan, device)
    if budget.roofline is not None:
        say(f"predicted step {budget.predicted_step_seconds:.3g} s{_trust(budget)}")
    run = Run(
        cfg=cfg,
        info=info,
        device=device,
        spec=spec,
        data=data,
        model=model,
        net=torch.compile(net) if cfg.compile else net,
        optimizer=optimizer,
        batches=batches,
        schedule=_lr_schedule(cfg),
        budget=budget,
        guard=_spike_guard(cfg),
        scaler=scaler,
        autocast=autocast,
        faults=faults,
        checkpoint_root=root,
        tokens_per_step=cfg.micro_batch * cfg.grad_accum * cfg.seq_len * dp_size,
        probes=pre.probes,
        mesh=parallel.mesh,
        peak_meter=PeakMeter(device, tracked=tracks_cpu_peak(cfg, info)),
        comm_counter=make_counter(parallel, compiled=cfg.compile),
    )
    if cfg.resume:
        say("resuming")
        arrive(info, "the resume")
        _resume(run)  # a refused resume leaves config.json as the run wrote it
        _write_config(cfg, info)
    return run, say


def _say_layout(cfg: TrainConfig, plan, info: DistInfo, say: Say) -> None:
    say(f"layout {plan.describe()} on {info.world_size} process(es), strategy {cfg.strategy}")
    alone = alone_note(cfg.strategy, world_size=info.world_size)
    if alone:
        say(f"note: {alone}")


def _lr_schedule(cfg: TrainConfig) -> Schedule:
    return Schedule(
        kind=cfg.schedule,
        base_lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        total_steps=cfg.steps,
        min_lr_ratio=cfg.min_lr_ratio,
    )


def _spike_guard(cfg: TrainConfig) -> StepGuard:
    return StepGuard(
        window=cfg.spike_window, sigmas=cfg.spike_sigmas, min_excess=cfg.spike_min_excess
    )


def _claim(
    cfg: TrainConfig,
    spec: ModelSpec,
    plan: Plan,
    device: torch.device,
    info: DistInfo,
    held: contextlib.ExitStack,
    say: Say,
) -> None:
    """Before anything is written or built: the memory check, the run folder's lock (released
    by `held`), and every rank's write probe and free-space check."""
    if cfg.memory_check:
        step = Step.of(cfg, spec, plan)
        say(check_run(step, device=device.type, index=device.index, world_size=info.world_size))
    lock = own_run_folder(cfg.run_dir, cfg.out, rank=info.rank, world_size=info.world_size)
    if lock is not None:
        held.callback(lock.release)
    # the run folder and checkpoints/ written to by every rank, and room for --keep + 1
    # checkpoints, before step 1 rather than at the first save
    prepare_checkpoint_folder(
        cfg.run_dir,
        rank=info.rank,
        checkpoint_size_bytes=predicted_checkpoint_bytes(
            spec, precision=cfg.precision, optimizer=cfg.optimizer
        ),
        keep=cfg.keep,
    )
    # every rank's probe is done before rank 0 clears an earlier run (--overwrite) from the
    # folder the probes were written in
    arrive(info, "start-up: the run folder's write probes")
    barrier(info)


def _model(cfg: TrainConfig, spec: ModelSpec, device):
    """The reference model in training mode."""
    model = build_model(
        spec,
        device=device,
        recompute=cfg.recompute,
        seed=cfg.seed,
        dtype=weight_dtype(cfg.precision),
    )
    model.train()
    return model


def _batches(cfg: TrainConfig, data, dp_rank: int, dp_size: int):
    """This data-parallel rank's batches: its rows of one global batch per step, drawn alike
    by every rank and by a 1-process run with the same global batch (see data.TrainBatches)."""
    return data.train_batches(
        cfg.micro_batch,
        cfg.seq_len,
        seed=cfg.seed,
        grad_accum=cfg.grad_accum,
        rank=dp_rank,
        world_size=dp_size,
    )


def _run_folder(cfg: TrainConfig, info: DistInfo) -> Path:
    """Refuse a fresh run into a folder holding an earlier run (or, --overwrite, delete that
    run's files), seed, and (rank 0) write a fresh run's config; the checkpoint root."""
    run_dir = cfg.run_dir
    if not cfg.resume:
        for path in make_room(run_dir, cfg.out, overwrite=cfg.overwrite, main=info.is_main):
            print(f"trainbudget train: --overwrite: deleted {path}", file=sys.stderr)
    seed_everything(cfg.seed)
    if not cfg.resume:  # a resume's, once its checkpoint is accepted (see _start)
        _write_config(cfg, info)
    return run_dir / CHECKPOINTS_DIR


def _write_config(cfg: TrainConfig, info: DistInfo) -> None:
    """(Rank 0) the run's settings to config.json."""
    if info.is_main:
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        (cfg.run_dir / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(cfg), indent=2))


def _plan(cfg: TrainConfig, info: DistInfo) -> Plan:
    """The layout that runs (train.observe.accounting.run_plan)."""
    return run_plan(
        cfg.strategy,
        world_size=info.world_size,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        recompute=cfg.recompute,
        zero_shard=cfg.zero_shard,
        tp=cfg.tp,
        sequence_parallel=cfg.sequence_parallel,
        ep=cfg.ep,
        pp=cfg.pp,
        cp=cfg.cp,
        pp_schedule=cfg.pp_schedule,
        vpp=cfg.vpp,
        pp_layers=cfg.pp_layers,
    )


def _budget(cfg: TrainConfig, spec: ModelSpec, plan: Plan, device: torch.device) -> Budget:
    """The plan's predictions for the layout that runs (train.observe.accounting)."""
    return make_budget(
        spec,
        plan,
        device=identify_device(device),
        precision=cfg.precision,
        optimizer=cfg.optimizer,
        seq_len=cfg.seq_len,
    )


def _trust(budget: Budget) -> str:
    """Off the catalog, whether the start-up roofline can be trusted, for the start-up line."""
    roof = budget.roofline
    if roof is None or not roof.noisy:
        return ""
    return f"; NOT to be trusted, the machine is busy: {roof.why_noisy()}"


def _resume(run: Run) -> None:
    if run.info.is_main:
        for path in clean_partial(run.checkpoint_root):
            log_main(run, f"removed a partial checkpoint write: {path.name}")
    path = find_checkpoint(run)
    if path is None:
        log_main(run, f"no checkpoint in {run.checkpoint_root}: starting at step 0")
        return
    step = int(restore_run(run, path)["step"])
    run.state.restored(step, saved=True)
    log_main(run, f"resumed from {path} (step {step}, {step * run.tokens_per_step:,} tokens)")
    if step == run.cfg.steps and not has_summary(run.cfg.run_dir):
        # killed after its last checkpoint or while summarising: finish it, steps done
        _losses_from_log(run)
        log_main(run, f"the run is at its last step ({step}) without its summary: writing it")
        return
    if step >= run.cfg.steps:
        raise SpecError(
            "steps",
            run.cfg.steps,
            f"the checkpoint is already at step {step}; give more steps to continue",
        )


def _losses_from_log(run: Run) -> None:
    """The first and last logged losses from metrics.jsonl, for the summary of a run whose
    steps are all done (a damaged or empty log: left unknown)."""
    with contextlib.suppress(SpecError):
        losses = [p.loss for p in read_run(run.cfg.run_dir).points if p.loss is not None]
        for loss in losses[:1] + losses[-1:]:
            run.state.logged(loss)
