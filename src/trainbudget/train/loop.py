"""The training loop: data, model, optimizer and schedule from a TrainConfig; on every logged
step the plan (core) beside what was measured; and a run that never loses work -- verified
checkpoints every N steps or T minutes and on SIGTERM/SIGINT, exact resume, non-finite steps
skipped, loss spikes rolled back (train.resume, train.guard)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.optim import mixed_precision, weight_dtype
from trainbudget.model.transformer import build_model
from trainbudget.profile.device import identify_device, resolve_device
from trainbudget.train.checkpointing.checkpoint import CHECKPOINTS_DIR, clean_partial
from trainbudget.train.checkpointing.recovery import (
    Interrupted,
    TrainingHalted,
    maybe_save,
    rollback,
    skip_step,
    time_due,
)
from trainbudget.train.checkpointing.resume import find_checkpoint, log_main, restore_run
from trainbudget.train.checkpointing.space import (
    predicted_checkpoint_bytes,
    prepare_checkpoint_folder,
)
from trainbudget.train.data import open_data
from trainbudget.train.evaluate import evaluate, probe_probabilities
from trainbudget.train.guard import StepGuard, Verdict
from trainbudget.train.launch.collective_watch import ranks_lost_named, signal_watch
from trainbudget.train.launch.distributed import (
    DistInfo,
    all_reduce_sum,
    arrive,
    barrier,
    clip_grad_norm,
    grad_sync,
    init_distributed,
    is_sharded,
    shutdown,
    total_grad_norm,
)
from trainbudget.train.launch.exits import SecondSignal
from trainbudget.train.launch.faults import Faults
from trainbudget.train.launch.run_lock import make_room, own_run_folder
from trainbudget.train.observe.accounting import Budget, make_budget, run_plan
from trainbudget.train.observe.comm_count import make_counter
from trainbudget.train.observe.memory_check import Step, check_run
from trainbudget.train.observe.metrics import (
    MetricsWriteError,
    MetricsWriter,
    Progress,
    resume_metrics,
)
from trainbudget.train.observe.moe_tally import MoeTally, moe_record, moe_text
from trainbudget.train.observe.rank_memory import PeakMeter, tracks_cpu_peak
from trainbudget.train.observe.source_loss import SourceLoss, log_line_part
from trainbudget.train.observe.startup import Say, log_rule, logged_step, on_terminal
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.parallel.context import local_batch
from trainbudget.train.parallel.parallelize import (
    build_mesh,
    data_parallel_coordinate,
    parallel_optimizer,
    parallelize,
    reshard,
)
from trainbudget.train.parallel.setup import seed_everything
from trainbudget.train.parallel.tensor_parallel import loss_context, per_token_loss
from trainbudget.train.pipeline_step import evaluate_pipeline, forward_backward, whole_gradient
from trainbudget.train.run import Run
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.preflight import preflight
from trainbudget.train.spec.run_files import (
    COMM_FILE,
    CONFIG_FILE,
    SUMMARY_FILE,
    has_summary,
    read_run,
)
from trainbudget.train.spec.schedule import Schedule, apply_lr
from trainbudget.train.spec.strategy import alone_note
from trainbudget.train.summary import memory_bytes, run_comm, summarize


def train(cfg: TrainConfig, *, faults: Faults | None = None) -> dict:
    """Run `cfg`; returns the summary (also written to <out>/summary.json). The run folder is
    locked for the whole run (train.launch.run_lock). Under torchrun, a collective that fails (a
    timeout, a peer gone) raises exits.RanksLost naming the phase and the ranks that did not
    arrive."""
    device = torch.device(resolve_device(cfg.device))
    info = init_distributed(device.type, cfg.collective_timeout_seconds)
    with ranks_lost_named(info.watch):
        return _run(cfg, faults if faults is not None else Faults.from_env(), device, info)


def _run(cfg: TrainConfig, faults: Faults, device: torch.device, info: DistInfo) -> dict:
    with contextlib.ExitStack() as held:  # the run folder's lock, released however train ends
        run, say = _start(cfg, faults, device, info, held)
        try:
            summary = _train(run, say)
        except (Interrupted, TrainingHalted) as err:
            # an orderly stop, at the same step on every rank (the flags and the guard's
            # verdict come from all-reduced values); its traceback's frames hold the model
            stopped = err.with_traceback(None)
        else:
            stopped = None
        # the model, optimizer and DDP/FSDP2 wrappers hold the process group: let them go, so
        # that shutdown really ends it (see distributed.shutdown)
        del run
        shutdown(info)
    if stopped is not None:
        raise stopped
    return summary


def _train(run: Run, say: Say) -> dict:
    cfg = run.cfg
    if run.info.is_main and cfg.resume:  # one history: a torn end cut, later records aside
        for line in resume_metrics(cfg.run_dir, run.state.step):
            log_main(run, line)
    writer = MetricsWriter(
        cfg.run_dir,
        tensorboard=cfg.tensorboard,
        enabled=run.info.is_main,
        append=cfg.resume,
        faults=run.faults,
    )
    progress = Progress(cfg.steps, enabled=run.info.is_main, first_step=run.state.step)
    say(
        f"training {cfg.steps - run.state.step} steps of {run.tokens_per_step:,} tokens on "
        f"{run.device}; {log_rule(cfg.log_interval)}"
    )
    try:
        with _signals(run):
            _loop(run, writer, progress)
    except MetricsWriteError as err:  # a full disk: the newest checkpoint is intact
        raise TrainingHalted(f"{err}; free space and continue with --resume") from None
    finally:
        progress.close()
        writer.close()
    say("summarising the run (predicted against measured)")
    summary = summarize(run)
    comm = run_comm(run)  # a collective, like summarize: every rank calls it
    summary["comm"] = {"file": COMM_FILE, **comm["summary"]}
    if run.info.is_main:
        text = json.dumps(summary, indent=2, allow_nan=False)
        (run.checkpoint_root.parent / SUMMARY_FILE).write_text(text)
        (run.checkpoint_root.parent / COMM_FILE).write_text(json.dumps(comm, indent=2))
    return summary


def _start(
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


@contextlib.contextmanager
def _signals(run: Run):
    """SIGTERM/SIGINT set a flag; the step in progress finishes, every rank learns of it in the
    step's all-reduce, and the run saves a checkpoint and stops. A second signal stops at once."""

    def handler(signum, _frame):
        if run.state.signal and run.state.saving:
            run.state.held_signal = signum  # raised once the checkpoint is whole
            return
        if run.state.signal:
            raise SecondSignal(signum, run.state.step)
        run.state.interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        # distributed: a rank blocked in a collective runs no Python handler (collective_watch)
        with signal_watch(run.info.watch):
            yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _loop(run: Run, writer: MetricsWriter, progress: Progress) -> None:
    cfg, state = run.cfg, run.state
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    first = state.step
    while state.step < cfg.steps:
        logged = logged_step(state.step + 1, log_interval=cfg.log_interval, steps=cfg.steps)
        lr = run.schedule.lr_at(state.step)
        apply_lr(run.optimizer, lr)
        batch_crc = run.batches.fingerprint()
        _sync(run.device)
        t_step, cpu_step = time.perf_counter(), time.process_time()
        with (
            run.peak_meter.step(run.model, run.optimizer, run.net),  # CPU: the 2nd step
            run.comm_counter.step(),  # the 3rd step of this process: its collectives
        ):
            loss, grad_norm, verdict, flags, phases, by_source = _step(run, logged)
        seconds, cpu_seconds = time.perf_counter() - t_step, time.process_time() - cpu_step
        run.guard.record(loss, verdict)
        if verdict.reason == "spike":
            arrive(run.info, f"the rollback at step {state.step + 1}")
            rollback(run, writer, loss, verdict)
            continue
        # the first step of this process includes warm-up (allocation, compilation)
        state.advance(seconds if state.step > first else None, cpu_seconds)
        if verdict.reason == "nonfinite":
            skip_step(run, writer, loss, grad_norm, verdict)
        if verdict.ok and (logged or state.step == cfg.steps):
            state.logged(loss)
            record = _record(run, loss, lr, grad_norm, seconds, phases, batch_crc)
            record.update(flags["moe"])
            record.update(by_source)
            if state.step % cfg.eval_interval == 0 or state.step == cfg.steps:
                arrive(run.info, f"the evaluation at step {state.step}")
                if cfg.pp > 1:  # along the stages (train.pipeline_step)
                    record["eval"] = evaluate_pipeline(run)
                else:
                    record["eval"] = evaluate(
                        run.model,
                        run.data,
                        cfg,
                        run.device,
                        run.info,
                        # each forward of an expert-parallel model is a collective, like FSDP2's
                        sharded=is_sharded(run.model) or cfg.ep > 1,
                    )
                if run.probes:
                    record["probes"] = probe_probabilities(
                        run.model, run.data.tokenizer, run.probes, run.device
                    )
                reshard(run.model)  # zero2: the forwards without backward left them gathered
            writer.write(record)
            mfu = f"  MFU {100 * record['mfu']:.1f}%" if record["mfu"] is not None else ""
            tps = record["tokens_per_second"]
            per_source = log_line_part(by_source.get("train_loss_by_source", {}))
            progress.update(
                state.step, f"loss {loss:.3f}{per_source}  {tps:,.0f} tok/s{mfu}{moe_text(record)}"
            )
        elif verdict.ok and on_terminal(
            state.step, first=first, log_interval=cfg.log_interval, steps=cfg.steps
        ):
            warm = " (warm-up included)" if state.step == first + 1 else ""
            progress.update(state.step, f"loss {loss:.3f}  {seconds:.3g} s/step{warm}")
        run.faults.maybe_kill(state.step, run.info.rank)
        arrive(run.info, f"the checkpoint at step {state.step}")
        maybe_save(run, writer, time_due=flags["time_due"], force=bool(flags["signal"]))
        if flags["signal"]:
            signum = state.signal or signal.SIGTERM  # another rank's signal: stop like SIGTERM
            name = signal.Signals(signum).name
            writer.write({"step": state.step, "event": "interrupted", "signal": name})
            raise Interrupted(
                signum,
                f"stopped by {name} at step {state.step}; checkpoint saved in "
                f"{run.checkpoint_root}; continue with --resume",
            )


