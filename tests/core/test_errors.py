"""core.errors: the one-line error names the field, the value (cut when long) and the rule."""

from __future__ import annotations

from trainbudget.core.errors import VALUE_SHOWN_CHARS, SpecError, shown


def test_the_line_names_field_value_and_rule() -> None:
    err = SpecError("steps", "ten", "must be an integer")
    assert str(err) == "steps = 'ten': must be an integer"
    assert (err.field, err.value, err.rule) == ("steps", "ten", "must be an integer")


def test_a_long_value_is_cut_and_its_length_stated() -> None:
    """Issue 15, item 9: a 50 MB config value was echoed whole in the error line."""
    value = "x" * 50_000_000
    err = SpecError("model", value, "unknown")
    assert len(str(err)) < VALUE_SHOWN_CHARS + 100
    assert str(err).endswith("... (50,000,002 characters): unknown")
    assert err.value is value  # the value itself is kept whole
    assert shown("x" * 10) == repr("x" * 10)
