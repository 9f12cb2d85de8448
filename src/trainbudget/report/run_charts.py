"""Every figure of a training run, drawn here only: the run report's charts (loss with
validation per source, throughput and MFU against the prediction, step time by phase, memory
against the prediction, learning rate and gradient norm) and `trainbudget plot`'s figure (loss,
throughput and MFU stacked, one colour per run to compare several). The runs come from
`train.spec.run_files.read_run`. Missing values are left out; a series with no value draws a note
instead of a line."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from trainbudget.core.units import MB
from trainbudget.report.figures import COLORS, Chart, draw
from trainbudget.train.spec.run_files import RunLog, RunPoint

PHASES = ("data", "forward", "backward", "optimizer")
PHASE_COLORS = {
    "data": "#937860",
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "optimizer": "#8172B2",
}


def _series(points: tuple[RunPoint, ...], attr: str) -> tuple[list[int], list[float]]:
    pairs = [(p.step, getattr(p, attr)) for p in points if getattr(p, attr) is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _dots(n: int) -> dict:
    """Dots on the logged steps while they can be told apart."""
    return {"marker": ".", "ms": 6} if n <= 80 else {}


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _events(ax, r: RunLog) -> None:
    """Checkpoints as faint lines (one legend entry); other events (rollback, skipped step,
    interruption) as labelled lines: they explain a jump in the curves."""
    saved = False
    for e in r.events:
        if e.event == "checkpoint":
            label = "_nolegend_" if saved else "checkpoint written"
            ax.axvline(e.step, color="0.55", ls=":", lw=1, label=label)
            saved = True
            continue
        ax.axvline(e.step, color="#C44E52", ls="-.", lw=1.2)
        ax.annotate(
            e.event,
            (e.step, 0),  # at the bottom: legends sit at the top
            xycoords=("data", "axes fraction"),
            xytext=(3, 4),
            textcoords="offset points",
            rotation=90,
            va="bottom",
            fontsize=9,
            color="#C44E52",
        )


def _from_zero(ax, values: list[float]) -> None:
    if values and max(values) > 0:
        ax.set_ylim(0, 1.25 * max(values))


def _validation(ax, r: RunLog) -> None:
    """Validation loss, per data source when there are several, and the unigram baseline."""
    v_steps, v_loss = _series(r.points, "val_loss")
    if v_steps:
        ax.plot(
            v_steps,
            v_loss,
            "D--",
            color=COLORS["validation"],
            ms=7,
            lw=1.2,
            label="validation loss",
        )
    sources = sorted({s for p in r.points for s in p.val_loss_by_source})
    if len(sources) > 1:  # one source: the same numbers as the validation loss
        for i, source in enumerate(sources):
            pts = [
                (p.step, p.val_loss_by_source[source])
                for p in r.points
                if source in p.val_loss_by_source
            ]
            ax.plot(
                *zip(*pts, strict=True),
                ls=":",
                marker="o",
                ms=4,
                color=f"C{(i + 4) % 10}",
                label=f"validation: {source}",
            )
    s = r.summary
    if s is not None and s.unigram_entropy_nats is not None:
        label = f"unigram entropy {s.unigram_entropy_nats:.2f} (no-context baseline)"
        ax.axhline(s.unigram_entropy_nats, color="0.45", ls=":", lw=1.3, label=label)


def _colors(runs: Sequence[RunLog]) -> list[str]:
    """One run in the measured colour; several in matplotlib's cycle, one each."""
    if len(runs) == 1:
        return [COLORS["measured"]]
    return [f"C{i % 10}" for i in range(len(runs))]


def _label(runs: Sequence[RunLog], r: RunLog, what: str) -> str:
    return what if len(runs) == 1 else f"{r.name}: {what}"


def _loss(ax, runs: Sequence[RunLog]) -> None:
    """Training loss of each run; one run adds validation per source, the unigram baseline,
    its events and a tokens-seen axis, several their validation points in the run's colour."""
    for r, color in zip(runs, _colors(runs), strict=True):
        steps, loss = _series(r.points, "loss")
        label = _label(runs, r, "train loss")
        ax.plot(steps, loss, color=color, lw=1.8, label=label, **_dots(len(steps)))
        v_steps, v_loss = _series(r.points, "val_loss")
        if len(runs) > 1 and v_steps:
            label = _label(runs, r, "validation loss")
            ax.plot(v_steps, v_loss, "D--", color=color, ms=6, lw=1, label=label)
    if len(runs) > 1:
        ax.set_title(f"Loss of {len(runs)} runs")
    else:
        r = runs[0]
        _validation(ax, r)
        _events(ax, r)
        steps, loss = _series(r.points, "loss")
        title = f"Loss of {r.name}"
        if len(loss) > 1:
            title += f": {loss[0]:.3f} -> {loss[-1]:.3f} nats/token in {steps[-1]} steps"
        ax.set_title(title)
        if r.tokens_per_step:
            k = r.tokens_per_step
            top = ax.secondary_xaxis("top", functions=(lambda x: x * k, lambda t: t / k))
            top.xaxis.set_major_formatter("{x:,.0f}")
            top.set_xlabel(f"tokens seen ({k:,} per step)")
    if not any(p.loss is not None for r in runs for p in r.points):
        _empty(ax, "no training loss logged yet")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.legend(loc="upper right")


