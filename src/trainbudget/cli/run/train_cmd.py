"""`trainbudget train`: train the reference model with the budget on every log line. With no
arguments: a 1M-parameter byte-level GPT on the embedded corpus, on this machine's CPU or GPU.
Data-parallel: `torchrun --nproc-per-node N -m trainbudget train [same options]` (the
same CLI: torchrun starts `python -m trainbudget train ...` once per device)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from trainbudget.cli.args import dumps_json
from trainbudget.core.units import MB

# the flags, grouped for --help; each is its config field with "-" for "_" (--micro-batch)
GROUPS = {
    "model and data": ("model", "overrides", "data", "out", "seq_len"),
    "optimisation": (
        "steps",
        "micro_batch",
        "grad_accum",
        "lr",
        "min_lr_ratio",
        "warmup_steps",
        "schedule",
        "optimizer",
        "weight_decay",
        "grad_clip",
        "seed",
    ),
    "precision, device and parallelism": (
        "precision",
        "device",
        "recompute",
        "compile",
        "memory_check",
        "strategy",
        "zero_shard",
        "tp",
        "sequence_parallel",
        "cp",
        "ep",
        "pp",
        "pp_schedule",
        "vpp",
        "pp_layers",
        "plan",
        "collective_timeout_seconds",
    ),
    "checkpoints and faults": (
        "resume",
        "overwrite",
        "checkpoint_every",
        "checkpoint_minutes",
        "gpu_failure_rate_per_day",
        "keep",
        "on_nonfinite",
        "max_consecutive_skips",
        "spike_window",
        "spike_sigmas",
        "spike_min_excess",
        "max_rollbacks",
    ),
    "mixture of experts": ("moe_capacity_factor", "moe_balance_loss_coef", "moe_z_loss_coef"),
    "logging and evaluation": (
        "log_interval",
        "eval_interval",
        "eval_batches",
        "probes",
        "tensorboard",
    ),
}
_METAVARS = {"model": "M", "data": "DIR", "out": "DIR", "probes": "FILE", "plan": "FILE"}
_KIND_METAVARS = {"int": "N", "float": "X", "float | str": "{X,auto}"}


def _whole_number(text: str) -> int:
    """'1000', '-1', '1e3', '32e3', '4k': an integer as --set takes counts (core.units)."""
    from trainbudget.core.errors import SpecError
    from trainbudget.core.units import parse_int_count

    try:
        return int(text)
    except ValueError:
        pass
    try:
        return parse_int_count(text)
    except SpecError:
        raise ValueError(text) from None


_PARSE_RULES = {
    "int": (_whole_number, "must be an integer such as 1000, 1e3 or 4k"),
    "float": (float, "must be a number"),
    "float | str": (lambda v: v if v == "auto" else float(v), 'must be a number or "auto"'),
}


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    # the config module is pure and cheap (no torch): the help text is the fields' docstrings
    from trainbudget.train.spec.config import config_fields, field_docs
    from trainbudget.train.spec.config_checks import CHOICES

    fields, docs = config_fields(), field_docs()
    p.add_argument(
        "--config",
        metavar="FILE",
        help="settings file (.toml or .json, keys as the fields below with _); flags override it",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    for title, names in GROUPS.items():
        group = p.add_argument_group(title)
        for name in names:
            field = fields[name]
            text = _help(docs.get(name, ""), field.default)
            if name == "overrides":
                group.add_argument(
                    "--set",
                    dest="overrides",
                    action="append",
                    metavar="FIELD=VALUE",
                    help=text + "; repeatable",
                )
            elif field.type == "bool":
                group.add_argument(
                    _flag(name), dest=name, action=argparse.BooleanOptionalAction, help=text
                )
            else:
                choices = CHOICES.get(name)
                metavar = (
                    "{" + ",".join(choices) + "}"
                    if choices
                    else _METAVARS.get(name, _KIND_METAVARS.get(field.type, "TEXT"))
                )
                group.add_argument(_flag(name), dest=name, metavar=metavar, help=text)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(doc: str, default: object) -> str:
    if isinstance(default, tuple):
        shown = " ".join(default)
    elif default == "":
        shown = ""  # the docstring says what empty means
    else:
        shown = str(default).lower() if isinstance(default, bool) else str(default)
    text = f"{doc} (default: {shown})" if shown else doc
    return text.replace("%", "%%")  # argparse expands %-formats in help


def _given(args: argparse.Namespace) -> dict:
    """The fields set by flags (not given: absent), parsed to the field's type."""
    from trainbudget.core.errors import SpecError
    from trainbudget.train.spec.config import config_fields

    flags: dict = {}
    for name, field in config_fields().items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "overrides":
            flags[name] = tuple(value)
            continue
        parse, rule = _PARSE_RULES.get(field.type, (None, ""))
        try:
            # range rules (positive, warmup <= steps, ...) are TrainConfig's, in one place
            flags[name] = parse(value) if parse else value
        except ValueError:
            raise SpecError(name, value, rule) from None
    return flags


