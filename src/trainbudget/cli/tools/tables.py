"""Plain-text and markdown tables for the commands that print rows of numbers (`validate`)."""

from __future__ import annotations

from collections.abc import Sequence


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def table(head: Sequence[str], rows: list[list[str]], markdown: bool) -> list[str]:
    """Rows under a header: a markdown table, or columns as wide as their longest entry
    (numbers right-aligned, text left-aligned)."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    columns = list(zip(head, *rows, strict=True))
    widths = [max(len(x) for x in col) for col in columns]
    numeric = [all(x[:1] in "0123456789+-" for x in col[1:]) for col in columns]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            f"{c:>{w}}" if num else f"{c:<{w}}"
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    return [line(head), *(line(r) for r in rows)]
