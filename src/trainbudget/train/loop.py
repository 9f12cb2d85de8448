"""The training loop: data, model, optimizer and schedule from a TrainConfig; on every logged
step the plan (core) beside what was measured; and a run that never loses work -- verified
checkpoints every N steps or T minutes and on SIGTERM/SIGINT, exact resume, non-finite steps
skipped, loss spikes rolled back (train.resume, train.guard)."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time

import torch

from trainbudget.profile.device import resolve_device
from trainbudget.train.checkpointing.recovery import (
    Interrupted,
    TrainingHalted,
    maybe_save,
    rollback,
    skip_step,
)
from trainbudget.train.checkpointing.resume import log_main
from trainbudget.train.evaluate import evaluate, probe_probabilities
from trainbudget.train.launch.collective_watch import ranks_lost_named, signal_watch
from trainbudget.train.launch.distributed import (
    DistInfo,
    arrive,
    init_distributed,
    is_sharded,
    shutdown,
)
from trainbudget.train.launch.exits import SecondSignal
from trainbudget.train.launch.faults import Faults
from trainbudget.train.observe.metrics import (
    MetricsWriteError,
    MetricsWriter,
    Progress,
    resume_metrics,
)
from trainbudget.train.observe.moe_tally import moe_text
from trainbudget.train.observe.source_loss import log_line_part
from trainbudget.train.observe.startup import Say, log_rule, logged_step, on_terminal
from trainbudget.train.parallel.parallelize import (
    reshard,
)
from trainbudget.train.pipeline_step import evaluate_pipeline
from trainbudget.train.run import Run
from trainbudget.train.spec.config import TrainConfig
from trainbudget.train.spec.run_files import (
    COMM_FILE,
    SUMMARY_FILE,
)
from trainbudget.train.spec.schedule import apply_lr
from trainbudget.train.start import start_run
from trainbudget.train.step import sync, train_step
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
        run, say = start_run(cfg, faults, device, info, held)
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
        sync(run.device)
        t_step, cpu_step = time.perf_counter(), time.process_time()
        with (
            run.peak_meter.step(run.model, run.optimizer, run.net),  # CPU: the 2nd step
            run.comm_counter.step(),  # the 3rd step of this process: its collectives
        ):
            loss, grad_norm, verdict, flags, phases, by_source = train_step(run, logged)
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
                _evaluate_into(run, record)
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
            _stop(run, writer)


def _evaluate_into(run: Run, record: dict) -> None:
    """The held-out loss (and the probes' probabilities) at an evaluation step, into `record`."""
    cfg, state = run.cfg, run.state
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


def _stop(run: Run, writer: MetricsWriter) -> None:
    """After a signal (this rank's or another's) and the checkpoint it forced: the event logged
    and the run stopped with the resume hint."""
    state = run.state
    signum = state.signal or signal.SIGTERM  # another rank's signal: stop like SIGTERM
    name = signal.Signals(signum).name
    writer.write({"step": state.step, "event": "interrupted", "signal": name})
    raise Interrupted(
        signum,
        f"stopped by {name} at step {state.step}; checkpoint saved in "
        f"{run.checkpoint_root}; continue with --resume",
    )


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
