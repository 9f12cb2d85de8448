"""Re-run every `$ trainbudget ...` command in README.md's console blocks and put its real
output back under it, so the worked examples never drift from what the tool prints.

    python scripts/refresh_readme.py        # rewrites README.md
    python scripts/refresh_readme.py --check  # exit 1 if any block is out of date
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```console\n\$ (trainbudget [^\n]*)\n(.*?)```", re.DOTALL)
# lines that change from run to run (wall-clock timings) are compared without their numbers
VOLATILE = re.compile(r"evaluated in [0-9.]+ s")


def run(command: str) -> str:
    argv = shlex.split(command)
    pipe = None
    if "|" in argv:  # "trainbudget ... | head -25" / "| tail -1"
        i = argv.index("|")
        argv, pipe = argv[:i], argv[i + 1 :]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "trainbudget", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    text = out.stdout + out.stderr
    if pipe:
        text = subprocess.run(pipe, input=text, capture_output=True, text=True).stdout
    return text


def main() -> int:
    path = ROOT / "README.md"
    readme = path.read_text()
    stale = []

    def replace(m: re.Match) -> str:
        fresh = run(m.group(1))
        if VOLATILE.sub("", fresh) != VOLATILE.sub("", m.group(2)):
            stale.append(m.group(1))
        return f"```console\n$ {m.group(1)}\n{fresh}```"

    updated = BLOCK.sub(replace, readme)
    if "--check" in sys.argv:
        for c in stale:
            print(f"out of date: {c}")
        return 1 if stale else 0
    path.write_text(updated)
    print(f"{len(BLOCK.findall(readme))} blocks, {len(stale)} refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
