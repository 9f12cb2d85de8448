"""Read a report page back with the standard library's HTML parser: its element ids, images,
text, and any reference to a resource outside the file."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html.parser import HTMLParser

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOID = {"meta", "img", "br", "hr", "link", "input", "source", "col", "area", "base", "wbr"}
URL_ATTRIBUTES = {"src", "href", "srcset", "action", "poster", "data"}


@dataclass
class Page:
    ids: set[str] = field(default_factory=set)
    images: list[str] = field(default_factory=list)
    """The src of every <img>."""
    external: list[str] = field(default_factory=list)
    """Attribute values that point outside the file (http:, https:, //host, file:)."""
    tags: set[str] = field(default_factory=set)
    text: str = ""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.open: list[str] = []
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.add(tag)
        if tag not in VOID:
            self.open.append(tag)
        for name, value in attrs:
            value = value or ""
            if name == "id":
                assert value not in self.page.ids, f"duplicate id {value}"
                self.page.ids.add(value)
            if tag == "img" and name == "src":
                self.page.images.append(value)
            if name in URL_ATTRIBUTES and value.lower().startswith(
                ("http:", "https:", "//", "file:")
            ):
                self.page.external.append(value)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1:]}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def parse_page(html: str) -> Page:
    """The page's ids, images and text; asserts every element is closed in order."""
    p = _Parser()
    p.feed(html)
    p.close()
    assert p.open == [], f"unclosed elements: {p.open}"
    p.page.text = " ".join(" ".join(p.chunks).split())
    return p.page


def assert_self_contained(html: str, page: Page) -> None:
    assert not page.external, page.external
    assert "script" not in page.tags and "link" not in page.tags
    assert "url(" not in html and "@import" not in html  # nothing fetched by the stylesheet
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :])[:8] == PNG_SIGNATURE
