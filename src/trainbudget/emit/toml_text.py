"""A TOML writer for the flat tables an emitter builds ({"section.key": value}); the standard
library reads TOML (tomllib) but does not write it."""

from __future__ import annotations

import json


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string of printable text is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def toml_text(values: dict[str, object], header: list[str]) -> str:
    """`header` as comment lines, then one [section] per dotted prefix, in first-seen order."""
    sections: dict[str, list[str]] = {}
    for dotted, v in values.items():
        section, _, key = dotted.rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {_value(v)}")
    lines = [f"# {h}" for h in header]
    for section, rows in sections.items():
        lines += ["", f"[{section}]", *rows]
    return "\n".join(lines) + "\n"
