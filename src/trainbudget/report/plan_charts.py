"""The plan report's figures: memory and step time per candidate layout, the scaling curve,
the roofline and the failure/checkpoint curve. Each takes the gathered numbers and returns a
Chart; nothing is computed here beyond unit scaling for the axes."""

from __future__ import annotations

from trainbudget.core.units import GB, SECONDS_PER_HOUR, format_count
from trainbudget.report.figures import COLORS, Chart, draw, log2_gpu_axis
from trainbudget.report.plan_data import MEMORY_PARTS, STEP_PARTS, PlanReport
from trainbudget.report.roofline_data import Roofline

TFLOPS = 1e12  # axis unit: 1 TFLOP/s = 1e12 FLOP/s
SECONDS_PER_MINUTE = 60
MEMORY_LABELS = {
    "params": "weights",
    "grads": "gradients",
    "optimizer": "master + optimizer state",
    "activations": "activations",
    "temporaries": "temporaries at the peak",
    "buffers": "buffers",
}
STEP_LABELS = {
    "compute": "compute",
    "exposed_comm": "exposed communication",
    "pipeline_bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "offload": "offload transfers",
}
EFFICIENCY_KNEE = 0.8
"""The scaling chart shades the GPU counts, beyond the cheapest, below this efficiency."""
MILLION = 1e6
MARKERS = ("o", "s", "D", "^", "v", "P", "X")


def _plan_labels(r: PlanReport) -> list[str]:
    return [f"#{c.rank} {c.plan}" + ("" if c.fits else " (does not fit)") for c in r.candidates]


def memory_chart(r: PlanReport) -> Chart:
    def paint(fig) -> None:
        ax = fig.subplots()
        labels = _plan_labels(r)
        y = range(len(labels))
        left = [0.0] * len(labels)
        for part in MEMORY_PARTS:
            widths = [c.memory_bytes[part] / GB for c in r.candidates]
            ax.barh(y, widths, left=left, color=COLORS[part], label=MEMORY_LABELS[part], height=0.6)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        for i, c in enumerate(r.candidates):
            ax.text(left[i], i, f" {c.total_memory_bytes / GB:.1f} GB", va="center", fontsize=10)
        capacity = r.gpu_memory_bytes / GB
        ax.axvline(capacity, color="black", lw=2, label=f"{r.gpu} capacity {capacity:.0f} GB")
        ax.axvline(
            r.memory_limit_bytes / GB,
            color="black",
            ls="--",
            lw=1.2,
            label=f"usable ({r.memory_limit_bytes / GB:.1f} GB, fits rule): plans fit under it",
        )
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()  # best plan on top
        ax.set_xlim(0, max(capacity, max(left)) * 1.18)
        ax.set_xlabel("memory per GPU on the most loaded stage (GB = 1e9 bytes)")
        ax.set_title(f"Memory per GPU of the {len(labels)} fastest layouts")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
        ax.grid(axis="y", visible=False)

    height = 2.6 + 0.55 * len(r.candidates)
    return draw("memory", "stacked memory per GPU of each candidate layout", (11, height), paint)


def step_chart(r: PlanReport) -> Chart:
    def paint(fig) -> None:
        ax = fig.subplots()
        labels = _plan_labels(r)
        y = range(len(labels))
        left = [0.0] * len(labels)
        for part in STEP_PARTS:
            widths = [c.step_seconds_by_part[part] for c in r.candidates]
            if not any(widths):
                continue  # no offload in any plan: no empty legend entry
            ax.barh(y, widths, left=left, color=COLORS[part], label=STEP_LABELS[part], height=0.6)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        for i, c in enumerate(r.candidates):
            ax.text(
                left[i],
                i,
                f" {c.step_seconds:.3g} s, MFU {c.mfu:.1%}",
                va="center",
                fontsize=10,
            )
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, max(left) * 1.3)
        ax.set_xlabel(f"seconds per optimizer step ({r.global_batch} x {r.seq_len} tokens)")
        ax.set_title("Step time by part: what is not hidden behind compute")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
        ax.grid(axis="y", visible=False)

    height = 2.4 + 0.55 * len(r.candidates)
    return draw("step_time", "stacked step time of each candidate layout", (11, height), paint)


