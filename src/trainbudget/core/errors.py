"""The one error type of the core: names the field, the value and the rule it broke."""

from __future__ import annotations


class SpecError(ValueError):
    """Bad input. `field` names what was wrong, `value` what was given, `rule` what is required.

    The CLI prints `str(err)` on one line and exits with code 2.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field} = {shown(value)}: {rule}")


VALUE_SHOWN_CHARS = 300
"""An error line quotes at most this much of the value: a 50 MB string from a settings file
is named by its start and its length, not echoed whole."""


def shown(value: object) -> str:
    """`repr(value)`, cut to VALUE_SHOWN_CHARS with the full length stated."""
    text = repr(value)
    if len(text) <= VALUE_SHOWN_CHARS:
        return text
    return f"{text[:VALUE_SHOWN_CHARS]}... ({len(text):,} characters)"


def unknown_key(field: str, value: str, known: list[str] | tuple[str, ...]) -> SpecError:
    """An unknown table key: the error lists the known ones."""
    return SpecError(field, value, "unknown; known: " + ", ".join(sorted(known)))
