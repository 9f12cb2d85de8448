"""Re-run every `$ trainbudget ...` command in README.md's console blocks and put its real
output back under it, so the worked examples never drift from what the tool prints.

README.zh-CN.md carries the same console blocks (commands and output are not translated): each
of its blocks is set to README.md's block for the same command, byte for byte, or to the fresh
output where README.md has no such command. The console blocks of docs/ (English and zh-CN)
are refreshed the same way. Each command runs once for all the files.

    python scripts/refresh_readme.py        # rewrites README.md, README.zh-CN.md and docs/
    python scripts/refresh_readme.py --check  # exit 1 if any block of any of them is out of date
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


def updates(check: bool) -> tuple[dict[Path, str], list[str]]:
    """The refreshed text of every file with console blocks, and "file: command" for each block
    that was out of date. With `check`, the Chinese README is compared with README.md as it is
    on disk; otherwise with README.md as refreshed."""
    outputs: dict[str, str] = {}

    def fresh(command: str) -> str:
        if command not in outputs:
            outputs[command] = run(command)
        return outputs[command]

    new: dict[Path, str] = {}
    stale: list[str] = []
    readme = ROOT / "README.md"
    text = readme.read_text()
    new[readme], readme_stale = refresh(text, fresh)
    stale += [f"README.md: {c}" for c in readme_stale]
    english = {m.group(1): m.group(2) for m in BLOCK.finditer(text if check else new[readme])}
    zh = ROOT / "README.zh-CN.md"
    if zh.exists():
        zh_text = zh.read_text()
        new[zh], _ = refresh(zh_text, lambda c: english[c] if c in english else fresh(c))
        stale += [f"README.zh-CN.md: {c}" for c in stale_copies(zh_text, english, fresh)]
    for doc in sorted((ROOT / "docs").rglob("*.md")):  # docs/ and docs/zh-CN/
        doc_text = doc.read_text()
        if BLOCK.search(doc_text):
            new[doc], doc_stale = refresh(doc_text, fresh)
            stale += [f"{doc.relative_to(ROOT)}: {c}" for c in doc_stale]
    return new, stale


def main() -> int:
    check = "--check" in sys.argv
    new, stale = updates(check)
    if check:
        for line in stale:
            print(f"out of date: {line}")
        return 1 if stale else 0
    for path, text in new.items():
        if path.read_text() != text:
            path.write_text(text)
    print(f"{len(new)} files, {len(stale)} blocks refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
