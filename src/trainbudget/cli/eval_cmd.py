"""`trainbudget eval --checkpoint RUN_DIR`: validation loss and perplexity of a trained model,
overall and per source, on the held-out split its run trained beside (or --data). The model is
rebuilt from checkpoint/state.json (spec and config) and its weights are read with
torch.load(weights_only=True). torch is imported inside run() only.

`open_checkpoint` and `open_data_dir` are shared with `trainbudget sample`."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from trainbudget.cli.args import dumps_json, positive_int
from trainbudget.core.errors import SpecError

STATE_FILE = "state.json"
WEIGHTS_FILE = "model.pt"


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="a run directory from `trainbudget train --out`, or its checkpoint/ folder",
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
    """The checkpoint folder (holding state.json and model.pt)."""
    run_dir: Path
    step: int
    config: dict
    spec: object  # ModelSpec


def open_checkpoint(arg: str) -> Checkpoint:
    """A run directory or its checkpoint/ folder, checked; torch is not needed yet."""
    from trainbudget.core.model_spec import ModelSpec

    path = Path(arg)
    if not path.exists():
        raise SpecError("checkpoint", arg, "no such directory")
    if not path.is_dir():
        raise SpecError("checkpoint", arg, "is not a directory (give the run's --out folder)")
    if (path / STATE_FILE).is_file():
        ckpt = path
    elif (path / "checkpoint" / STATE_FILE).is_file():
        ckpt = path / "checkpoint"
    else:
        raise SpecError(
            "checkpoint",
            arg,
            "is not a run directory or its checkpoint/ (no checkpoint/state.json: "
            "training writes it when it finishes)",
        )
    if not (ckpt / WEIGHTS_FILE).is_file():
        raise SpecError("checkpoint", str(ckpt), f"has no {WEIGHTS_FILE}")
    try:
        state = json.loads((ckpt / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError("checkpoint", str(ckpt / STATE_FILE), f"cannot be read ({err})") from None
    if not isinstance(state, dict):
        raise SpecError("checkpoint", str(ckpt / STATE_FILE), "is not a JSON object")
    for key in ("step", "config", "spec"):
        if key not in state:
            raise SpecError(f"{ckpt / STATE_FILE}: {key}", None, "is missing")
    try:
        spec = ModelSpec(**state["spec"])
    except (TypeError, ValueError) as err:
        raise SpecError(f"{ckpt / STATE_FILE}: spec", "...", f"is not a model ({err})") from None
    return Checkpoint(ckpt, ckpt.parent, int(state["step"]), state["config"], spec)


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
    import torch

    from trainbudget.model.transformer import build_model

    try:
        weights = torch.load(ckpt.dir / WEIGHTS_FILE, weights_only=True, map_location=device)
    except Exception as err:  # unpickling raises many types
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SpecError(
            "checkpoint", str(ckpt.dir / WEIGHTS_FILE), f"cannot be read ({first})"
        ) from None
    floats = [t.dtype for t in weights.values() if t.is_floating_point()]
    model = build_model(ckpt.spec, device=device, init=False, dtype=floats[0] if floats else None)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip()
        raise SpecError(
            "checkpoint", str(ckpt.dir / WEIGHTS_FILE), f"does not fit its spec ({first})"
        ) from None
    model.eval()
    return model


def run(args: argparse.Namespace) -> int:
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
