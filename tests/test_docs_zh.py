"""docs/zh-CN/ holds Chinese versions of docs/ pages: each pair links to each other at the top;
the reliability and validation pages keep every inline code span of the English page (test
names, paths, flags are not translated); the validation page's tables, which are the output of
`trainbudget validate --markdown` and scripts/profile_matrix.py, are the English page's tables
byte for byte (copy them over after regenerating the English ones). The Chinese README and
pages link the Chinese version of a page wherever there is one, and every relative link of
theirs resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ZH = DOCS / "zh-CN"
PAIRS = sorted(p.name for p in ZH.glob("*.md") if (DOCS / p.name).exists())
FENCE = re.compile(r"^```.*?^```$", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
# pages translated in full, whose code spans must all survive the translation
FULL = ("reliability.md", "validation.md")


def code_spans(text: str) -> set[str]:
    return set(INLINE.findall(FENCE.sub("", text)))


def tables(text: str) -> list[str]:
    """Each Markdown table (a run of lines starting with '|') as one string."""
    found, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append("\n".join(current))
            current = []
    return found + (["\n".join(current)] if current else [])


def test_the_pairs_include_the_full_translations():
    assert set(FULL) <= set(PAIRS), PAIRS


@pytest.mark.parametrize("name", PAIRS)
def test_each_pair_links_to_the_other_at_the_top(name):
    en_top = (DOCS / name).read_text(encoding="utf-8").splitlines()[:3]
    zh_top = (ZH / name).read_text(encoding="utf-8").splitlines()[:3]
    assert f"[中文](zh-CN/{name})" in "\n".join(en_top), f"docs/{name}: {en_top}"
    assert f"[English](../{name})" in "\n".join(zh_top), f"docs/zh-CN/{name}: {zh_top}"


@pytest.mark.parametrize("name", FULL)
def test_every_code_span_of_the_english_page_is_kept(name):
    en = code_spans((DOCS / name).read_text(encoding="utf-8"))
    zh = code_spans((ZH / name).read_text(encoding="utf-8"))
    assert sorted(en - zh) == [], f"docs/zh-CN/{name} lacks these spans of docs/{name}"


def test_the_check_catches_a_dropped_test_name():
    zh = (ZH / "reliability.md").read_text(encoding="utf-8")
    dropped = zh.replace("`::test_rollbacks_are_bounded`", "")
    en = code_spans((DOCS / "reliability.md").read_text(encoding="utf-8"))
    assert en - code_spans(dropped) == {"::test_rollbacks_are_bounded"}


def test_the_validation_tables_are_the_english_ones():
    en = tables((DOCS / "validation.md").read_text(encoding="utf-8"))
    zh = tables((ZH / "validation.md").read_text(encoding="utf-8"))
    assert len(en) >= 8
    assert zh == en, (
        "docs/zh-CN/validation.md's tables differ from docs/validation.md's: copy them over "
        "(`trainbudget validate --markdown`, `python scripts/profile_matrix.py`)"
    )


def chinese_files() -> list[Path]:
    return [ROOT / "README.zh-CN.md", *sorted(ZH.glob("*.md"))]


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]


@pytest.mark.parametrize("path", chinese_files(), ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    broken = [t for t in relative_links(path) if not (path.parent / t.split("#")[0]).exists()]
    assert broken == [], f"{path.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("path", chinese_files(), ids=lambda p: p.name)
def test_chinese_pages_link_the_chinese_version(path):
    """A link to docs/NAME.md from Chinese text goes to docs/zh-CN/NAME.md when that exists;
    only the language switch at the top of a page links the English one."""
    english = []
    for target in relative_links(path)[1 if path.parent == ZH else 0 :]:
        resolved = (path.parent / target.split("#")[0]).resolve()
        if resolved.parent == DOCS and (ZH / resolved.name).exists():
            english.append(target)
    assert english == [], f"{path.relative_to(ROOT)} links English pages: {english}"
