"""Run the profile matrix for real on a CUDA GPU: predicted vs measured peak memory, step time, MFU.

    python scripts/gpu_validate.py [--quick] [--limit N] [--dtype fp32|bf16-mixed] [--out DIR]
    python scripts/gpu_validate.py --device cpu --quick --limit 2   # development mode, no GPU

Per case of trainbudget.profile.matrix (32 cases; 8 with --quick):

- peak memory: the core's prediction (core.peak_memory.training_peak) against
  torch.cuda.max_memory_allocated over one training step (peak statistics reset after a warm-up
  step that creates the optimizer state; what was allocated before the model was built is
  subtracted), and against MemTracker's peak of the step on the same device
  (profile.memory.measure_step_memory);
- step time: core.step_time on one GPU of the device's catalog row (plan dp=1, the case's
  micro-batch and recomputation, flash attention) against the median of timed steps
  (profile.memory.time_steps: warm-up steps dropped, synchronised once per step);
- MFU: model FLOPs (3 x forward, the core's convention) / measured step time / the catalog's
  dense peak for the precision's compute dtype.

Development mode (--device cpu) runs the same code on the CPU, without CUDA allocator
statistics, and without step-time prediction or MFU unless --hardware names a catalog row to
predict against. --set FIELD=VALUE shrinks every case's model so CI runs it in seconds.

Nothing is downloaded: models are built from their specs with seeded random weights, and
batches are random token ids.

Exit status: 0 every case measured; 1 some case failed (its error is in the table and the
JSON); 2 no CUDA device (or no PyTorch) or an unknown --hardware key, with a one-line message.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainbudget.core.parallel.cluster import Cluster
from trainbudget.core.parallel.plan import Plan, validate_plan
from trainbudget.core.parallel.timing.step_time import step_time
from trainbudget.core.single.flops import training_flops
from trainbudget.core.single.peak_memory import training_peak
from trainbudget.core.spec.hardware import HARDWARE, Hardware
from trainbudget.core.spec.model_source.model_arg import apply_overrides
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.profile.matrix import Case, matrix

FORMAT = "trainbudget-gpu-validate"
VERSION = 1
PRECISIONS = ("fp32", "bf16-mixed")

# --quick: 8 cases, ordered by size so that --limit keeps the cheapest. Each model gets every
# shape and every (precision, optimizer + recompute) pair once; at each shape the two models
# take different pairs, so --limit 2 already covers both models, precisions and optimizers.
QUICK = (
    ("gpt2-2l", 1, 128, "fp32", "adamw"),
    ("llama-small", 1, 128, "bf16-mixed", "sgd"),
    ("gpt2-2l", 2, 512, "bf16-mixed", "sgd"),
    ("llama-small", 2, 512, "fp32", "adamw"),
    ("gpt2-2l", 4, 1024, "bf16-mixed", "adamw"),
    ("llama-small", 4, 1024, "fp32", "sgd"),
    ("gpt2-2l", 8, 2048, "fp32", "sgd"),
    ("llama-small", 8, 2048, "bf16-mixed", "adamw"),
)

ASSUMED_FLOPS_PER_SECOND = {"cpu": 2e11, "cuda": 1e14}
"""Model FLOP/s (steps and set-up together) assumed for the estimate printed before the first
case; after each case the estimate uses the rate measured so far. cpu: the full matrix (3.9e14
model FLOPs at 5 + 2 steps) took 30-40 minutes on a CPU (issue "A trainer a newcomer can
walk"), about 2e11 FLOP/s; cuda: about a tenth of an H100's dense bf16 peak (small cases)."""

ERROR_KEYS = {
    "allocated_error": "peak vs max_memory_allocated",
    "memtracker_error": "peak vs MemTracker",
    "step_time_error": "step time",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cuda (default) | cpu: development mode, the same code path on the CPU",
    )
    p.add_argument("--quick", action="store_true", help="8 cases instead of 32")
    p.add_argument("--limit", type=int, metavar="N", help="run only the first N cases")
    p.add_argument("--dtype", choices=PRECISIONS, help="only cases of this precision")
    p.add_argument("--out", type=Path, metavar="DIR", help="write gpu_validate.{md,json} here")
    p.add_argument("--steps", type=int, default=5, help="timed steps per case (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps (default 2)")
    p.add_argument(
        "--hardware",
        metavar="KEY",
        help="catalog row to predict step time and MFU against (default: the device's own; "
        "needed on a device not in the catalog and on the CPU)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of every case's model, e.g. --set n_layers=1 (repeatable)",
    )
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be >= 1")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


def select_cases(
    *,
    quick: bool = False,
    dtype: str | None = None,
    limit: int | None = None,
    overrides: Sequence[str] = (),
) -> list[Case]:
    """The matrix (or its --quick subset), filtered by precision, cut to `limit`, with every
    model's fields overridden."""
    cases = matrix()
    if quick:
        by_key = {
            (c.spec.name, c.micro_batch, c.seq_len, c.precision, c.optimizer): c for c in cases
        }
        cases = [by_key[k] for k in QUICK]
    if dtype is not None:
        cases = [c for c in cases if c.precision == dtype]
    if limit is not None:
        cases = cases[:limit]
    if overrides:
        cases = [dataclasses.replace(c, spec=apply_overrides(c.spec, overrides)) for c in cases]
    return cases


def _error(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return measured / predicted - 1


def _free_cuda() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cuda_step_peak(case: Case, device: str) -> tuple[int, int, int]:
    """(max_memory_allocated over one training step minus the bytes allocated before the model
    existed, max_memory_reserved, those bytes). The step follows a warm-up step, after which
    the peak statistics are reset, so the optimizer state exists throughout, as predicted."""
    import torch

    from trainbudget.model.optim import make_optimizer, weight_dtype
    from trainbudget.model.transformer import build_model
    from trainbudget.profile.memory import _train_step  # the step MemTracker measures

    _free_cuda()
    baseline = torch.cuda.memory_allocated()
    model = build_model(
        case.spec, device=device, recompute=case.recompute, dtype=weight_dtype(case.precision)
    )
    model.train()
    opt = make_optimizer(model, precision=case.precision, optimizer=case.optimizer)
    idx = torch.randint(0, case.spec.vocab_size, (case.micro_batch, case.seq_len), device=device)
    _train_step(model, opt, idx)  # warm-up: optimizer state, cuBLAS workspaces
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _train_step(model, opt, idx)
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    del model, opt, idx
    _free_cuda()
    return allocated - baseline, reserved, baseline


def predict_step(case: Case, hw: Hardware) -> dict:
    """core.step_time for one GPU of `hw`: plan dp=1, the case's micro-batch, flash attention."""
    prec = get_precision(case.precision)
    if prec.compute_dtype not in hw.dense_flops_per_second:
        return {}
    plan = Plan(dp=1, micro_batch=case.micro_batch, recompute=case.recompute, flash_attention=True)
    validate_plan(plan, case.spec, n_gpus=1, seq_len=case.seq_len)
    st = step_time(
        case.spec,
        plan,
        Cluster(hardware=hw, n_gpus=1),
        seq_len=case.seq_len,
        precision=prec,
        optimizer=get_optimizer(case.optimizer),
    )
    return {
        "predicted_step_seconds": st.step_seconds,
        "predicted_mfu": st.mfu,
        "peak_flops_per_second": st.peak_flops_per_second,
    }


def case_flops(case: Case, *, steps: int, warmup: int) -> float:
    """The model FLOPs a case runs (its warm-up and timed steps, and the MemTracker step): its
    weight in the duration estimate."""
    per_token = training_flops(case.spec, case.seq_len).model_flops_per_token
    return per_token * case.seq_len * case.micro_batch * (steps + warmup + 1)


def duration_text(seconds: float) -> str:
    """'45s', '12m05s', '1h02m'."""
    minutes, secs = divmod(int(seconds), 60)
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def eta_text(done_flops: float, left_flops: float, elapsed_seconds: float) -> str:
    """The time spent and left, the rest at the rate measured so far."""
    left = left_flops * elapsed_seconds / done_flops if done_flops else 0.0
    return f"{duration_text(elapsed_seconds)} elapsed, about {duration_text(left)} left"


def run_case(case: Case, *, device: str, hw: Hardware | None, steps: int, warmup: int) -> dict:
    """Every figure of one case; a case that fails records its error instead."""
    from trainbudget.profile.memory import measure_step_memory, time_steps

    kw = {
        "micro_batch": case.micro_batch,
        "seq_len": case.seq_len,
        "precision": case.precision,
        "optimizer": case.optimizer,
        "recompute": case.recompute,
    }
    row: dict = {"case": case.id, "model": case.spec.name, **kw}
    try:
        predicted_peak = training_peak(case.spec, **kw).total_bytes
        row["predicted_peak_bytes"] = predicted_peak
        if device == "cuda":
            allocated, reserved, baseline = cuda_step_peak(case, device)
            row["max_memory_allocated_bytes"] = allocated
            row["max_memory_reserved_bytes"] = reserved
            row["allocated_before_bytes"] = baseline
            row["allocated_error"] = _error(allocated, predicted_peak)
        mem = measure_step_memory(case.spec, device=device, **kw)
        row["memtracker_peak_bytes"] = mem.peak
        row["memtracker_error"] = _error(mem.peak, predicted_peak)
        _free_cuda()
        seconds, _ = time_steps(case.spec, device=device, steps=steps, warmup=warmup, **kw)
        _free_cuda()
        row["measured_step_seconds"] = seconds
        model_flops = training_flops(case.spec, case.seq_len).model_flops_per_token * (
            case.seq_len * case.micro_batch
        )
        row["model_flops_per_step"] = model_flops
        row["achieved_model_flops_per_second"] = model_flops / seconds
        if hw is not None:
            pred = predict_step(case, hw)
            row.update(pred)
            row["step_time_error"] = _error(seconds, pred.get("predicted_step_seconds"))
            peak = pred.get("peak_flops_per_second")
            row["mfu"] = None if peak is None else model_flops / seconds / peak
    except Exception as err:  # one case's failure (e.g. out of memory) must not end the run
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        _free_cuda()
    return row


def summarise(rows: Sequence[dict]) -> dict:
    """Per error figure: cases, mean and max |error| and the worst case; MFU mean/min/max."""
    out: dict = {"cases": len(rows), "failed": [r["case"] for r in rows if "error" in r]}
    for key in ERROR_KEYS:
        have = [r for r in rows if r.get(key) is not None]
        if have:
            worst = max(have, key=lambda r: abs(r[key]))
            out[key] = {
                "n": len(have),
                "mean_abs": statistics.fmean(abs(r[key]) for r in have),
                "max_abs": abs(worst[key]),
                "worst_case": worst["case"],
            }
    mfus = [r["mfu"] for r in rows if r.get("mfu") is not None]
    if mfus:
        out["mfu"] = {
            "n": len(mfus),
            "mean": statistics.fmean(mfus),
            "min": min(mfus),
            "max": max(mfus),
        }
    return out


def summary_lines(summary: dict) -> list[str]:
    lines = []
    for key, label in ERROR_KEYS.items():
        s = summary.get(key)
        if s:
            lines.append(
                f"{label}: mean |error| {100 * s['mean_abs']:.2f} %, max {100 * s['max_abs']:.2f} "
                f"% ({s['worst_case']}) over {s['n']} cases"
            )
    if "mfu" in summary:
        m = summary["mfu"]
        lines.append(
            f"MFU: mean {100 * m['mean']:.3g} %, min {100 * m['min']:.3g} %, max "
            f"{100 * m['max']:.3g} % over {m['n']} cases"
        )
    if summary["failed"]:
        lines.append(f"failed: {len(summary['failed'])} case(s): {', '.join(summary['failed'])}")
    return lines


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1e3 * v:.4g}"


def render_markdown(header: Sequence[str], rows: Sequence[dict], summary: dict) -> str:
    lines = ["# trainbudget GPU validation", "", *(f"- {h}" for h in header), ""]
    lines += [
        "| case | predicted peak MB | max allocated MB | error | MemTracker MB | error | "
        "predicted step ms | measured step ms | error | MFU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | failed: {r['error'].replace('|', '/')} |||||||||")
            continue
        mfu = r.get("mfu")
        lines.append(
            f"| {r['case']} | {_mb(r.get('predicted_peak_bytes'))} | "
            f"{_mb(r.get('max_memory_allocated_bytes'))} | {_pct(r.get('allocated_error'))} | "
            f"{_mb(r.get('memtracker_peak_bytes'))} | {_pct(r.get('memtracker_error'))} | "
            f"{_ms(r.get('predicted_step_seconds'))} | {_ms(r.get('measured_step_seconds'))} | "
            f"{_pct(r.get('step_time_error'))} | "
            f"{'-' if mfu is None else f'{100 * mfu:.3g} %'} |"
        )
    lines += ["", *summary_lines(summary), ""]
    return "\n".join(lines)


def run_cases(cases: Sequence[Case], args: argparse.Namespace, hw: Hardware | None) -> list[dict]:
    """Every case, with the estimated duration before the first and a line after each (its
    figures, the time spent and the time left)."""
    flops = [case_flops(c, steps=args.steps, warmup=args.warmup) for c in cases]
    rate = ASSUMED_FLOPS_PER_SECOND[args.device]
    print(
        f"estimated duration: about {duration_text(sum(flops) / rate)} ({sum(flops):.3g} model "
        f"FLOPs at an assumed {rate:.0e} FLOP/s; revised after each case)",
        flush=True,
    )
    rows, start = [], time.perf_counter()
    for i, case in enumerate(cases, 1):
        row = run_case(case, device=args.device, hw=hw, steps=args.steps, warmup=args.warmup)
        rows.append(row)
        eta = eta_text(sum(flops[:i]), sum(flops[i:]), time.perf_counter() - start)
        if "error" in row:
            print(f"[{i}/{len(cases)}] {case.id}: FAILED {row['error']}; {eta}", flush=True)
        else:
            print(
                f"[{i}/{len(cases)}] {case.id}: step {_ms(row['measured_step_seconds'])} ms "
                f"(predicted {_ms(row.get('predicted_step_seconds'))} ms), peak error "
                f"{_pct(row.get('allocated_error'))} allocated, "
                f"{_pct(row.get('memtracker_error'))} MemTracker; {eta}",
                flush=True,
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_validate: PyTorch is not installed; nothing was measured", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_validate: no CUDA device (torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda or 'none'}); nothing was measured. Run it on a GPU machine, "
            "or use --device cpu for the development mode.",
            file=sys.stderr,
        )
        return 2
    if args.hardware is not None and args.hardware not in HARDWARE:
        print(
            f"gpu_validate: --hardware {args.hardware!r} is not a catalog key "
            f"(one of: {', '.join(sorted(HARDWARE))})",
            file=sys.stderr,
        )
        return 2
    from trainbudget.profile.device import identify_device

    info = identify_device(args.device)
    key = args.hardware or info.catalog_key
    hw = HARDWARE[key] if key else None
    cases = select_cases(
        quick=args.quick, dtype=args.dtype, limit=args.limit, overrides=args.overrides
    )
    mode = "cuda" if args.device == "cuda" else "cpu (development mode: no CUDA statistics)"
    header = [
        f"device: {info.name} ({info.kind}); catalog key: {info.catalog_key or 'none'}",
        f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}, "
        f"python {platform.python_version()}",
        f"mode: {mode}; {len(cases)} case(s) ({'quick' if args.quick else 'full'} matrix"
        + (f", {args.dtype}" if args.dtype else "")
        + (f", limit {args.limit}" if args.limit else "")
        + (f", --set {' '.join(args.overrides)}" if args.overrides else "")
        + f"); {args.steps} timed steps after {args.warmup} warm-up",
        "predictions: "
        + (
            f"catalog row {key}"
            + (" (--hardware, not the measured device)" if args.hardware else "")
            if key
            else "none for step time and MFU (device not in the catalog; see --hardware)"
        ),
    ]
    notes = [
        "max allocated: torch.cuda.max_memory_allocated over the second training step, minus "
        "the bytes allocated before the model was built; it includes the cuBLAS workspaces the "
        "caching allocator holds, which the prediction does not count",
        "MemTracker: its peak of the second training step on the device",
        "step time: median of timed steps (each synchronised once) after warm-up; predicted by "
        "core.step_time with plan dp=1 and flash attention",
        "MFU: model FLOPs (3 x forward, no recomputation) / step time / the dense peak",
        "errors are measured / predicted - 1",
    ]
    for line in header:
        print(line, flush=True)
    rows = run_cases(cases, args, hw)
    summary = summarise(rows)
    markdown = render_markdown(header, rows, summary)
    print()
    print(markdown)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "mode": args.device,
            "device": info.as_dict(),
            "prediction_hardware": key,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "steps": args.steps,
            "warmup": args.warmup,
            "filters": {
                "quick": args.quick,
                "dtype": args.dtype,
                "limit": args.limit,
                "set": list(args.overrides),
            },
            "header": header,
            "notes": notes,
            "cases": rows,
            "summary": summary,
        }
        (args.out / "gpu_validate.json").write_text(
            json.dumps(doc, indent=2, allow_nan=False) + "\n"
        )
        (args.out / "gpu_validate.md").write_text(
            markdown + "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
        )
        print(f"wrote {args.out / 'gpu_validate.md'} and {args.out / 'gpu_validate.json'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
