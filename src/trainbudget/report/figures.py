"""matplotlib for the report and `trainbudget plot`, the house way: a Figure on its own Agg
canvas, so no global backend is switched, and a style applied only while one figure is drawn
(`rc_context`), so importing the report changes nobody's rcParams. Out come PNG bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

DPI = 110
STYLE = {
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11.5,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 9.5,
    "legend.framealpha": 0.9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
# one colour per quantity on every chart of both pages
COLORS = {
    "params": "#4C72B0",
    "grads": "#55A868",
    "optimizer": "#8172B2",
    "activations": "#DD8452",
    "temporaries": "#DA8BC3",
    "buffers": "#937860",
    "compute": "#4C72B0",
    "exposed_comm": "#C44E52",
    "pipeline_bubble": "#CCB974",
    "offload": "#64B5CD",
    "measured": "#1f77b4",
    "predicted": "#d62728",
    "validation": "#2ca02c",
}


@dataclass(frozen=True)
class Chart:
    """One drawn figure: `name` is its PNG file's stem, `alt` says what it shows."""

    name: str
    alt: str
    png: bytes


def require_matplotlib() -> None:
    """Fail early, before any drawing, when the plotting extra is missing: the CLI turns the
    ModuleNotFoundError into the one-line install hint every optional dependency gets."""
    import matplotlib  # noqa: F401


def draw(name: str, alt: str, size_inches: tuple[float, float], paint: Callable) -> Chart:
    """A Chart of `paint(fig)` drawn on a fresh figure of `size_inches` under STYLE."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with rc_context(STYLE):
        fig = Figure(figsize=size_inches, layout="constrained")
        FigureCanvasAgg(fig)
        paint(fig)
        buf = io.BytesIO()
        # no Software tag: the same numbers give the same bytes whatever matplotlib drew them
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return Chart(name=name, alt=alt, png=buf.getvalue())


def log2_gpu_axis(ax, counts: list[int]) -> None:
    """An x axis of GPU counts, log 2, one labelled tick per count."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{c:,}" for c in counts])
