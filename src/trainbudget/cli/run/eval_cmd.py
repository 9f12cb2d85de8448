"""`trainbudget eval --checkpoint RUN_DIR`: validation loss and perplexity of a trained model,
overall and per source, on the held-out split its run trained beside (or --data). RUN_DIR picks
its newest checkpoint that verifies (RUN_DIR/checkpoints/step-*,
train/checkpointing/manifest.py); a step-* folder is verified and used as it is. The model is
rebuilt from the checkpoint's state.json (spec and config) and its weights are read through
checkpoint.load_file (torch.load(weights_only=True)), or, from a sharded (FSDP2) checkpoint's
dcp/ folder, through train.sharded (DCP in this one process, weights-only). torch is imported
inside run() only.

`open_checkpoint` and `open_data_dir` are shared with `trainbudget sample`."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from trainbudget.cli.args import dumps_json, positive_int
from trainbudget.core.errors import SpecError
from trainbudget.train.checkpointing.manifest import (
    CHECKPOINTS_DIR,
    DCP_DIR,
    MANIFEST,
    CheckpointError,
    latest_valid_checkpoint,
    load_json,
    verify_checkpoint,
)

STATE_FILE = "state.json"
WEIGHTS_FILE = "model.pt"
SHARDED_INDEX = f"{DCP_DIR}/.metadata"  # a sharded checkpoint's weights: DCP's index and files


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="a run directory from `trainbudget train --out` (its newest valid checkpoint), "
        "or one checkpoint folder, RUN_DIR/checkpoints/step-XXXXXXXX",
    )
    p.add_argument(
        "--data",
        metavar="DATA_DIR",
        help="a prepared data directory (default: the one the run used, or RUN_DIR/data)",
    )
    p.add_argument(
        "--device", default="auto", help="auto (default: cuda when available) | cpu | cuda"
    )


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_checkpoint_args(p)
    p.add_argument(
        "--batches",
        metavar="N",
        help="held-out batches per source (default: the run's eval_batches)",
    )
    p.add_argument(
        "--micro-batch", metavar="N", help="sequences per batch (default: the run's micro_batch)"
    )
    p.add_argument(
        "--seq-len", metavar="N", help="tokens per sequence (default: the run's seq_len)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")


@dataclass
class Checkpoint:
    dir: Path
    """The checkpoint folder (holding state.json and model.pt, or dcp/)."""
    run_dir: Path
    step: int
    config: dict
    spec: object  # ModelSpec
    sharded: bool = False
    """The weights are in dcp/ (state.json's format "dcp": an FSDP2 run), not in model.pt."""


def open_checkpoint(arg: str) -> Checkpoint:
    """A run directory (its newest valid checkpoint), its checkpoints/ folder, or one
    checkpoint folder, verified against its manifest; torch is not needed yet."""
    from trainbudget.core.spec.model_spec import ModelSpec

    path = Path(arg)
    if not path.exists():
        raise SpecError("checkpoint", arg, "no such directory")
    if not path.is_dir():
        raise SpecError("checkpoint", arg, "is not a directory (give the run's --out folder)")
    ckpt = _checkpoint_folder(path, arg)
    listed = verify_checkpoint(ckpt)["files"]
    state = load_json(ckpt, STATE_FILE)
    file = ckpt / STATE_FILE
    if not isinstance(state, dict):
        raise CheckpointError(file, "is not a JSON object")
    sharded = state.get("format") == "dcp"
    weights = SHARDED_INDEX if sharded else WEIGHTS_FILE
    if weights not in listed:
        raise CheckpointError(ckpt / weights, "missing (not in the manifest)")
    for key, kind in (("step", int), ("config", dict), ("spec", dict)):
        if not isinstance(state.get(key), kind) or isinstance(state[key], bool):
            raise CheckpointError(file, f"has no {key!r} ({kind.__name__})")
    try:
        spec = ModelSpec(**state["spec"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(file, f"spec is not a model ({err})") from None
    run_dir = ckpt.parent.parent if ckpt.parent.name == CHECKPOINTS_DIR else ckpt.parent
    return Checkpoint(ckpt, run_dir, state["step"], state["config"], spec, sharded)


def _checkpoint_folder(path: Path, arg: str) -> Path:
    """`path` itself when it is a checkpoint (a step-* folder, or one with a manifest), else
    the newest valid one in path/checkpoints/, or in path when it is a checkpoints/ folder
    (the rejected ones are logged on stderr, one line each)."""
    if path.name.startswith("step-") or (path / MANIFEST).exists():
        return path
    root = path if path.name == CHECKPOINTS_DIR else path / CHECKPOINTS_DIR
    if not root.is_dir():
        raise SpecError(
            "checkpoint",
            arg,
            f"is not a run directory or a checkpoint (no {CHECKPOINTS_DIR}/ and no {MANIFEST}: "
            "training writes them)",
        )
    latest = latest_valid_checkpoint(root)
    if latest is None:
        raise SpecError("checkpoint", arg, f"has no valid checkpoint in {root}")
    return latest


def open_data_dir(ckpt: Checkpoint, data: str | None) -> Path:
    """--data, else the data directory in the run's config, else RUN_DIR/data (the embedded
    corpus, prepared there by `train`). Checked to hold a meta.json."""
    if data:
        path, origin = Path(data), "--data"
    elif ckpt.config.get("data"):
        path, origin = Path(ckpt.config["data"]), "the run's config"
    else:
        path, origin = ckpt.run_dir / "data", "the run directory"
    if not (path / "meta.json").is_file():
        hint = "" if data else "; give the prepared directory with --data"
        raise SpecError(
            "data", str(path), f"(from {origin}) is not a prepared data directory{hint}"
        )
    return path


def pick_device(name: str):
    """The torch device for --device (profile.device.resolve_device's rules)."""
    import torch

    from trainbudget.profile.device import resolve_device

    return torch.device(resolve_device(name))


def load_model(ckpt: Checkpoint, device):
    """The reference model of the checkpoint's spec, in the dtype its weights were saved in."""
    if ckpt.sharded:
        return _load_sharded_model(ckpt, device)
    import torch

    from trainbudget.model.transformer import build_model
    from trainbudget.train.checkpointing.checkpoint import load_file

    weights = load_file(ckpt.dir, WEIGHTS_FILE, map_location=device)
    if not isinstance(weights, dict) or not all(
        isinstance(t, torch.Tensor) for t in weights.values()
    ):
        raise CheckpointError(ckpt.dir / WEIGHTS_FILE, "is not a state dict of tensors")
    floats = [t.dtype for t in weights.values() if t.is_floating_point()]
    model = build_model(ckpt.spec, device=device, init=False, dtype=floats[0] if floats else None)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip()
        raise CheckpointError(ckpt.dir / WEIGHTS_FILE, f"does not fit its spec ({first})") from None
    model.eval()
    return model


def _load_sharded_model(ckpt: Checkpoint, device):
    """The model part of an FSDP2 run's dcp/ folder, the shards stitched into plain tensors by
    DCP in this process (no process group; the optimizer's state is not read)."""
    from trainbudget.model.transformer import build_model
    from trainbudget.train.checkpointing.sharded import load_sharded, model_dtype

    folder = ckpt.dir / DCP_DIR
    model = build_model(ckpt.spec, device=device, init=False, dtype=model_dtype(folder))
    load_sharded(folder, model)  # another model's keys or shapes: a CheckpointError
    model.eval()
    return model


def run(args: argparse.Namespace) -> int:
    from trainbudget.cli.interrupt import run_interruptible

    return run_interruptible("eval", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    ckpt = open_checkpoint(args.checkpoint)
    cfg = ckpt.config
    eval_cfg = SimpleNamespace(
        eval_batches=_setting(args.batches, "batches", cfg.get("eval_batches", 8)),
        micro_batch=_setting(args.micro_batch, "micro_batch", cfg.get("micro_batch", 16)),
        seq_len=_setting(args.seq_len, "seq_len", cfg.get("seq_len", 128)),
    )
    spec = ckpt.spec
    if spec.position == "learned" and eval_cfg.seq_len > spec.max_seq_len:
        raise SpecError(
            "seq_len", eval_cfg.seq_len, f"exceeds the model's max_seq_len ({spec.max_seq_len})"
        )
    data_dir = open_data_dir(ckpt, args.data)

    from trainbudget.train.data import RunData  # imports torch: only when run
    from trainbudget.train.evaluate import evaluate

    device = pick_device(args.device)
    data = RunData(data_dir)
    if data.vocab_size > spec.vocab_size:
        raise SpecError(
            "data",
            str(data_dir),
            f"has {data.vocab_size} token ids; the model knows {spec.vocab_size}",
        )
    model = load_model(ckpt, device)
    result = evaluate(model, data, eval_cfg, device)
    if not result:
        raise SpecError(
            "data",
            str(data_dir),
            f"has no held-out source of more than seq_len ({eval_cfg.seq_len}) tokens",
        )
    out = {
        "checkpoint": str(ckpt.dir),
        "step": ckpt.step,
        "data": str(data_dir),
        "device": str(device),
        "batches": eval_cfg.eval_batches,
        "micro_batch": eval_cfg.micro_batch,
        "seq_len": eval_cfg.seq_len,
        **_finite(result),
    }
    if args.json:
        print(dumps_json(out))
        return 0
    print(
        f"{ckpt.dir} (step {ckpt.step}) on {data_dir}: up to {eval_cfg.eval_batches} batches "
        f"of {eval_cfg.micro_batch} x {eval_cfg.seq_len} tokens per source"
    )
    print(
        f"val loss {result['val_loss']:.4f} nats/token, "
        f"perplexity {_perplexity(result['val_loss']):.2f}"
    )
    print(f"{'source':<24} {'loss':>8} {'perplexity':>11}")
    for name, loss in result["per_source"].items():
        print(f"{name:<24} {loss:>8.4f} {_perplexity(loss):>11.2f}")
    return 0


def _setting(text: str | None, field: str, default: int) -> int:
    return default if text is None else positive_int(field, text)


def _perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf


def _finite(value):
    """NaN and infinities (a diverged model) as null: --json output is strict JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
