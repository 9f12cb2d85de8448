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
        super().__init__(f"{field} = {value!r}: {rule}")


def unknown_key(field: str, value: str, known: list[str] | tuple[str, ...]) -> SpecError:
    """An unknown table key: the error lists the known ones."""
    return SpecError(field, value, "unknown; known: " + ", ".join(sorted(known)))
