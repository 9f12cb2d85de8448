"""Loss curves from a run's metrics.jsonl: training loss against step with the validation points
(`eval.val_loss`) on top, and throughput (tokens/s, MFU where the device has a catalog peak)
below. Several runs share one figure, one colour each, to compare them.

Reading the file needs nothing; drawing needs matplotlib (the `train` extra), imported only
when drawing and used through its Agg canvas directly, so no global backend is switched.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainbudget.core.errors import SpecError

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

RunArg = str | os.PathLike


@dataclass
class RunMetrics:
    """One run's logged series (NaN where the log holds null: a non-finite value)."""

    name: str
    path: Path
    """The metrics.jsonl it was read from."""
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    tokens_per_second: list[float] = field(default_factory=list)
    mfu: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    skipped: int = 0
    """Records replaced by a later record of the same step (a resume or a rollback re-logs
    the steps after its checkpoint)."""
    unigram_entropy: float | None = None
    tokens_per_step: int | None = None

    @property
    def has_mfu(self) -> bool:
        return any(math.isfinite(v) for v in self.mfu)

    def as_dict(self) -> dict:
        def last(values: list[float]) -> float | None:
            finite = [v for v in values if math.isfinite(v)]
            return finite[-1] if finite else None

        return {
            "run": self.name,
            "metrics": str(self.path),
            "records": len(self.steps),
            "last_step": self.steps[-1],
            "loss_final": last(self.loss),
            "val_loss_final": last(self.val_loss),
            "eval_points": len(self.val_steps),
            "skipped_records": self.skipped,
        }


def metrics_path(run: RunArg) -> Path:
    """A run directory's metrics.jsonl, or the file itself."""
    path = Path(run)
    if path.is_dir():
        path = path / METRICS_FILE
        if not path.is_file():
            raise SpecError(
                "run", str(run), f"is not a run directory (no {METRICS_FILE}; see `train --out`)"
            )
        return path
    if not path.exists():
        raise SpecError("run", str(run), "no such directory or file")
    return path


def read_metrics(path: RunArg) -> list[dict]:
    """The records of a metrics.jsonl, each checked to be an object with an integer step; blank
    lines are skipped. A bad line is a SpecError naming the file and line number."""
    return [record for _, record in _read_numbered(Path(path))]


