"""`trainbudget train`: train the reference model with the budget on every log line. With no
arguments: a 1M-parameter byte-level GPT on the embedded corpus, on this machine's CPU or GPU.
Data-parallel: `torchrun --nproc-per-node N -m trainbudget.train [same options]`."""

from __future__ import annotations

import argparse
import os

from trainbudget.cli.args import dumps_json

# flag -> (config field, parser); None parser = a string kept as given
_FLAGS = {
    "--model": ("model", None),
    "--data": ("data", None),
    "--out": ("out", None),
    "--steps": ("steps", int),
    "--micro-batch": ("micro_batch", int),
    "--grad-accum": ("grad_accum", int),
    "--seq-len": ("seq_len", int),
    "--lr": ("lr", float),
    "--warmup-steps": ("warmup_steps", int),
    "--schedule": ("schedule", None),
    "--optimizer": ("optimizer", None),
    "--weight-decay": ("weight_decay", float),
    "--grad-clip": ("grad_clip", float),
    "--precision": ("precision", None),
    "--device": ("device", None),
    "--recompute": ("recompute", None),
    "--seed": ("seed", int),
    "--log-interval": ("log_interval", int),
    "--eval-interval": ("eval_interval", int),
    "--eval-batches": ("eval_batches", int),
    "--probes": ("probes", None),
    "--strategy": ("strategy", None),
}


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--config", metavar="FILE.toml", help="settings file; flags override it")
    for flag, (field, _) in _FLAGS.items():
        p.add_argument(flag, dest=field, help=f"config field {field}")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="FIELD=VALUE",
        help="override a model field (repeatable; replaces the default overrides)",
    )
    p.add_argument(
        "--resume", action="store_true", default=None, help="continue from <out>/checkpoint"
    )
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--no-tensorboard", dest="tensorboard", action="store_false", default=None)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def config_from_args(args: argparse.Namespace):
    from trainbudget.core.errors import SpecError
    from trainbudget.train.config import load_toml, make_config

    flags: dict = {}
    for field, parse in _FLAGS.values():
        value = getattr(args, field)
        if value is None or parse is None:
            flags[field] = value
            continue
        try:
            # range rules (positive, warmup <= steps, ...) are TrainConfig's, in one place
            flags[field] = parse(value)
        except ValueError:
            kind = "an integer" if parse is int else "a number"
            raise SpecError(field, value, f"must be {kind}") from None
    if args.overrides is not None:
        flags["overrides"] = tuple(args.overrides)
        if args.model is None:
            flags.setdefault("model", "gpt2")
    for field in ("resume", "compile", "tensorboard"):
        flags[field] = getattr(args, field)
    file_values = load_toml(args.config) if args.config else {}
    return make_config(file_values, flags)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    from trainbudget.train.loop import train  # imports torch: only when training

    summary = train(cfg)
    if os.environ.get("RANK", "0") != "0":
        return 0  # under torchrun only rank 0 reports
    if args.json:
        print(dumps_json(summary))
        return 0
    _print_summary(cfg, summary)
    return 0


def _print_summary(cfg, s: dict) -> None:
    def num(value, fmt: str, missing: str = "n/a") -> str:
        return missing if value is None else format(value, fmt)

    step, mem = s["step_seconds"], s["memory_bytes"]
    print(
        f"\n{cfg.steps} steps -> {cfg.out}: loss {num(s['loss_first_logged'], '.3f')} -> "
        f"{num(s['loss_final'], '.3f')} nats (unigram entropy of the corpus "
        f"{num(s['unigram_entropy_nats'], '.3f')})"
    )
    print(
        f"step time: measured {num(step['measured_median'], '.4g', 'n/a (one step)')} s, "
        f"predicted {num(step['predicted'], '.4g', 'n/a (no catalog peak)')} s; "
        f"{num(s['tokens_per_second'], ',.0f')} tokens/s"
    )
    if mem.get("measured_peak"):
        measured = f"{mem['measured_peak'] / 1e6:.1f} MB"
    elif mem.get("measured_peak_fake_tensors"):
        measured = f"{mem['measured_peak_fake_tensors'] / 1e6:.1f} MB (MemTracker, fake tensors)"
    else:
        measured = "n/a"
    print(f"peak memory: predicted {mem['predicted_peak'] / 1e6:.1f} MB, measured {measured}")
    for note in s["notes"]:
        print(f"note: {note}")
