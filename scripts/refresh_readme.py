"""Re-run every `$ trainbudget ...` command in README.md's console blocks and put its real
output back under it, so the worked examples never drift from what the tool prints.

README.zh-CN.md carries the same console blocks (commands and output are not translated): each
of its blocks is set to README.md's block for the same command, byte for byte, or to the fresh
output where README.md has no such command. Each command runs once for both files.

    python scripts/refresh_readme.py        # rewrites README.md and README.zh-CN.md
    python scripts/refresh_readme.py --check  # exit 1 if any block of either is out of date
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


def refresh(text: str, output_for) -> tuple[str, list[str]]:
    """`text` with every console block's output replaced by `output_for(command)`, and the
    commands whose block differed (timings aside)."""
    stale = []

    def replace(m: re.Match) -> str:
        fresh = output_for(m.group(1))
        if VOLATILE.sub("", fresh) != VOLATILE.sub("", m.group(2)):
            stale.append(m.group(1))
        return f"```console\n$ {m.group(1)}\n{fresh}```"

    return BLOCK.sub(replace, text), stale


def stale_copies(zh: str, english: dict[str, str], output_for) -> list[str]:
    """Commands whose block in the Chinese README differs from README.md's block for the same
    command (byte for byte) or, where README.md has no such command, from a fresh run."""
    stale = []
    for m in BLOCK.finditer(zh):
        command, block = m.group(1), m.group(2)
        if command in english:
            differs = block != english[command]
        else:
            differs = VOLATILE.sub("", block) != VOLATILE.sub("", output_for(command))
        if differs:
            stale.append(command)
    return stale


def main() -> int:
    check = "--check" in sys.argv
    outputs: dict[str, str] = {}

    def fresh(command: str) -> str:
        if command not in outputs:
            outputs[command] = run(command)
        return outputs[command]

    path = ROOT / "README.md"
    readme = path.read_text()
    updated, stale = refresh(readme, fresh)
    # the Chinese README copies the English blocks exactly: as written (--check) or as refreshed
    english = {m.group(1): m.group(2) for m in BLOCK.finditer(readme if check else updated)}
    zh_path = ROOT / "README.zh-CN.md"
    zh_updated, zh_stale = None, []
    if zh_path.exists():
        zh = zh_path.read_text()
        zh_updated, _ = refresh(zh, lambda c: english[c] if c in english else fresh(c))
        zh_stale = stale_copies(zh, english, fresh)
    if check:
        for c in stale:
            print(f"out of date: {c}")
        for c in zh_stale:
            print(f"out of date in README.zh-CN.md: {c}")
        return 1 if stale or zh_stale else 0
    path.write_text(updated)
    print(f"{len(BLOCK.findall(readme))} blocks, {len(stale)} refreshed")
    if zh_updated is not None:
        zh_path.write_text(zh_updated)
        print(
            f"README.zh-CN.md: {len(BLOCK.findall(zh_updated))} blocks, {len(zh_stale)} refreshed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
