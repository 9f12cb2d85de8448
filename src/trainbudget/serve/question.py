"""The planner page's inputs, read from a request and checked for shape only: the values stay
text ("15T", "80GB", "$2.5") because the estimator parses units itself, in one place, and its
errors then name the field exactly as the command line does."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields

from trainbudget.core.errors import SpecError, unknown_key

MAX_INPUT_CHARS = 1_000_000
"""Longest value accepted for one input: a Hugging Face config.json is a few KB, so a megabyte
of text is a mistake (or an attack), refused before it is parsed."""


@dataclass(frozen=True, kw_only=True)
class Question:
    """One planning question as typed on the page. An empty string means "not given": the
    estimator's own default applies and its answer says which it chose."""

    model: str = "llama-3-8b"
    """A preset name (`trainbudget models`); ignored when `config` is given."""
    config: str = ""
    """A pasted or uploaded Hugging Face config.json, as text."""
    gpu: str = ""
    gpus: str = ""
    tokens: str = ""
    seq_len: str = ""
    global_batch: str = ""
    framework: str = ""
    precision: str = ""
    recompute: str = ""
    price_per_gpu_hour: str = ""

    def config_mapping(self) -> dict | None:
        """The pasted config.json as a dict, or None when none was pasted."""
        if not self.config.strip():
            return None
        try:
            value = json.loads(self.config)
        except json.JSONDecodeError as err:
            raise SpecError(
                "config",
                None,
                f"is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})",
            ) from None
        except RecursionError:
            raise SpecError("config", None, "is not usable JSON: nested too deeply") from None
        if not isinstance(value, dict):
            raise SpecError("config", None, "must hold a JSON object ({...}), as config.json does")
        return value

    def given(self) -> dict[str, str]:
        """The inputs given, other than the model and config: field -> text."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("model", "config") and getattr(self, f.name)
        }


INPUTS = tuple(f.name for f in fields(Question))


def question_from(params: Mapping[str, object]) -> Question:
    """A Question from a request's inputs (a JSON object or a query string's pairs). An input
    the page does not have is an error, not ignored: a misspelt one would silently fall back to
    a default."""
    values: dict[str, str] = {}
    for name, raw in params.items():
        if name not in INPUTS:
            raise unknown_key(name, str(raw), INPUTS)
        text = "" if raw is None else str(raw)
        if len(text) > MAX_INPUT_CHARS:
            raise SpecError(name, None, f"is {len(text):,} characters; at most {MAX_INPUT_CHARS:,}")
        values[name] = text.strip() if name != "config" else text
    return Question(**values)


def field_of(err: SpecError) -> str:
    """The page input an error belongs to: '--seq-len' -> 'seq_len', 'model' -> 'model'. A field
    that is no input (a model field, say) is returned as it is; the page shows it at the top."""
    name = err.field.lstrip("-").replace("-", "_")
    if name == "model" or name.startswith("config"):
        return "config" if name.startswith("config") else "model"
    return name
