"""The embedded default corpus: English text every Python installation already has.

`pydoc_data.topics.topics` is the text `help()` shows for the language reference topics
(statements, operators, special methods, ...): Python's own reference documentation, generated
from the CPython docs (https://docs.python.org/3/reference/, PSF License Version 2,
https://docs.python.org/3/license.html). About 0.47 MB in 79 topics on Python 3.11 (the size
varies with the Python version). Nothing is downloaded, so a first training run works offline.
"""

from __future__ import annotations

import sys

from trainbudget.core.errors import SpecError

DEFAULT_SOURCE_NAME = "python-docs"
DOCUMENT_SEPARATOR = "\n\n"


def default_topics() -> list[str]:
    """One document per reference topic, in sorted topic-name order (stable across runs)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions split pydoc_data out of the standard library
        raise SpecError(
            "sources", "(none)", "the embedded corpus needs pydoc_data; give text files instead"
        ) from None
    return [topics[key] for key in sorted(topics)]


def default_corpus() -> str:
    """Python's reference documentation (`pydoc_data.topics.topics`, PSF License) as one string:
    the topics joined in sorted key order with blank lines between them."""
    return DOCUMENT_SEPARATOR.join(default_topics())


def default_corpus_origin() -> str:
    """Where the embedded corpus comes from, as recorded in meta.json."""
    return f"pydoc_data.topics (Python {sys.version_info.major}.{sys.version_info.minor})"
