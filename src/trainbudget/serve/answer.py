"""The one place the planner page gets its numbers: a Question in, the estimate's JSON document
out, exactly as the API's `estimate(..., explain=True).to_json()` writes it (which is
`trainbudget estimate --json --explain`'s document).

Answers are cached by question: the estimator is a pure function of its inputs (no clock, no
randomness in the document), so a repeated question gets the identical document. The cache
holds the encoded bytes, so no caller can alter a cached answer in place."""

from __future__ import annotations

import json
from functools import lru_cache

from trainbudget.serve.question import Question

CACHED_ANSWERS = 128
"""Questions kept: a page session moves a few inputs back and forth. An answer document is
6 KB (one GPU) to 25 KB (a 1,024-GPU plan with its five ranked plans), measured, so the
cache stays under ~3 MB."""


def answer(question: Question) -> dict:
    """The estimate document for `question` (a fresh dict each call), or a SpecError."""
    return json.loads(answer_bytes(question))


def answer_bytes(question: Question) -> bytes:
    """The estimate document as UTF-8 JSON, cached by question."""
    return _cached(question)


@lru_cache(maxsize=CACHED_ANSWERS)
def _cached(question: Question) -> bytes:
    return json.dumps(_estimate_json(question)).encode()


def clear_cache() -> None:
    """Forget every cached answer (tests and benchmarks time the uncached path)."""
    _cached.cache_clear()


def _estimate_json(question: Question) -> dict:
    """The API's answer, with the derivation (`explain=True`, as `--explain --json`)."""
    from trainbudget.api import estimate

    model = question.config_mapping() or question.model
    return estimate(model, explain=True, **question.given()).to_json()
