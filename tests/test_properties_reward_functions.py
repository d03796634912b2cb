"""Properties of the reference reward functions, on generated texts and numbers (hypothesis)."""

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from reference.reward_functions import (
    TAGS,
    correctness_reward,
    extract_answer,
    format_reward,
    parse_number,
)

# Text that holds no tag and is not blank: fit for the inside of a block.
CONTENT = st.text(min_size=1, max_size=30).filter(
    lambda s: s.strip() and not any(tag in s for tag in TAGS)
)
WHITESPACE = st.text(alphabet=" \t\n", max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.none(), st.integers(), st.binary(max_size=20)))
def test_any_input_scores_within_bounds_and_never_raises(completion):
    (reward,) = format_reward([completion], think_reward=0.25, answer_reward=0.5)
    assert reward in (0.0, 0.25, 0.5, 0.75)
    (correct,) = correctness_reward([completion], [1], reward=2.0)
    assert correct in (0.0, 2.0)


@settings(max_examples=200, deadline=None)
@given(WHITESPACE, CONTENT, WHITESPACE, CONTENT, WHITESPACE)
def test_well_formed_template_gets_the_full_format_reward(lead, think, middle, answer, tail):
    text = f"{lead}<think>{think}</think>{middle}<answer>{answer}</answer>{tail}"
    assert format_reward([text]) == [1.0]
    assert extract_answer(text) == answer.strip()


@settings(max_examples=200, deadline=None)
@given(CONTENT, CONTENT, CONTENT)
def test_a_repeated_answer_block_never_counts(think, first, second):
    text = f"<think>{think}</think><answer>{first}</answer><answer>{second}</answer>"
    assert format_reward([text]) == [0.5]
    assert extract_answer(text) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**30), 10**30))
def test_integers_with_or_without_thousands_separators_match(value):
    for written in (str(value), f"{value:,}"):
        completion = f"<think>t</think><answer>{written}</answer>"
        assert correctness_reward([completion], [value]) == [1.0]
        assert correctness_reward([completion], [str(value)]) == [1.0]
        assert correctness_reward([completion], [value + 1]) == [0.0]


@settings(max_examples=300, deadline=None)
@given(st.decimals(-(10**9), 10**9, allow_nan=False, allow_infinity=False, places=4))
def test_trailing_zeros_do_not_change_the_value(value):
    written = f"{value:f}"
    assert parse_number(written) == value
    if "." in written:
        assert parse_number(written + "00") == value


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e12, 1e12, allow_nan=False))
def test_a_float_ground_truth_matches_its_shortest_decimal_form(value):
    if "e" in repr(value):  # exponent notation is no plain decimal number
        return
    completion = f"<answer>{repr(value)}</answer>"
    assert correctness_reward([completion], [value]) == [1.0]
    assert parse_number(repr(value)) == Decimal(repr(value))
