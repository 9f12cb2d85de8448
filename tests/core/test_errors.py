"""The core's one error type and its table lookups: exact key, then case ignored, then an
error that lists the known keys with the nearest first."""

from __future__ import annotations

import pytest

from trainbudget.core.errors import (
    VALUE_SHOWN_CHARS,
    SpecError,
    close_keys,
    folded_key,
    lookup,
    shown,
    unknown_key,
)

TABLE = {"h100-sxm": 1, "h100-pcie": 2, "a100-80gb": 3}


def test_a_given_value_is_quoted_and_a_missing_one_is_not_printed_as_none() -> None:
    assert str(SpecError("gpus", "0", "must be a positive integer")) == (
        "gpus = '0': must be a positive integer"
    )
    assert str(SpecError("--tokens", None, "is needed")) == "--tokens: is needed"


def test_lookup_takes_the_exact_key_then_the_one_equal_ignoring_case() -> None:
    assert lookup("gpu", "h100-sxm", TABLE) == 1
    assert lookup("gpu", "H100-SXM", TABLE) == 1
    assert folded_key("A100-80GB", TABLE) == "a100-80gb"


def test_two_keys_equal_ignoring_case_are_not_guessed_between() -> None:
    table = {"Mixed": 1, "mixed": 2}
    assert lookup("name", "mixed", table) == 2  # exact wins
    assert folded_key("MIXED", table) is None
    with pytest.raises(SpecError):
        lookup("name", "MIXED", table)


def test_a_near_miss_is_told_what_it_nearly_spelled() -> None:
    with pytest.raises(SpecError) as err:
        lookup("gpu", "h100", TABLE)
    assert err.value.field == "gpu"
    assert "did you mean h100-pcie or h100-sxm?" in err.value.rule
    assert err.value.rule.endswith("known: a100-80gb, h100-pcie, h100-sxm")


def test_a_far_miss_just_lists_the_known_keys() -> None:
    assert close_keys("v100", TABLE) == []
    assert (
        unknown_key("gpu", "v100", TABLE).rule == "unknown; known: a100-80gb, h100-pcie, h100-sxm"
    )


def test_a_non_string_name_is_an_unknown_key() -> None:
    with pytest.raises(SpecError):
        lookup("gpu", None, TABLE)


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