def _scaling_time(ax_t, r: PlanReport) -> None:
    """Training days (log) against GPUs with the linear speed-up, and GPU-hours or cost."""
    pts = r.scaling
    counts, days = [p.n_gpus for p in pts], [p.train_days for p in pts]
    ideal = [days[0] * counts[0] / n for n in counts]
    ax_t.plot(counts, ideal, color="0.55", ls=":", lw=1.5, label="linear speed-up")
    ax_t.plot(counts, days, "o-", color=COLORS["measured"], lw=2, label="training days")
    for n, d in zip(counts, days, strict=True):
        text = f"{d:,.0f}" if d >= 100 else f"{d:.3g}"
        ax_t.annotate(text, (n, d), textcoords="offset points", xytext=(5, 6), fontsize=10)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("training time (days, log)")
    ax_t.axvline(r.n_gpus, color="0.3", lw=1, ls="--")
    ax_t.text(r.n_gpus, max(days), f" asked: {r.n_gpus:,} GPUs", va="top", fontsize=10)
    ax_c = ax_t.twinx()
    money = all(p.cost is not None for p in pts)
    cost = [(p.cost if money else p.gpu_hours) / MILLION for p in pts]
    cost_label = "cost (millions)" if money else "million GPU-hours"
    ax_c.plot(counts, cost, "s--", color=COLORS["predicted"], lw=1.3, ms=5)
    ax_c.set_ylabel(cost_label, color=COLORS["predicted"])
    ax_c.set_ylim(0, max(cost) * 1.25)
    ax_c.grid(False)
    ax_c.spines["right"].set_visible(True)
    handles, labels = ax_t.get_legend_handles_labels()
    ax_t.legend(
        [*handles, ax_c.lines[0]], [*labels, f"{cost_label} (right axis)"], loc="lower left"
    )
    cheapest = max(range(len(pts)), key=lambda i: pts[i].scaling_efficiency)
    knee = next((p for p in pts[cheapest:] if p.scaling_efficiency < EFFICIENCY_KNEE), None)
    title = f"Time and cost to train {format_count(r.tokens)} tokens vs GPUs"
    if knee is not None:
        ax_t.axvspan(knee.n_gpus / 1.2, counts[-1] * 1.2, color="#C44E52", alpha=0.07)
        title += f": speed-up fades from {knee.n_gpus:,} GPUs"
    ax_t.set_title(title)


def _scaling_shares(ax_s, r: PlanReport) -> None:
    """Each count's step split into its parts (% of the step), and the scaling efficiency."""
    pts = r.scaling
    counts = [p.n_gpus for p in pts]
    bottom = [0.0] * len(pts)
    for part in STEP_PARTS:
        share = [100 * p.step_seconds_by_part[part] / p.step_seconds for p in pts]
        if not any(share):
            continue
        width = [n * 0.35 for n in counts]  # equal widths on the log axis
        ax_s.bar(
            counts, share, bottom=bottom, width=width, color=COLORS[part], label=STEP_LABELS[part]
        )
        bottom = [a + b for a, b in zip(bottom, share, strict=True)]
    eff = [100 * p.scaling_efficiency for p in pts]
    ax_s.plot(counts, eff, "k^-", lw=1.3, label="scaling efficiency")
    ax_s.set_ylim(0, max(110, max(eff) + 10))
    ax_s.set_ylabel("% of step time")
    ax_s.set_xlabel("GPUs (log 2); the best layout at each count")
    ax_s.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, frameon=False)
    log2_gpu_axis(ax_s, counts)


def scaling_chart(r: PlanReport) -> Chart:
    def paint(fig) -> None:
        ax_t, ax_s = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        _scaling_time(ax_t, r)
        _scaling_shares(ax_s, r)

    alt = "training time, cost and step-time shares against GPU count"
    return draw("scaling", alt, (11, 8), paint)


def _roofs(ax, rf: Roofline, xs: list[float]) -> None:
    """The datasheet, achievable and (with a calibration) measured roofs, and the ridge."""

    def roof(flops: float, bandwidth: float) -> list[float]:
        return [min(flops, x * bandwidth) / TFLOPS for x in xs]

    peak, hbm = rf.peak_flops_per_second, rf.hbm_bytes_per_second
    ax.plot(xs, roof(peak, hbm), color="black", lw=2, label=f"{rf.gpu} datasheet ({rf.dtype})")
    ax.plot(
        xs,
        roof(peak * rf.matmul_efficiency, hbm * rf.hbm_efficiency),
        color="0.45",
        ls="--",
        lw=1.5,
        label=f"achievable: matmul {rf.matmul_efficiency:.2g} x peak, "
        f"HBM {rf.hbm_efficiency:.2g} x bandwidth",
    )
    measured, flops, ridge = (
        rf.measured,
        rf.measured_flops_per_second,
        rf.measured_ridge_flops_per_byte,
    )
    if measured is not None and flops is not None and ridge is not None:
        ax.plot(
            xs,
            roof(flops, measured.bandwidth_bytes_per_second),
            color=COLORS["validation"],
            ls="-.",
            lw=1.8,
            label=f"measured ({measured.device_name})",
        )
        label = f"measured ridge {ridge:.3g} FLOP/byte"
        ax.plot([ridge], [flops / TFLOPS], "D", color=COLORS["validation"], ms=8, label=label)
    ax.axvline(rf.ridge_flops_per_byte, color="0.6", lw=1, ls=":")
    ax.text(
        rf.ridge_flops_per_byte,
        peak / TFLOPS * 0.03,
        f" ridge {rf.ridge_flops_per_byte:.0f} FLOP/byte",
        fontsize=9.5,
        color="0.35",
    )


