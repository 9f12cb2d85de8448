"""A run's state in and out of checkpoints: what is saved (everything needed to continue
exactly), which checkpoint a resume takes (the newest that verifies, rank 0 deciding for all),
what must not change across a resume, and the loss-spike rollback.

Files of one checkpoint (train.checkpoint writes them atomically under a SHA-256 manifest):
- the model and the optimizer, in one of two formats (state.json's "format"):
  "full": model.pt, optimizer.pt, full (unsharded) state dicts written by rank 0 (one process,
  DDP); "dcp": dcp/, FSDP2's shards written by every rank through torch.distributed.checkpoint
  (train.sharded), never gathered. Either loads into any run: a full one is cut into FSDP2's
  shards, a dcp one resharded by DCP or stitched into plain tensors for one process;
- state.json: step, tokens seen, the batch stream's position, the guard's window and counters,
  the gradient scaler, the config, the model spec and the data's identity;
- rank-NNNNN.pt, one per rank: that rank's RNG states (python, numpy, torch, CUDA).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from trainbudget.core.errors import SpecError
from trainbudget.train.checkpointing import experts as expert_checkpoint
from trainbudget.train.checkpointing.checkpoint import (
    latest_valid_checkpoint,
    load_file,
    save_checkpoint,
)
from trainbudget.train.checkpointing.consistency import (
    check_rank_files,
    check_step,
    optimizer_steps,
)
from trainbudget.train.checkpointing.contents import check_contents, checked_state
from trainbudget.train.checkpointing.manifest import DCP_DIR
from trainbudget.train.checkpointing.sharded import load_sharded, save_sharded
from trainbudget.train.checkpointing.space import open_on_full_disk
from trainbudget.train.launch.distributed import ShardingLoad, barrier, full_state, is_sharded
from trainbudget.train.parallel import expert_parallel
from trainbudget.train.rng import capture_rng_state, restore_rng_state

if TYPE_CHECKING:
    from trainbudget.core.spec.model_spec import ModelSpec
    from trainbudget.train.data import RunData
    from trainbudget.train.run import Run

STATE_VERSION = 2

FIXED_FIELDS = ("optimizer", "precision", "seed", "seq_len")
"""Config fields a resume must not change: they decide the optimizer state's layout or the batch
stream. The others may change: more steps, another learning rate or schedule (for the steps to
come), intervals, logging."""


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def log_main(run: Run, message: str) -> None:
    if run.info.is_main:
        print(f"trainbudget train: {message}", file=sys.stderr, flush=True)


def data_identity(data: RunData) -> dict:
    """What the token ids mean (the loader's own fingerprint covers which tokens are drawn)."""
    tok = data.tokenizer
    text = tok.to_str() if hasattr(tok, "to_str") else tok.kind
    return {
        "tokenizer": tok.kind,
        "tokenizer_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "vocab_size": data.vocab_size,
    }


def run_state(run: Run, fmt: str) -> dict:
    step = run.state.step
    return {
        "version": STATE_VERSION,
        "format": fmt,
        "step": step,
        "tokens_seen": step * run.tokens_per_step,
        "data_step": run.batches.step,
        "world_size": run.info.world_size,
        "loader": run.batches.state_dict(),
        "guard": run.guard.state_dict(),
        "scaler": run.scaler.state_dict(),
        "config": dataclasses.asdict(run.cfg),
        "spec": spec_dict(run.spec),
        "data": data_identity(run.data),
    }


def spec_dict(spec: ModelSpec) -> dict:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k != "sources"}


def save_run(run: Run) -> Path:
    """A collective: every rank calls it; returns the committed checkpoint folder."""
    files: dict[str, object] = {rank_file(run.info.rank): {"rng": capture_rng_state()}}
    writer = None
    # an expert-parallel run writes the full format (the ranks hold different experts)
    if (is_sharded(run.model) or run.cfg.pp > 1) and expert_parallel.of(run.model) is None:
        # distributed: each rank writes its FSDP2 shards, or its pipeline stages, into dcp/
        # (DCP's save, a collective)
        def writer(tmp: Path) -> None:
            save_sharded(tmp / DCP_DIR, run.model, run.optimizer)

        if run.info.is_main:
            files["state.json"] = run_state(run, "dcp")
    elif expert_parallel.of(run.model) is not None:  # each rank's experts, gathered
        model_state, optimizer_state = expert_checkpoint.full_states(
            run.model, run.optimizer, run.info
        )
        if run.info.is_main:
            files.update(
                {
                    "model.pt": model_state,
                    "optimizer.pt": optimizer_state,
                    "state.json": run_state(run, "full"),
                }
            )
    else:
        model_state = full_state(run.model.state_dict(), run.info)
        optimizer_state = full_state(run.optimizer.state_dict(), run.info)
        if run.info.is_main:
            files.update(
                {
                    "model.pt": model_state,
                    "optimizer.pt": optimizer_state,
                    "state.json": run_state(run, "full"),
                }
            )
    return save_checkpoint(
        run.checkpoint_root,
        run.state.step,
        files=files,
        keep=run.cfg.keep,
        rank=run.info.rank,
        world_size=run.info.world_size,
        barrier=lambda: barrier(run.info),
        writer=writer,
        fault=run.faults.save_fault(run.state.step),
        create=open_on_full_disk if run.faults.full_disk_step == run.state.step else None,
    )


