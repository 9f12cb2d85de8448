"""No tracked text file keeps a merge-conflict marker: a merge once committed README.md with
`<<<<<<< HEAD` in it and every other test passed (the README tests read its console blocks,
not its prose)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7}|>{7}) ", re.M)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".txt", ".cfg", ".yml", ".yaml", ".sh", ""}


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):  # a source tree without git
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [ROOT / line for line in out.splitlines()]


def test_no_file_keeps_a_conflict_marker():
    found = []
    for path in _tracked():
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [
            f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
            for m in MARKER.finditer(text)
        ]
    assert not found, "merge-conflict markers: " + ", ".join(found)
