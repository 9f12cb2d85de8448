"""The one error type of the core: names the field, the value and the rule it broke."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


class SpecError(ValueError):
    """Bad input. `field` names what was wrong, `value` what was given, `rule` what is required.

    The CLI prints `str(err)` on one line and exits with code 2. A value of None means nothing
    was given (a missing option), and the message is then just `field: rule`.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        given = "" if value is None else f" = {shown(value)}"
        super().__init__(f"{field}{given}: {rule}")


VALUE_SHOWN_CHARS = 300
"""An error line quotes at most this much of the value: a 50 MB string from a settings file
is named by its start and its length, not echoed whole."""


def shown(value: object) -> str:
    """`repr(value)`, cut to VALUE_SHOWN_CHARS with the full length stated."""
    text = repr(value)
    if len(text) <= VALUE_SHOWN_CHARS:
        return text
    return f"{text[:VALUE_SHOWN_CHARS]}... ({len(text):,} characters)"


def unknown_key(field: str, value: str, known: Iterable[str]) -> SpecError:
    """An unknown table key: the error lists the known ones, and the nearest first when the
    value looks like a misspelling of one ('h100' -> 'did you mean h100-sxm, ...?')."""
    known = sorted(known)
    near = close_keys(value, known)
    hint = f" (did you mean {_one_of(near)}?)" if near else ""
    return SpecError(field, value, f"unknown{hint}; known: " + ", ".join(known))


def close_keys(value: object, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` keys that `value` nearly spells, case ignored: those it begins ('h100' ->
    h100-nvl, h100-pcie, h100-sxm), then difflib's nearest."""
    import difflib  # only on an error: keeps every command's start-up light

    by_folded = {k.lower(): k for k in sorted(known)}
    text = str(value).strip().lower()
    starts = [k for k in by_folded if len(text) >= 2 and k.startswith(text)]
    near = difflib.get_close_matches(text, list(by_folded), n=n, cutoff=0.6)
    return [by_folded[k] for k in dict.fromkeys(starts + near)][:n]


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def folded_key(name: object, keys: Iterable[str]) -> str | None:
    """The key `name` names: itself when exact, else the one key equal to it ignoring case
    ('H100-SXM' -> 'h100-sxm'); None when there is no such key or more than one."""
    if not isinstance(name, str):
        return None
    keys = list(keys)
    if name in keys:
        return name
    same = [k for k in keys if k.lower() == name.lower()]
    return same[0] if len(same) == 1 else None


def lookup(field: str, name: object, table: Mapping[str, T]) -> T:
    """table[name], case ignored when that is unambiguous; else an unknown-key SpecError."""
    key = folded_key(name, table)
    if key is None:
        raise unknown_key(field, str(name), list(table))
    return table[key]