def config_and_given(args: argparse.Namespace):
    """(TrainConfig, the names of the fields the file or the flags set)."""
    from trainbudget.train.spec.config_files import load_config_file, make_config
    from trainbudget.train.spec.preflight import check_pipeline_processes

    file_values = load_config_file(args.config) if args.config else {}
    flags = _given(args)
    flags.update(capped_steps({**file_values, **flags}, os.environ))
    check_pipeline_processes({**file_values, **flags}.get("pp"))
    cfg = make_config(file_values, flags, source=args.config or "")
    return cfg, set(file_values) | set(flags)


MAX_STEPS_ENV = "TRAINBUDGET_MAX_STEPS"
"""Caps every run's steps (README, Training): the README's commands, which show the step counts
of real runs, then run in order in seconds (tests/test_readme_order.py)."""


def capped_steps(values: dict, environ) -> dict:
    """The flags that `MAX_STEPS_ENV` changes in `values` (the file's and the flags' settings):
    steps cut to the cap, and a warmup longer than that cut alike; said on stderr."""
    from trainbudget.core.errors import SpecError
    from trainbudget.train.spec.config import config_fields

    raw = environ.get(MAX_STEPS_ENV, "")
    if not raw:
        return {}
    try:
        cap = _whole_number(raw)
    except ValueError:
        cap = 0
    if cap < 1:
        raise SpecError(
            MAX_STEPS_ENV, raw, "must be a whole number >= 1 (the most steps a run takes)"
        )
    steps = values.get("steps", config_fields()["steps"].default)
    if not isinstance(steps, int) or steps <= cap:  # a bad value: TrainConfig names it
        return {}
    changed = {"steps": cap}
    warmup = values.get("warmup_steps")
    if isinstance(warmup, int) and warmup > cap:
        changed["warmup_steps"] = cap
    if environ.get("RANK", "0") == "0":
        sys.stderr.write(f"trainbudget train: {MAX_STEPS_ENV}={raw}: {steps} steps cut to {cap}\n")
    return changed


def config_from_args(args: argparse.Namespace):
    return config_and_given(args)[0]


def run(args: argparse.Namespace) -> int:
    from trainbudget.train.spec.preflight import preflight

    cfg, given = config_and_given(args)
    # every check that needs no torch, before anything is written
    cfg = preflight(cfg, explicit=given).config
    from trainbudget.train.launch.launch_env import read_launch_env

    read_launch_env(os.environ)  # a bad launch environment: one line, before torch loads
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 holds the run's lock
        from trainbudget.train.launch.run_lock import refuse_if_locked

        refuse_if_locked(cfg.run_dir, cfg.out)  # a busy folder: seconds before torch loads
    # a few seconds of silence otherwise; not said where torch is missing (one error line)
    if os.environ.get("RANK", "0") == "0" and importlib.util.find_spec("torch") is not None:
        sys.stderr.write("trainbudget train: loading PyTorch\n")
        sys.stderr.flush()
    from trainbudget.train.launch.exits import RanksLost, abandon, interrupted_line

    try:
        from trainbudget.train.checkpointing.recovery import Interrupted, TrainingHalted
        from trainbudget.train.loop import train  # imports torch: only when training

        try:
            summary = train(cfg)
        except TrainingHalted as err:
            sys.stderr.write(f"trainbudget train: halted: {err}\n")
            return 1
        except Interrupted as err:
            sys.stderr.write(f"trainbudget train: {err}\n")
            return 128 + err.signum  # the shell's convention for a process ended by a signal
    except KeyboardInterrupt as err:  # Ctrl-C in start-up, or a second signal
        line, code = interrupted_line(err)
        return abandon(f"trainbudget train: {line}", code)
    except RanksLost as err:  # the ranks could not meet, or lost each other
        return abandon(f"trainbudget train: {err}", err.exit_code)
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
    print(f"predictions for the layout that ran: {s['plan']} (memory per rank)")
    print(
        f"step time: measured {num(step['measured_median'], '.4g', 'n/a (one step)')} s, "
        f"predicted {num(step['predicted'], '.4g', 'n/a (no catalog peak)')} s; "
        f"{num(s['tokens_per_second'], ',.0f')} tokens/s"
    )
    print(f"peak memory: predicted {mem['predicted_peak'] / MB:.1f} MB, measured {_peak(s)}")
    for note in s["notes"]:
        print(f"note: {note}")


def _peak(s: dict) -> str:
    """The measured peak as summary.json holds it: the CUDA allocator's, MemTracker's on fake
    tensors, or else the largest of the ranks' own measurements (and which rank)."""
    mem = s["memory_bytes"]
    if mem.get("measured_peak"):
        return f"{mem['measured_peak'] / MB:.1f} MB"
    if mem.get("measured_peak_fake_tensors"):
        return f"{mem['measured_peak_fake_tensors'] / MB:.1f} MB (MemTracker, fake tensors)"
    ranks = s.get("peak_memory_bytes_per_rank", {}).get("ranks", [])
    measured = [r for r in ranks if r.get("peak_bytes_measured") is not None]
    if not measured:
        return "n/a"
    top = max(measured, key=lambda r: r["peak_bytes_measured"])
    return (
        f"{top['peak_bytes_measured'] / MB:.1f} MB on rank {top['rank']}, the largest of "
        f"{len(measured)} rank(s)" + (f" ({top['instrument']})" if top.get("instrument") else "")
    )
