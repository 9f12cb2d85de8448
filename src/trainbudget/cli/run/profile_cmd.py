"""`trainbudget profile`: the core's prediction next to what PyTorch measures for one training
step of the reference model (fake tensors by default: no GPU needed)."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from trainbudget.cli.args import add_model_args, add_optimizer_arg, dumps_json, positive_int
from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import DEFAULT_PRECISION
from trainbudget.core.spec.model_source.model_arg import resolve_model
from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import format_bytes
from trainbudget.profile.device import check_device_name
from trainbudget.train.observe.startup import Say

REAL_DEVICES = ("cpu", "cuda")  # real steps, timed; the others run on fake tensors
MAX_PROFILE_LAYERS = 128
"""The most layers profiled without --allow-large: the work grows with the layers (measured,
about 0.3 s a layer on fake tensors on a 2-core CPU, seq_len 16), and every preset has fewer
(llama-3-405b: 126)."""


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_model_args(p)
    p.add_argument("--micro-batch", default="1", help="sequences per step (default 1)")
    p.add_argument("--seq-len", help="tokens per sequence (default: min(max_seq_len, 1024))")
    p.add_argument(
        "--precision",
        default=DEFAULT_PRECISION,
        help=f"fp32 | bf16-mixed | bf16 (default {DEFAULT_PRECISION}, as estimate and plan)",
    )
    add_optimizer_arg(p, trainable_only=True)
    p.add_argument(
        "--recompute",
        default="none",
        choices=("none", "full"),
        help="activation recomputation (default none)",
    )
    p.add_argument(
        "--device",
        default="fake-cpu",
        help="fake-cpu (default: fake tensors, any machine) | fake-cuda (needs a "
        "CUDA build) | cpu | cuda (real steps, also timed; each phase is said on stderr as "
        "it starts)",
    )
    p.add_argument(
        "--allow-large",
        action="store_true",
        help=f"profile a model of more than {MAX_PROFILE_LAYERS} layers (the time grows with "
        "each layer)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _check_size(model: ModelSpec, allow_large: bool) -> None:
    """A bound on the work, stated: `--set n_layers=100000` would run for days, silently."""
    if model.n_layers > MAX_PROFILE_LAYERS and not allow_large:
        raise SpecError(
            "n_layers",
            model.n_layers,
            f"profiling steps every layer, so at most {MAX_PROFILE_LAYERS} (every preset "
            "fits); give --allow-large to profile it anyway",
        )


def run(args: argparse.Namespace) -> int:
    model = resolve_model(args.model, args.overrides)
    if not isinstance(model, ModelSpec):
        raise SpecError("--model", args.model, "profiling needs an architecture, not dense:N")
    seq_len = (
        positive_int("seq_len", args.seq_len) if args.seq_len else min(model.max_seq_len, 1024)
    )
    micro_batch = positive_int("micro_batch", args.micro_batch)
    _check_size(model, args.allow_large)
    check_device_name(args.device)  # a name it does not know: refused before torch loads
    if model.is_moe and args.device not in REAL_DEVICES:
        raise SpecError(
            "--device",
            args.device,
            "a MoE model needs real tensors (its routing reads values: torch.nonzero has no "
            "fake shape); use --device cpu at a small size, or cuda",
        )
    # real steps take minutes on a CPU: say each phase as it starts (on a terminal, always)
    say = Say(command="profile", enabled=args.device in REAL_DEVICES or sys.stderr.isatty())
    if importlib.util.find_spec("torch") is not None:  # else: one line, the install hint
        say("loading PyTorch")
    from trainbudget.profile.memory import check_device  # imports torch: only when run

    check_device(args.device)  # one this torch cannot use (no CUDA)
    from trainbudget.profile.report import KEYS, profile_step

    out = profile_step(
        model,
        micro_batch=micro_batch,
        seq_len=seq_len,
        precision=args.precision,
        optimizer=args.optimizer,
        recompute=args.recompute,
        device=args.device,
        time_it=args.device in REAL_DEVICES,
        progress=say,
    )
    say("done")
    if args.json:
        print(dumps_json(out))
        return 0
    print(
        f"{out['model']}: micro-batch {out['micro_batch']} x {seq_len} tokens, "
        f"{out['precision']}, {out['optimizer']}, recompute {out['recompute']}, on "
        f"{out['device']} (peak at {out['peak_phase']})"
    )
    print(f"{'':<15} {'predicted':>14} {'measured':>14} {'error':>8}")
    for key in KEYS:
        pred, meas = out["predicted"][key], out["measured"][key]
        fmt = (lambda v: f"{v:.4g}") if key == "flops_per_step" else format_bytes
        print(f"{key:<15} {fmt(pred):>14} {fmt(meas):>14} {100 * out['error'][key]:>+7.2f}%")
    if "step_seconds" in out:
        print(f"step {out['step_seconds']:.4g} s; {out['achieved_flops_per_second']:.4g} FLOP/s")
    if "phases_seconds" in out:
        _print_phases(out)
    return 0


def _print_phases(out: dict) -> None:
    """Phase times (synchronised at every boundary), then MFU and allocator peaks on CUDA."""
    total = out["phases_total_seconds"]
    print(f"{'phase':<15} {'ms':>14} {'share':>14}")
    for phase, seconds in out["phases_seconds"].items():
        share = f"{100 * seconds / total:.1f}%" if total > 0 else "-"
        print(f"{phase:<15} {1e3 * seconds:>14.4g} {share:>14}")
    print(f"{'total (synced)':<15} {1e3 * total:>14.4g}")
    if "mfu" in out:
        mfu = "n/a" if out["mfu"] is None else f"{100 * out['mfu']:.1f}%"
        key = out.get("catalog_key") or "no catalog row"
        print(f"MFU {mfu} ({out.get('device_name')}, {key})")
    if "max_memory_allocated" in out:
        print(
            f"max memory allocated {format_bytes(out['max_memory_allocated'])}, reserved "
            f"{format_bytes(out.get('max_memory_reserved', 0))}"
        )
