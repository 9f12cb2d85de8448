"""README.zh-CN.md is a full Chinese README: it mentions every command and long flag of
README.md, its console blocks are README.md's byte for byte (commands and real output are not
translated), it opens with the same set-up commands, and the two files link to each other.

scripts/refresh_readme.py keeps the console blocks of both files up to date
(test_readme.py runs its --check).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EN = ROOT / "README.md"
ZH = ROOT / "README.zh-CN.md"

FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`]+)`")  # may span a line break, as README.md's do
# `trainbudget estimate`, `.venv/bin/trainbudget plan`, `trainbudget data prepare`
SUBCOMMAND = re.compile(r"\btrainbudget ([a-z][a-z-]*)(?: ([a-z]+)\b(?![-:]))?")
LAUNCHER = re.compile(r"(?<![\w-])(torchrun|-m trainbudget(?:\.[a-z_]+)?)\b")
LONG_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def code_spans(text: str) -> list[str]:
    """Fenced blocks and inline code of a Markdown text."""
    blocks = [m.group(2) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    return blocks + [" ".join(m.group(1).split()) for m in INLINE.finditer(prose)]


def commands(text: str) -> set[str]:
    """Every `trainbudget SUBCOMMAND [ACTION]` and launcher (torchrun, -m trainbudget)
    written as code."""
    found = set()
    for code in code_spans(text):
        for line in code.splitlines():
            for m in SUBCOMMAND.finditer(line):
                found.add(f"trainbudget {m.group(1)}")
                if m.group(1) == "data" and m.group(2):
                    found.add(f"trainbudget data {m.group(2)}")
            found.update(m.group(1) for m in LAUNCHER.finditer(line))
    return found


def long_flags(text: str) -> set[str]:
    return set(LONG_FLAG.findall(text))


def console_blocks(text: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == "console"]


def first_sh_block(text: str) -> str:
    return next(m.group(2) for m in FENCE.finditer(text) if m.group(1) == "sh")


def missing_commands(en: str, zh: str) -> set[str]:
    return commands(en) - commands(zh)


def missing_flags(en: str, zh: str) -> set[str]:
    return long_flags(en) - long_flags(zh)


# ---------------------------------------------------------------- (a) commands and flags


def test_the_extraction_sees_the_commands_readme_documents():
    en = EN.read_text()
    cmds = commands(en)
    for expected in ("trainbudget estimate", "trainbudget plan", "trainbudget train"):
        assert expected in cmds
    assert {"trainbudget data prepare", "torchrun", "-m trainbudget"} <= cmds
    assert {"--json", "--explain", "--calibration", "--strategy"} <= long_flags(en)


def test_every_command_of_the_english_readme_is_in_the_chinese_one():
    assert missing_commands(EN.read_text(), ZH.read_text()) == set()


def test_every_long_flag_of_the_english_readme_is_in_the_chinese_one():
    assert missing_flags(EN.read_text(), ZH.read_text()) == set()


def test_the_checks_catch_a_dropped_command_and_flag():
    # the two tests above must be able to fail: drop `trainbudget sample` (and its --prompt)
    zh = ZH.read_text()
    dropped = re.sub(r"`trainbudget sample [^`]*`", "`...`", zh)
    assert missing_commands(EN.read_text(), dropped) == {"trainbudget sample"}
    assert "--prompt" in missing_flags(EN.read_text(), dropped)


# ---------------------------------------------------------------- (b) console blocks


def test_each_chinese_console_block_is_an_english_one():
    english = console_blocks(EN.read_text())
    chinese = console_blocks(ZH.read_text())
    assert chinese, "README.zh-CN.md has no console blocks"
    for block in chinese:
        assert block in english, f"not in README.md:\n{block[:300]}"


# ---------------------------------------------------------------- (c) set-up commands


def test_the_set_up_commands_are_identical():
    en, zh = EN.read_text(), ZH.read_text()
    assert first_sh_block(zh) == first_sh_block(en)
    assert len(first_sh_block(en).splitlines()) == 2


# ---------------------------------------------------------------- (d) links


def test_the_two_readmes_link_to_each_other_at_the_top():
    en_top = EN.read_text().splitlines()[:3]
    zh_top = ZH.read_text().splitlines()[:3]
    assert any("](README.zh-CN.md)" in line for line in en_top), en_top
    assert any("](README.md)" in line for line in zh_top), zh_top