def _step(run: Run, logged: bool):
    """One iteration: forward and backward over grad_accum micro-batches, the global loss and
    gradient norm, and the update unless the guard says no. Returns (loss, grad_norm, verdict,
    flags agreed by all ranks -- and the MoE layers' figures, flags["moe"] --, phase seconds,
    per-source loss fields -- on logged steps only)."""
    if run.cfg.pp > 1:
        return _pipeline_step(run, logged)
    cfg = run.cfg
    phases = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
    batch = run.batches.step + 1  # 1-based, as faults count batches
    arrive(run.info, f"the forward and backward of step {run.state.step + 1} (gradient sync)")
    factor = run.faults.loss_factor(batch)
    loss_sum = torch.zeros((), device=run.device)
    moe = MoeTally(run.device)  # MoE models: auxiliary losses, dropped tokens
    # per-source loss on logged steps only: off the hot path of the others
    sources = SourceLoss(run.batches.dataset.source_names, run.device) if logged else None
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
                _sync(run.device)
            phases["forward"] += time.perf_counter() - t
            t = time.perf_counter()
            run.scaler.scale(total).backward()
            if logged:
                _sync(run.device)
            phases["backward"] += time.perf_counter() - t
        loss_sum += loss.detach()
        if sources is not None:
            sources.add(token_losses, source_ids)
    t = time.perf_counter()
    arrive(run.info, f"the gradient-norm and loss all-reduces of step {run.state.step + 1}")
    if batch in run.faults.nan_grad_batches:
        next(p for p in run.model.parameters() if p.grad is not None).grad.fill_(math.nan)
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
    _sync(run.device)
    phases["optimizer"] = time.perf_counter() - t
    flags, by_source = _decode_packet(packet, moe, sources)
    return loss_value, grad_norm_value, verdict, flags, phases, by_source


def _pipeline_step(run: Run, logged: bool):
    """`_step` with pp > 1: the schedule runs the micro-batches (train.pipeline_step); the loss,
    flags and update as `_step` does them, the gradient norm over every stage."""
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
    _sync(run.device)
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


def _record(run: Run, loss, lr, grad_norm, seconds, phases, batch_crc) -> dict:
    tps = run.tokens_per_step / seconds
    budget, step = run.budget, run.state.step
    return {
        "step": step,
        "loss": loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "tokens_per_second": tps,
        "tokens_seen": step * run.tokens_per_step,
        "batch_crc32": batch_crc,
        "step_seconds": seconds,
        "predicted_step_seconds": budget.predicted_step_seconds,
        "achieved_flops_per_second": budget.model_flops_per_token * tps,
        "mfu": budget.mfu(tps / run.info.world_size),
        "hfu": budget.hfu(tps / run.info.world_size),
        "memory_bytes": memory_bytes(run.device, budget),
        "phases_seconds": phases,
        **run.guard.counters(),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
