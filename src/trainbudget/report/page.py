"""HTML building blocks of a report page: every value escaped, images embedded as base64
data: URIs, one small inline stylesheet, no script and no external resource, so the file reads
the same offline, mailed, or attached to an issue. Writing puts the PNGs beside it as well."""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.report.figures import Chart

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0 auto; max-width: 1180px; padding: 20px 28px 60px; color: #1d2127;
       line-height: 1.45; font-size: 16px; background: #fff; }
h1 { font-size: 1.55em; margin: 0.2em 0 0.3em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.5em; padding-bottom: 0.2em;
     border-bottom: 2px solid #e3e6ea; }
.question { color: #4a5360; margin: 0 0 0.6em; }
.answer { font-size: 1.15em; background: #eef5ee; border-left: 6px solid #2e7d32;
          padding: 0.7em 1em; margin: 0.4em 0 1em; }
.answer.warn { background: #fbeeee; border-left-color: #c62828; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: left;
         vertical-align: top; }
th { background: #f4f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 0.6em 0 1.2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e6ea; }
figcaption { color: #4a5360; font-size: 0.9em; margin-top: 0.3em; }
ul.assumptions li, ul.notes li { margin: 0.25em 0; }
.muted { color: #6a7380; font-size: 0.9em; }
nav a { margin-right: 1em; }
"""


class Raw(str):
    """Markup built by this module (already escaped); any other str is escaped when placed."""


def esc(value: object) -> str:
    return value if isinstance(value, Raw) else html.escape(str(value), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: int = 1) -> Raw:
    """A table; columns from index `numeric` on are right-aligned numbers."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{esc(v)}</td>' if i >= numeric else f"<td>{esc(v)}</td>"
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return Raw(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def bullets(items: Iterable[object], cls: str) -> Raw:
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return Raw(f'<ul class="{esc(cls)}">{lis}</ul>')


def paragraph(text: object, cls: str = "") -> Raw:
    attr = f' class="{esc(cls)}"' if cls else ""
    return Raw(f"<p{attr}>{esc(text)}</p>")


def figure(chart: Chart, caption: str) -> Raw:
    data = base64.b64encode(chart.png).decode("ascii")
    return Raw(
        f'<figure id="fig-{esc(chart.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{esc(chart.alt)}"><figcaption>{esc(caption)}</figcaption></figure>'
    )


def section(anchor: str, title: str, *parts: str) -> Raw:
    return Raw(f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{"".join(parts)}</section>')


def document(title: str, header: Sequence[str], sections: Sequence[tuple[str, str, str]]) -> str:
    """The page: `header` markup, a contents line, then (anchor, title, markup) sections."""
    nav = " ".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t, _ in sections)
    body = "".join(section(a, t, m) for a, t, m in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"{''.join(header)}<nav>{nav}</nav>{body}"
        '<p class="muted">Written by <code>trainbudget report</code>.</p>'
        "</body></html>\n"
    )


def default_png_dir(out: Path) -> Path:
    """report.html -> report_files/, as a browser saves a page."""
    return out.with_name(out.stem + "_files")


def check_out(out: Path, png_dir: Path | None = None) -> None:
    """An .html file in an existing folder, and a folder for the PNGs that can be made and
    written (checked before any work is done)."""
    if out.suffix.lower() not in (".html", ".htm"):
        raise SpecError("out", str(out), "must be an .html file")
    if not out.parent.is_dir():
        raise SpecError("out", str(out), f"its folder {out.parent} does not exist")
    if png_dir is not None:
        _check_png_dir(png_dir)


def _check_png_dir(png_dir: Path) -> None:
    if png_dir.exists() and not png_dir.is_dir():
        raise SpecError("png_dir", str(png_dir), "is a file; expected a folder")
    made = next(p for p in (png_dir, *png_dir.absolute().parents) if p.exists())
    if not made.is_dir():
        raise SpecError("png_dir", str(png_dir), f"cannot be made: {made} is a file")
    if not os.access(made, os.W_OK):
        raise SpecError("png_dir", str(png_dir), f"cannot be written ({made}: permission denied)")


def write_report(
    out: Path, page: str, charts: dict[str, Chart], png_dir: Path | None = None
) -> list[Path]:
    """Write the page and each chart as `png_dir/NAME.png`; returns the PNG paths."""
    png_dir = png_dir if png_dir is not None else default_png_dir(out)
    check_out(out, png_dir)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as err:
        raise SpecError("out", str(out), f"cannot be written ({err.strerror})") from None
    try:
        png_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, chart in charts.items():
            path = png_dir / f"{name}.png"
            path.write_bytes(chart.png)
            paths.append(path)
    except OSError as err:
        raise SpecError("png_dir", str(png_dir), f"cannot be written ({err.strerror})") from None
    return paths
