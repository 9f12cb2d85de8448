"""`trainbudget report`: one self-contained HTML page with plots, for a planned run
(`--model ...`, the same flags as `plan`) or for a training run directory (`--run DIR`).
matplotlib is imported only when drawing; the PNGs are also written beside the page."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainbudget.cli.args import (
    add_causal_args,
    add_framework_arg,
    add_optimizer_arg,
    dumps_json,
    duration_seconds,
    framework_from_args,
    money,
    positive_int,
    token_count,
)
from trainbudget.cli.plan.plan_view import add_cluster_args, cluster_from_args, efficiency_from_args
from trainbudget.cli.plan.question import (
    SEQ_LEN_HELP,
    add_policy_args,
    policy_from_args,
    seq_len_from_args,
)
from trainbudget.cli.tools.reliability_cmd import parse_probability
from trainbudget.cli.tools.reliability_view import add_reliability_options
from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import DEFAULT_GPU
from trainbudget.core.units import GB, parse_bandwidth

# Llama 3 405B saw 419 unexpected interruptions in 54 days on 16,384 H100s (Dubey et al. 2024,
# arXiv 2407.21783, Sec. 3.3.4): 4.7e-4 per GPU-day, the failure rate used when none is given
DEFAULT_GPU_FAILURE_RATE_PER_DAY = 419 / (54 * 16384)
DEFAULT_CHECKPOINT_WRITE_BYTES_PER_SECOND = 50 * GB
# options a --run report has no use for: given with --run they are an error, not ignored
PLAN_ONLY = (
    "gpus",
    "global_batch",
    "seq_len",
    "tokens",
    "price_per_gpu_hour",
    "scaling_gpus",
    "calibration",
    "gpu_failure_rate_per_day",
    "checkpoint_write_bytes_per_second",
)


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    what = p.add_argument_group("what to report on (one of)")
    what.add_argument("--model", metavar="M", help="a planned run: a preset or a config.json path")
    what.add_argument("--run", metavar="DIR", help="a run directory from `trainbudget train --out`")
    p.add_argument("--out", default="report.html", help="the HTML file (default report.html)")
    p.add_argument("--png-dir", help="where the PNGs go too (default: OUT's name + _files/)")
    p.add_argument("--json", action="store_true", help="print the gathered numbers as JSON")
    g = p.add_argument_group("planned run (with --model; the flags of `trainbudget plan`)")
    g.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a model field, e.g. --set n_layers=40 (repeatable)",
    )
    g.add_argument("--gpus", help="GPUs in the cluster")
    g.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        help=f"accelerator (default {DEFAULT_GPU}; see `trainbudget hardware`)",
    )
    g.add_argument(
        "--global-batch",
        help="sequences per optimizer step (default: about 4M tokens, a power of two: 512 "
        "sequences of 8192)",
    )
    g.add_argument("--seq-len", help=SEQ_LEN_HELP)
    g.add_argument("--tokens", help="training tokens, e.g. 15T")
    g.add_argument("--precision", default="bf16-mixed", help="precision policy")
    add_optimizer_arg(g)
    add_framework_arg(g)
    add_causal_args(g)
    g.add_argument("--top", default="5", help="candidate layouts shown (default 5)")
    g.add_argument("--price-per-gpu-hour", help="price of one GPU-hour: cost besides GPU-hours")
    g.add_argument(
        "--scaling-gpus", help="GPU counts of the scaling curve (default: GPUS x 1/16 ... 16)"
    )
    add_cluster_args(g)
    add_reliability_options(p)
    add_policy_args(p.add_argument_group("layout search (as in `trainbudget plan`)"))


def run(args: argparse.Namespace) -> int:
    from trainbudget.report.page import check_out

    if (args.model is None) == (args.run is None):
        raise SpecError(
            "--model/--run",
            args.model or args.run,
            "give exactly one: --model M ... for a planned run, or --run DIR for a training run",
        )
    if args.run is not None:
        for name in PLAN_ONLY:
            if getattr(args, name) is not None:
                raise SpecError(
                    f"--{name.replace('_', '-')}",
                    getattr(args, name),
                    "is for --model reports; a --run report reads everything from the run",
                )
        check_out(Path(args.out), _png_dir(args))
        return _run_report(args)
    check_out(Path(args.out), _png_dir(args))
    return _plan_report(args)


def _failure_inputs(args: argparse.Namespace) -> tuple[float, float, list[str]]:
    """(GPU failure rate per day, checkpoint write bytes/s, notes on the defaults used)."""
    notes = []
    rate = args.gpu_failure_rate_per_day
    if rate is None:
        rate = DEFAULT_GPU_FAILURE_RATE_PER_DAY
        notes.append(
            f"GPU failure rate {rate:.3g} per GPU-day (default: Llama 3 405B's 419 unexpected "
            "interruptions in 54 days on 16,384 H100s, arXiv 2407.21783 Sec. 3.3.4); set "
            "--gpu-failure-rate-per-day"
        )
    else:
        rate = parse_probability("gpu_failure_rate_per_day", rate)
    write = args.checkpoint_write_bytes_per_second
    if write is None:
        write = DEFAULT_CHECKPOINT_WRITE_BYTES_PER_SECOND
        notes.append(
            f"checkpoint write bandwidth {write / GB:g} GB/s for the whole job (default, not "
            "measured); set --checkpoint-write-bytes-per-second"
        )
    else:
        write = parse_bandwidth(write, "checkpoint_write_bytes_per_second")
        if write <= 0:
            raise SpecError("checkpoint_write_bytes_per_second", write, "must be positive")
    return rate, write, notes


def _question(args: argparse.Namespace):
    from trainbudget.core.spec.hardware import get_hardware
    from trainbudget.core.spec.model_source.model_arg import resolve_model
    from trainbudget.core.spec.model_spec import ModelSpec
    from trainbudget.core.spec.precision import get_optimizer, get_precision
    from trainbudget.report.plan_data import PlanQuestion

    for flag in ("gpus", "tokens"):
        if getattr(args, flag) is None:
            raise SpecError(f"--{flag}", None, "is needed with --model")
    model = resolve_model(args.model, args.overrides)
    if not isinstance(model, ModelSpec):
        raise SpecError("--model", args.model, "the report needs an architecture, not dense:N")
    hardware = get_hardware(args.gpu)
    seq_len = seq_len_from_args(args, model).value
    rate, write, notes = _failure_inputs(args)
    global_batch, batch_note = _global_batch(args, seq_len)
    notes += batch_note
    scaling = ()
    if args.scaling_gpus is not None:
        scaling = tuple(positive_int("scaling_gpus", s) for s in args.scaling_gpus.split(","))
    price = None
    if args.price_per_gpu_hour is not None:
        price = money("price_per_gpu_hour", args.price_per_gpu_hour)
    return PlanQuestion(
        model=model,
        cluster=cluster_from_args(args, hardware, positive_int("gpus", args.gpus)),
        tokens=token_count("tokens", args.tokens),
        global_batch=global_batch,
        seq_len=seq_len,
        precision=get_precision(args.precision),
        optimizer=get_optimizer(args.optimizer),
        framework=framework_from_args(args),
        policy=policy_from_args(args),
        efficiency=efficiency_from_args(args, hardware),
        efficiency_source=(
            f"the calibration file {args.calibration}"
            if args.calibration
            else "the defaults of core.step_time.Efficiency"
        ),
        top=positive_int("top", args.top),
        causal=args.causal,
        count_causal=args.count_causal,
        price_per_gpu_hour=price,
        gpu_failure_rate_per_day=rate,
        checkpoint_write_bytes_per_second=write,
        restart_seconds=duration_seconds("restart_seconds", args.restart_seconds),
        scaling_gpus=scaling,
        measured=_measured(args.calibration),
        notes=tuple(notes),
    )


def _global_batch(args: argparse.Namespace, seq_len: int) -> tuple[int, list[str]]:
    """--global-batch, or the shared default (core.spec.defaults) and a note saying so."""
    from trainbudget.cli.plan.question import global_batch_from_args

    batch = global_batch_from_args(args, seq_len)
    notes = (
        [] if args.global_batch is not None else [f"global batch {batch.value:,}: {batch.source}"]
    )
    return batch.value, notes


def _measured(path: str | None):
    if path is None:
        return None
    from trainbudget.core.parallel.timing.calibration import load_calibration
    from trainbudget.report.roofline_data import MeasuredRoofline

    cal = load_calibration(path)
    return MeasuredRoofline(
        source=Path(path).name,
        device_name=cal.device_name,
        best_flops_per_second=dict(cal.best_flops_per_second),
        bandwidth_bytes_per_second=cal.bandwidth_bytes_per_second,
    )


def _png_dir(args: argparse.Namespace) -> Path | None:
    return Path(args.png_dir) if args.png_dir else None


def _plan_report(args: argparse.Namespace) -> int:
    question = _question(args)
    from trainbudget.report.figures import require_matplotlib

    require_matplotlib()
    from trainbudget.report.page import write_report
    from trainbudget.report.plan_charts import plan_charts
    from trainbudget.report.plan_data import as_json, plan_report
    from trainbudget.report.plan_page import headline, plan_page

    report = plan_report(question)
    charts = plan_charts(report)
    out = Path(args.out)
    pngs = write_report(out, plan_page(report, charts), charts, _png_dir(args))
    if args.json:
        doc = {"out": str(out), "png_files": [str(p) for p in pngs], "report": as_json(report)}
        print(dumps_json(doc))
        return 0
    print(headline(report)[1])
    print(f"framework {report.framework}")
    print(f"wrote {out} ({len(pngs)} plots, also as PNG files in {pngs[0].parent})")
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from trainbudget.train.spec.run_files import read_run

    report = read_run(args.run)  # bad input fails here, before matplotlib is imported
    from trainbudget.report.figures import require_matplotlib

    require_matplotlib()
    from trainbudget.report.page import write_report
    from trainbudget.report.plan_data import as_json
    from trainbudget.report.run_charts import run_charts
    from trainbudget.report.run_page import run_headline, run_page

    charts = run_charts(report)
    out = Path(args.out)
    pngs = write_report(out, run_page(report, charts), charts, _png_dir(args))
    if args.json:
        doc = {"out": str(out), "png_files": [str(p) for p in pngs], "report": as_json(report)}
        print(dumps_json(doc))
        return 0
    print(run_headline(report))
    if report.skipped:  # a damaged metrics.jsonl: its valid prefix was drawn
        print(f"note: {report.skipped}")
    print(f"wrote {out} ({len(pngs)} plots, also as PNG files in {pngs[0].parent})")
    return 0