def loss_chart(r: RunLog) -> Chart:
    def paint(fig) -> None:
        ax = fig.subplots()
        _loss(ax, [r])
        ax.set_xlabel("optimizer step")

    return draw("loss", "training and validation loss against step", (11, 5.2), paint)


def _mfu(ax, runs: Sequence[RunLog]) -> None:
    """Measured MFU of each run; one run adds the MFU its predicted step time would give."""
    values = []
    for r, color in zip(runs, _colors(runs), strict=True):
        steps, mfu = _series(r.points, "mfu")
        label = "measured MFU" if len(runs) == 1 else f"{r.name}: MFU"
        ax.plot(steps, [100 * v for v in mfu], color=color, lw=1.6, label=label)
        values += mfu
    if len(runs) == 1:
        p_steps, pmfu = _series(runs[0].points, "predicted_mfu")
        ax.plot(
            p_steps,
            [100 * v for v in pmfu],
            color=COLORS["predicted"],
            ls="--",
            lw=1.6,
            label="predicted MFU",
        )
        values += pmfu
    _from_zero(ax, [100 * v for v in values])
    ax.set_ylabel("MFU (% of peak FLOP/s)")
    ax.legend(loc="lower right")


def _throughput_title(r: RunLog, ax, tps: list[float], p_tps: list[float]) -> str:
    """The summary's median against the prediction (robust to a busy machine's slow steps);
    while the run goes, the last logged step's."""
    s = r.summary
    title = "Throughput, measured vs predicted"
    if s is not None and s.tokens_per_second is not None:
        median = s.tokens_per_second
        ax.axhline(median, color="black", lw=1.3, label="measured, median step")
        if s.predicted_tokens_per_second:
            error = median / s.predicted_tokens_per_second - 1
            title += f": median {median:,.0f} vs {s.predicted_tokens_per_second:,.0f} "
            title += f"tokens/s ({error:+.1%})"
    elif tps and p_tps:
        title += f" (last step {tps[-1]:,.0f} vs {p_tps[-1]:,.0f} tokens/s)"
    return title


def _throughput(ax, runs: Sequence[RunLog]) -> None:
    """Measured tokens/s of each run; one run adds the prediction, its median and its events."""
    values = []
    for r, color in zip(runs, _colors(runs), strict=True):
        steps, tps = _series(r.points, "tokens_per_second")
        label = _label(runs, r, "measured" if len(runs) == 1 else "tokens/s")
        ax.plot(steps, tps, color=color, lw=1.8, label=label, **_dots(len(steps)))
        values += tps
    if len(runs) > 1:
        ax.set_title(f"Throughput of {len(runs)} runs")
    else:
        r = runs[0]
        p_steps, p_tps = _series(r.points, "predicted_tokens_per_second")
        ax.plot(
            p_steps,
            p_tps,
            color=COLORS["predicted"],
            ls="--",
            lw=1.8,
            label="predicted (core step-time model)",
        )
        ax.set_title(_throughput_title(r, ax, values, p_tps))
        values += p_tps
        _events(ax, r)
    _from_zero(ax, values)
    ax.set_ylabel("throughput (tokens/s)")
    if not any(p.tokens_per_second is not None for r in runs for p in r.points):
        _empty(ax, "no throughput logged yet")
    ax.legend(loc="upper left", ncol=2)


def _has_mfu(runs: Sequence[RunLog]) -> bool:
    return any(p.mfu is not None for r in runs for p in r.points)


def throughput_chart(r: RunLog) -> Chart:
    has_mfu = _has_mfu([r])

    def paint(fig) -> None:
        axes = fig.subplots(2, 1, sharex=True) if has_mfu else [fig.subplots()]
        _throughput(axes[0], [r])
        if has_mfu:
            _mfu(axes[1], [r])
        axes[-1].set_xlabel("optimizer step")

    size = (11, 6.5) if has_mfu else (11, 4.2)
    return draw("throughput", "measured and predicted tokens per second", size, paint)