def roofline_chart(r: PlanReport) -> Chart:
    rf = r.roofline

    def paint(fig) -> None:
        ax = fig.subplots()
        lo = min([1.0] + [o.intensity_flops_per_byte / 4 for o in rf.ops])
        hi = max([rf.ridge_flops_per_byte * 8] + [o.intensity_flops_per_byte * 4 for o in rf.ops])
        _roofs(ax, rf, [lo * (hi / lo) ** (i / 200) for i in range(201)])
        for i, o in enumerate(rf.ops):
            y = o.achieved_flops_per_second / TFLOPS
            # the matmuls of one layer often sit close together: told apart by marker and colour
            ax.plot(
                [o.intensity_flops_per_byte],
                [y],
                MARKERS[i % len(MARKERS)],
                ms=10,
                color=f"C{i}",
                mec="black",
                mew=0.6,
                label=f"{o.name}: {o.intensity_flops_per_byte:,.0f} FLOP/byte, {y:,.0f} TFLOP/s",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        top = rf.peak_flops_per_second / TFLOPS
        ax.set_ylim(top * 1e-3 * max(1.0, lo), top * 2.5)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved to and from HBM)")
        ax.set_ylabel(f"achieved {rf.dtype} TFLOP/s per GPU")
        ax.set_title("Roofline: the model's matmuls in the chosen layout, one micro-batch")
        ax.legend(loc="lower right", fontsize=9)

    alt = "roofline of the GPU with the model's matmuls placed on it"
    return draw("roofline", alt, (11, 6.5), paint)


def failures_chart(r: PlanReport) -> Chart:
    f = r.failures
    assert f is not None

    def paint(fig) -> None:
        ax = fig.subplots()
        minutes = [t / SECONDS_PER_MINUTE for t, _ in f.goodput_curve]
        ax.plot(minutes, [100 * g for _, g in f.goodput_curve], color=COLORS["measured"], lw=2)
        daly = f.daly_interval_seconds / SECONDS_PER_MINUTE
        young = f.young_interval_seconds / SECONDS_PER_MINUTE
        ax.plot([daly], [100 * f.goodput], "o", ms=9, color=COLORS["predicted"])
        ax.annotate(
            f"Daly optimum: every {daly:.0f} min, goodput {f.goodput:.1%}",
            (daly, 100 * f.goodput),
            textcoords="offset points",
            xytext=(12, -22),
        )
        ax.axvline(young, color="0.5", ls=":", lw=1.2, label=f"Young interval {young:.0f} min")
        ax.set_xscale("log")
        ax.set_xlabel("compute time between checkpoints (minutes, log)")
        ax.set_ylabel("goodput (% of wall-clock time that trains)")
        mtbf_hours = f.mtbf_seconds / SECONDS_PER_HOUR
        ax.set_title(
            f"Checkpoint interval vs goodput: {r.n_gpus:,} GPUs, MTBF {mtbf_hours:.3g} h, "
            f"{f.checkpoint_write_seconds:.3g} s per checkpoint"
        )
        ax.legend(loc="lower right")
        wall = f.wall_clock_days
        ax.text(
            0.01,
            0.04,
            f"{f.useful_days:.1f} failure-free days -> {wall:.1f} wall-clock days, "
            f"{f.expected_failures:.0f} expected failures",
            transform=ax.transAxes,
            fontsize=10,
        )

    return draw("failures", "goodput against checkpoint interval", (11, 5), paint)


def plan_charts(r: PlanReport) -> dict[str, Chart]:
    charts = [memory_chart(r), step_chart(r), roofline_chart(r)]
    if r.failures is not None:
        charts.append(failures_chart(r))
    if r.scaling:
        charts.append(scaling_chart(r))
    return {c.name: c for c in charts}
