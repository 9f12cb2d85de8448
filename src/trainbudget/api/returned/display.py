"""How a returned answer shows itself: a few readable lines for `repr`, and for a notebook
(`_repr_html_`) the memory per GPU as a bar against the GPU's capacity and the step time's
breakdown as a second bar, drawn as inline SVG: no matplotlib, no script, no network."""

from __future__ import annotations

from html import escape

from trainbudget.core.units import format_bytes

BAR_WIDTH_PX, BAR_HEIGHT_PX = 480, 22
COLORS = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#9d755d",
    "#bab0ac",
)
"""One colour per part, in order (Tableau 10's first eight)."""


def _time_text(e) -> str:
    if e.time_days is None:
        return "no tokens given: no training time"
    cost = f", cost {e.cost:,.0f}" if e.cost is not None else ""
    return f"{e.time_days:.2f} days, {e.gpu_hours:,.0f} GPU-hours{cost}"


def _memory_text(m) -> str:
    return f"{format_bytes(m.peak_bytes)} per GPU ({m.verdict_text()})"


def estimate_lines(e) -> list[str]:
    """The answer in a few lines: model and GPUs, layout, step, time, memory."""
    req = e.single.request
    out = [f"{req.model.name} on {req.n_gpus} x {req.hardware.name} ({e.kind})"]
    if e.plan is not None:
        out.append(f"plan    {e.plan.describe()}")
    if e.step is not None:
        out.append(f"step    {e.step.step_seconds:.4g} s, MFU {100 * e.step.mfu:.1f} %")
    out.append(f"time    {_time_text(e)}")
    out.append(f"memory  {_memory_text(e.memory)}")
    return out


def estimate_repr(e) -> str:
    body = "\n  ".join(estimate_lines(e))
    return f"<trainbudget.Estimate\n  {body}>"


def plan_repr(r) -> str:
    lines = [f"{r.evaluated:,} layouts evaluated, {r.fitting:,} fit"]
    for i, p in enumerate(r.plans, 1):
        lines.append(
            f"{i}. {p.plan.describe()}: {p.time.step_seconds:.4g} s/step, "
            f"MFU {100 * p.time.mfu:.1f} %, {format_bytes(p.memory.total_bytes)}"
            + ("" if p.fits else " (does NOT fit)")
        )
    body = "\n  ".join(lines)
    return f"<trainbudget.PlanResult\n  {body}>"


def stacked_bar(parts: dict[str, float], scale: float, title: str, unit) -> str:
    """One horizontal bar of `parts` (name -> value), `scale` the value of the full width;
    each segment titled with its name and value (`unit` formats a value)."""
    x, rects, legend = 0.0, [], []
    shown = [(k, v) for k, v in parts.items() if v > 0]
    for i, (name, value) in enumerate(shown):
        width = BAR_WIDTH_PX * value / scale if scale > 0 else 0.0
        color = COLORS[i % len(COLORS)]
        label = escape(f"{name} {unit(value)}")
        rects.append(
            f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="{BAR_HEIGHT_PX}" '
            f'fill="{color}"><title>{label}</title></rect>'
        )
        legend.append(f'<span style="color:{color}">&#9632;</span> {label}')
        x += width
    return (
        f"<div><b>{escape(title)}</b><br>"
        f'<svg width="{BAR_WIDTH_PX}" height="{BAR_HEIGHT_PX}" role="img" '
        f'aria-label="{escape(title)}" style="background:#eee">{"".join(rects)}</svg>'
        f'<div style="font-size:smaller">{" &nbsp; ".join(legend)}</div></div>'
    )


def memory_bar(m) -> str:
    """The peak's parts against the GPU's capacity; a mark at the usable limit."""
    bar = stacked_bar(
        m.parts_bytes, m.capacity_bytes, "memory per GPU: " + _memory_text(m), format_bytes
    )
    limit_px = BAR_WIDTH_PX * min(1.0, max(0.0, m.usable_bytes / m.capacity_bytes))
    mark = (
        f'<line x1="{limit_px:.1f}" x2="{limit_px:.1f}" y1="0" y2="{BAR_HEIGHT_PX}" '
        'stroke="black" stroke-dasharray="3,2"><title>usable limit</title></line>'
    )
    return bar.replace("</svg>", mark + "</svg>", 1)


def step_bar(step) -> str:
    """The exposed time of each category of one step; they sum to the step time."""
    title = f"step {step.step_seconds:.4g} s ({step.overlap_note})"
    return stacked_bar(step.breakdown_seconds, step.step_seconds, title, lambda s: f"{s:.3g} s")


def estimate_html(e) -> str:
    head = "<br>".join(escape(line) for line in estimate_lines(e))
    parts = [f"<div><code>{head}</code></div>", memory_bar(e.memory)]
    if e.step is not None:
        parts.append(step_bar(e.step))
    return '<div class="trainbudget">' + "".join(parts) + "</div>"


def plan_html(r, memory) -> str:
    """The ranked plans as a table, and the best plan's bars: `memory` is its Memory (None when
    there is no plan), handed in so that this module needs nothing of results.py."""
    rows = "".join(
        f"<tr><td>{i}</td><td>{escape(p.plan.describe())}</td>"
        f"<td>{p.time.step_seconds:.4g}</td><td>{100 * p.time.mfu:.1f} %</td>"
        f"<td>{escape(format_bytes(p.memory.total_bytes))}</td>"
        f"<td>{'yes' if p.fits else 'NO'}</td></tr>"
        for i, p in enumerate(r.plans, 1)
    )
    table = (
        "<table><tr><th>#</th><th>plan</th><th>step s</th><th>MFU</th><th>memory/GPU</th>"
        f"<th>fits</th></tr>{rows}</table>"
    )
    bars = "" if memory is None else memory_bar(memory) + step_bar(r.best.time)
    return f'<div class="trainbudget">{table}{bars}</div>'