def find_checkpoint(run: Run) -> Path | None:
    """The newest checkpoint that verifies (every file's SHA-256), chosen by rank 0 -- which
    logs each one it rejects -- and told to the other ranks, so all load the same one."""
    chosen = None
    if run.info.is_main:
        chosen = latest_valid_checkpoint(
            run.checkpoint_root, log=lambda m: log_main(run, m), check=lambda p: _fits(run, p)
        )
    if not run.info.enabled:
        return chosen
    box = [str(chosen) if chosen else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0]) if box[0] else None


def _fits(run: Run, path: Path) -> None:
    """Checkpoint `path`'s state.json, model and optimizer tensors against the run
    (train.checkpointing.contents), its step counter and rank files against themselves
    (train.checkpointing.consistency); a CheckpointError rejects it. One of another model or
    recipe is left to `check_compatible`, which refuses the resume on every rank, naming the
    field, rather than falling back past it."""
    state = checked_state(path)
    if incompatibility(run, state, path) is None:
        model, optimizer = run.model, run.optimizer
        if expert_parallel.of(model) is not None:  # a whole model's files, not this rank's
            model, optimizer = expert_checkpoint.full_twin(run.spec, run.cfg)
        check_contents(path, state, model, optimizer)
        check_step(path, state, optimizer_steps(path, state))  # an edited step counter
        check_rank_files(path)  # each rank's RNG states: a refused file falls back too


def incompatibility(run: Run, state: dict, path: Path) -> SpecError | None:
    """How the run's model, data or training recipe differs from checkpoint `path`'s (its
    state.json `state`), or None."""
    where = f"(checkpoint {path.name})"
    spec, data = spec_dict(run.spec), data_identity(run.data)
    for key, old in state["spec"].items():
        new = spec.get(key)
        if key == "name":  # derived from the fields (preset[overrides]): compare the fields
            continue
        if new != old:
            return SpecError(
                f"model {key}", new, f"differs from {old!r} {where}; resume needs the same model"
            )
    for key, old in state["data"].items():
        new = data.get(key)
        if new != old:
            return SpecError(f"data {key}", new, f"differs from {old!r} {where}")
    for key in FIXED_FIELDS:
        new, old = getattr(run.cfg, key), state["config"].get(key)
        if new != old:
            return SpecError(key, new, f"differs from {old!r} {where}; a resume cannot change it")
    return None


def check_compatible(run: Run, state: dict, path: Path) -> None:
    """Refuse a resume whose model, data or training recipe differs from the checkpoint's,
    naming the field; a different world size is allowed when the global batch is the same
    (full checkpoints are cut into any sharding, DCP reshards its own, and the batch stream
    does not depend on the split)."""
    err = incompatibility(run, state, path)
    if err is not None:
        raise err
    if state["world_size"] != run.info.world_size:
        log_main(
            run,
            f"resharding: the checkpoint was written by {state['world_size']} processes, this "
            f"run has {run.info.world_size} (same global batch; per-rank RNG states not restored)",
        )


def restore_run(run: Run, path: Path, *, rollback: bool = False) -> dict:
    """Load `path` into the (already wrapped) model, the optimizer, the batch stream, the
    guard, the scaler and the RNGs. A rollback keeps the guard's counters and the batch
    stream's position (the caller moves it past the bad batches). Returns state.json; the
    caller moves the run's state to its step (RunState.restored)."""
    state = load_file(path, "state.json")
    check_compatible(run, state, path)
    if state.get("format", "full") == "dcp":  # checkpoints before the field are full
        # distributed: each rank reads what its shards need (a collective); one process
        # reads whole tensors
        load_sharded(path / DCP_DIR, run.model, run.optimizer)
    else:
        _load_full(run, path)
    run.guard.load_state_dict(state["guard"], counters=not rollback)
    if state["scaler"]:  # empty unless fp16 loss scaling is on
        run.scaler.load_state_dict(state["scaler"])
    if rollback:
        return state
    run.batches.load_state_dict(state["loader"])
    mine = path / rank_file(run.info.rank)
    if state["world_size"] == run.info.world_size and mine.exists():
        restore_rng_state(load_file(path, rank_file(run.info.rank))["rng"])
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    return state


def _load_full(run: Run, path: Path) -> None:
    """model.pt and optimizer.pt into the run: as they are, or cut into FSDP2's shards."""
    model_state = load_file(path, "model.pt", map_location="cpu")
    if expert_parallel.of(run.model) is not None:  # each rank keeps its own experts
        optimizer_state = load_file(path, "optimizer.pt", map_location=run.device)
        expert_checkpoint.load_full(
            run.model, run.optimizer, model_state, optimizer_state, sharded=is_sharded(run.model)
        )
        return
    if is_sharded(run.model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        # distributed: every rank read the full tensors; each keeps its shard
        set_model_state_dict(run.model, model_state, options=StateDictOptions(full_state_dict=True))
    else:
        run.model.load_state_dict(model_state)
    optimizer_state = load_file(path, "optimizer.pt", map_location=run.device)
    target = ShardingLoad(run.optimizer) if is_sharded(run.model) else run.optimizer
    target.load_state_dict(optimizer_state)