def curves_chart(runs: Sequence[RunLog]) -> Chart:
    """`trainbudget plot`'s figure: loss over throughput (over MFU where a run logged it), the
    report's loss and throughput charts stacked on one step axis; several runs compared."""
    has_mfu = _has_mfu(runs)

    def paint(fig) -> None:
        ratios = (3, 2, 2) if has_mfu else (3, 2)
        axes = fig.subplots(len(ratios), 1, sharex=True, height_ratios=ratios)
        _loss(axes[0], runs)
        _throughput(axes[1], runs)
        if has_mfu:
            _mfu(axes[2], runs)
        axes[-1].set_xlabel("optimizer step")

    size = (11, 10.5) if has_mfu else (11, 8)
    alt = "loss, throughput and MFU against step" if has_mfu else "loss and throughput"
    return draw("curves", alt, size, paint)


def step_time_chart(r: RunLog) -> Chart:
    def paint(fig) -> None:
        ax = fig.subplots()
        pts = [p for p in r.points if p.phases_seconds]
        steps = [p.step for p in pts]
        gaps = [b - a for a, b in itertools.pairwise(steps)]
        width = 0.7 * min(gaps) if gaps else 0.7
        bottom = [0.0] * len(pts)
        for phase in PHASES:
            values = [p.phases_seconds.get(phase, 0.0) for p in pts]
            ax.bar(
                steps, values, bottom=bottom, width=width, color=PHASE_COLORS[phase], label=phase
            )
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
        m_steps, measured = _series(r.points, "step_seconds")
        p_steps, predicted = _series(r.points, "predicted_step_seconds")
        ax.plot(m_steps, measured, "k.-", lw=1.2, label="measured step")
        ax.plot(
            p_steps, predicted, color=COLORS["predicted"], ls="--", lw=2, label="predicted step"
        )
        _from_zero(ax, measured + predicted + bottom)
        if not m_steps:
            _empty(ax, "no step time logged yet")
        ax.set_xlabel("optimizer step (logged steps)")
        ax.set_ylabel("seconds per step")
        ax.set_title("Step time by phase, measured vs predicted")
        s = r.summary
        if s is not None and s.step_seconds_measured_median is not None:
            ax.axhline(
                s.step_seconds_measured_median,
                color="black",
                lw=1.3,
                ls=":",
                label="measured, median",
            )
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)

    return draw("step_time", "step time by phase against the prediction", (11, 5.0), paint)


def memory_chart(r: RunLog) -> Chart:
    def paint(fig) -> None:
        ax = fig.subplots()
        p_steps, predicted = _series(r.points, "predicted_peak_bytes")
        m_steps, measured = _series(r.points, "measured_peak_bytes")
        values = predicted + measured
        s = r.summary
        title = "Peak memory per GPU: measured vs predicted"
        if m_steps:
            ax.plot(
                m_steps,
                [v / MB for v in measured],
                "o-",
                color=COLORS["measured"],
                ms=4,
                lw=3,
                label="measured peak (CUDA allocator)",
            )
        elif s is not None and s.memory_measured_peak_bytes is not None:
            v = s.memory_measured_peak_bytes
            values.append(v)
            ax.axhline(
                v / MB,
                color=COLORS["measured"],
                lw=3,
                label=f"measured once: {s.memory_measured_by}",
            )
        else:
            title += " (nothing measured: no CUDA allocator)"
        # dashed on top: measured and predicted often agree to within the line width
        ax.plot(
            p_steps,
            [v / MB for v in predicted],
            color=COLORS["predicted"],
            ls="--",
            lw=2,
            label="predicted peak (core)",
        )
        if s is not None and s.memory_error is not None:
            title += f" ({s.memory_error:+.2%})"
        _from_zero(ax, [v / MB for v in values])
        if not values:
            _empty(ax, "no memory figure logged")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("peak memory (MB = 1e6 bytes)")
        ax.set_title(title)
        ax.legend(loc="lower right")

    return draw("memory", "peak memory against the prediction", (11, 4.2), paint)


def optimizer_chart(r: RunLog) -> Chart:
    def paint(fig) -> None:
        ax_lr, ax_g = fig.subplots(1, 2)
        steps, lr = _series(r.points, "lr")
        ax_lr.plot(steps, lr, color=COLORS["measured"], lw=1.6, **_dots(len(steps)))
        ax_lr.set_title("Learning rate")
        ax_lr.set_ylabel("learning rate")
        g_steps, grad = _series(r.points, "grad_norm")
        ax_g.plot(g_steps, grad, color="#8172B2", lw=1.6, **_dots(len(g_steps)))
        ax_g.set_title("Gradient norm (before clipping)")
        ax_g.set_ylabel("global L2 norm")
        for ax in (ax_lr, ax_g):
            ax.set_xlabel("optimizer step")
            _events(ax, r)

    return draw("optimizer", "learning rate and gradient norm", (11, 3.6), paint)


def run_charts(r: RunLog) -> dict[str, Chart]:
    charts = [
        loss_chart(r),
        throughput_chart(r),
        step_time_chart(r),
        memory_chart(r),
        optimizer_chart(r),
    ]
    return {c.name: c for c in charts}