def _read_numbered(path: Path) -> list[tuple[int, dict]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError("metrics", str(path), f"cannot be read ({err})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise SpecError(
                where, _clip(line), f"is not JSON ({err.msg}, column {err.colno})"
            ) from None
        if not isinstance(record, dict):
            raise SpecError(where, _clip(line), "is not a JSON object")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise SpecError(f"{where}: step", step, "must be a non-negative integer")
        records.append((number, record))
    if not records:
        raise SpecError("metrics", str(path), "holds no records (did the run log a step?)")
    return records


def load_run(run: RunArg, name: str | None = None) -> RunMetrics:
    """A run directory (or its metrics.jsonl) as series ready to plot."""
    path = metrics_path(run)
    numbered = _read_numbered(path)
    # a resumed run appends to metrics.jsonl and logs again the steps after its checkpoint
    # (and a rollback those after the checkpoint it went back to): the last record of a step
    # wins. Event records (checkpoint, rollback, skipped step) are not points of the curves.
    last: dict[int, tuple[int, dict]] = {}
    for number, record in numbered:
        if "event" not in record:
            last[record["step"]] = (number, record)
    steps = [r for r in numbered if "event" not in r[1]]
    out = RunMetrics(name=name or _run_name(path), path=path, skipped=len(steps) - len(last))
    for _, (number, record) in sorted(last.items()):
        where = f"{path}:{number}"
        out.steps.append(record["step"])
        out.loss.append(_number(record, "loss", where, required=True))
        out.tokens_per_second.append(_number(record, "tokens_per_second", where))
        out.mfu.append(_number(record, "mfu", where))
        if "eval" in record:
            ev = record["eval"]
            if not isinstance(ev, dict):
                raise SpecError(f"{where}: eval", ev, "must be an object")
            if "val_loss" in ev:  # {} when the held-out split is empty
                out.val_steps.append(record["step"])
                out.val_loss.append(_number(ev, "val_loss", f"{where}: eval"))
    summary = path.parent / SUMMARY_FILE
    if summary.is_file():
        try:
            s = json.loads(summary.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            s = {}  # the figure does not need it
        if isinstance(s, dict):
            entropy, tps = s.get("unigram_entropy_nats"), s.get("tokens_per_step")
            if isinstance(entropy, (int, float)) and math.isfinite(entropy):
                out.unigram_entropy = float(entropy)
            if isinstance(tps, int) and tps > 0:
                out.tokens_per_step = tps
    return out


def load_runs(runs: RunArg | Sequence[RunArg]) -> list[RunMetrics]:
    """Several runs, named by their folder (by the path given where two folders share a name)."""
    if isinstance(runs, (str, os.PathLike)):
        runs = [runs]
    if not runs:
        raise SpecError("run", None, "give at least one run directory")
    paths = [metrics_path(r) for r in runs]
    names = [_run_name(p) for p in paths]
    if len(set(names)) < len(names):
        names = [str(r) for r in runs]
    return [load_run(p, n) for p, n in zip(paths, names, strict=True)]


def plot_run(runs: RunArg | Sequence[RunArg], out_png: RunArg) -> Path:
    """Draw the run (or compare the runs) into `out_png`; returns its path."""
    return plot_runs(load_runs(runs), out_png)


def plot_runs(runs: list[RunMetrics], out_png: RunArg) -> Path:
    out = Path(out_png)
    if out.suffix.lower() != ".png":
        raise SpecError("out", str(out_png), "must be a .png file")
    if not out.parent.is_dir():
        raise SpecError("out", str(out_png), f"its folder {out.parent} does not exist")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise SpecError(
            "plot", str(out_png), "needs matplotlib: pip install 'trainbudget[train]'"
        ) from None

    single = len(runs) == 1
    fig = Figure(figsize=(9, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_tps = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    colors = [f"C{i % 10}" for i in range(len(runs))]

    # dots on the logged steps while they can be told apart
    dots = {"marker": ".", "ms": 4} if max(len(r.steps) for r in runs) <= 80 else {}
    for run, color in zip(runs, colors, strict=True):
        label = "" if single else f"{run.name}: "
        ax_loss.plot(run.steps, run.loss, color=color, lw=1.6, label=f"{label}train", **dots)
        if run.val_steps:
            ax_loss.plot(
                run.val_steps,
                run.val_loss,
                color=color if not single else "C3",
                ls="--",
                lw=1,
                marker="D",
                ms=6,
                label=f"{label}validation",
            )
    if single and runs[0].unigram_entropy is not None:
        ax_loss.axhline(
            runs[0].unigram_entropy,
            color="0.45",
            ls=":",
            lw=1.2,
            label=f"unigram entropy {runs[0].unigram_entropy:.2f} (no-context baseline)",
        )
    ax_loss.set_ylabel("cross-entropy loss (nats/token)")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(loc="best", fontsize="small")
    if single:
        r = runs[0]
        last = [v for v in r.loss if math.isfinite(v)]
        final = f", final train loss {last[-1]:.3f}" if last else ""
        ax_loss.set_title(f"Loss of {r.name} ({r.steps[-1]} steps{final})")
        if r.tokens_per_step:
            tps = r.tokens_per_step
            top = ax_loss.secondary_xaxis(
                "top", functions=(lambda s, k=tps: s * k, lambda t, k=tps: t / k)
            )
            top.set_xlabel(f"tokens seen ({tps:,} per step)")
    else:
        ax_loss.set_title(f"Loss of {len(runs)} runs")

    for run, color in zip(runs, colors, strict=True):
        label = "tokens/s" if single else f"{run.name}: tokens/s"
        ax_tps.plot(run.steps, run.tokens_per_second, color=color, lw=1.4, label=label, **dots)
    ax_tps.set_ylabel("throughput (tokens/s)")
    ax_tps.set_xlabel("optimizer step")
    ax_tps.xaxis.set_major_locator(MaxNLocator(integer=True))
    _from_zero(ax_tps, [v for r in runs for v in r.tokens_per_second])
    ax_tps.grid(alpha=0.3)
    handles, labels = ax_tps.get_legend_handles_labels()
    with_mfu = [(run, color) for run, color in zip(runs, colors, strict=True) if run.has_mfu]
    if with_mfu:
        ax_mfu = ax_tps.twinx()
        for run, color in with_mfu:
            ax_mfu.plot(
                run.steps,
                [100 * v for v in run.mfu],
                color="C1" if single else color,
                ls="--",
                lw=1.2,
                label="MFU" if single else f"{run.name}: MFU",
            )
        ax_mfu.set_ylabel("MFU (% of peak FLOP/s)")
        _from_zero(ax_mfu, [100 * v for r, _ in with_mfu for v in r.mfu])
        more = ax_mfu.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
        ax_tps.set_title("Throughput and model FLOPs utilisation")
    else:
        ax_tps.set_title("Throughput (MFU not shown: no catalog peak for this device)")
    ax_tps.legend(handles, labels, loc="lower right", fontsize="small")
    fig.savefig(out, dpi=110)
    return out


def _from_zero(ax, values: list[float]) -> None:
    """y from 0 to the largest value plus headroom (the legend sits below the curves)."""
    finite = [v for v in values if math.isfinite(v)]
    if finite and max(finite) > 0:
        ax.set_ylim(0, 1.2 * max(finite))


def _number(record: dict, key: str, where: str, *, required: bool = False) -> float:
    """record[key] as a float; NaN for null or (unless required) a missing key."""
    if key not in record:
        if required:
            raise SpecError(f"{where}: {key}", None, "is missing")
        return math.nan
    value = record[key]
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {key}", value, "must be a number or null")
    return float(value)


def _run_name(metrics: Path) -> str:
    parent = metrics.resolve().parent
    return parent.name or str(parent)


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
