"""The page's inputs: what a request may carry and how an error finds its field."""

import pytest

from trainbudget.core.errors import SpecError
from trainbudget.serve.question import MAX_INPUT_CHARS, Question, field_of, question_from


def test_inputs_stay_text_and_unstated_ones_are_left_out():
    q = question_from({"gpus": " 1024 ", "tokens": "15T", "seq_len": ""})
    assert q.gpus == "1024" and q.tokens == "15T"
    assert q.given() == {"gpus": "1024", "tokens": "15T"}  # empty = the estimator's default


def test_an_input_the_page_does_not_have_is_refused_not_ignored():
    with pytest.raises(SpecError) as err:
        question_from({"gpu_count": "8"})
    assert err.value.field == "gpu_count"
    assert "unknown" in str(err.value) and "gpus" in str(err.value)  # lists the known inputs


def test_a_huge_value_is_refused_before_it_is_parsed():
    with pytest.raises(SpecError, match="at most 1,000,000"):
        question_from({"config": "x" * (MAX_INPUT_CHARS + 1)})


@pytest.mark.parametrize(
    ("text", "rule"),
    [("{not json", "is not valid JSON"), ("[1, 2]", "must hold a JSON object")],
)
def test_a_bad_pasted_config_names_the_config_field(text, rule):
    with pytest.raises(SpecError, match=rule) as err:
        Question(config=text).config_mapping()
    assert err.value.field == "config"
    assert "\n" not in str(err.value)


def test_a_pasted_config_is_read_as_a_mapping():
    assert Question(config='{"model_type": "llama"}').config_mapping() == {"model_type": "llama"}
    assert Question(config="  ").config_mapping() is None


@pytest.mark.parametrize(
    ("field", "input_name"),
    [("--seq-len", "seq_len"), ("gpus", "gpus"), ("model", "model"), ("config", "config"),
     ("--price-per-gpu-hour", "price_per_gpu_hour"), ("n_heads", "n_heads")],
)  # fmt: skip
def test_an_error_is_shown_next_to_the_input_it_names(field, input_name):
    assert field_of(SpecError(field, "x", "rule")) == input_name
