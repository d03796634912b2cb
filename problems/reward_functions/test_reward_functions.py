"""Hidden tests for reward_functions. The implementation arrives through the `impl` fixture."""

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

GOOD = "<think>6 times 7</think><answer>42</answer>"


def assert_rewards(got, expected, what="rewards"):
    """A list of Python floats, one per completion, equal to `expected`."""
    if not isinstance(got, list):
        raise AssertionError(f"{what} should be a list, got {type(got).__name__}")
    if len(got) != len(expected):
        raise AssertionError(f"{what} should have {len(expected)} entries, got {len(got)}")
    for i, (value, want) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(value, float):
            raise AssertionError(f"{what}[{i}] should be a float, got {type(value).__name__}")
        assert_scalar(value, want, what=f"{what}[{i}]")


def format_of(impl, text, **kwargs):
    return impl.format_reward([text], **kwargs)[0]


def correct_of(impl, text, answer, **kwargs):
    return impl.correctness_reward([text], [answer], **kwargs)[0]


# ----- format_reward -----


def test_well_formed_completion_gets_both_parts(impl):
    assert_rewards(impl.format_reward([GOOD]), [1.0])


def test_one_reward_per_completion_in_order(impl):
    completions = [GOOD, "<think>only thinking</think>", "<answer>7</answer>", "plain text"]
    assert_rewards(impl.format_reward(completions), [1.0, 0.5, 0.5, 0.0])


def test_rewards_are_configurable(impl):
    assert_rewards(
        impl.format_reward([GOOD, "<think>x</think>", "<answer>1</answer>"], 0.2, 0.7),
        [0.9, 0.2, 0.7],
    )
    assert_rewards(impl.format_reward([GOOD], think_reward=1.0, answer_reward=2.0), [3.0])


def test_empty_list_gives_empty_list(impl):
    assert_rewards(impl.format_reward([]), [])


def test_whitespace_around_and_between_blocks_is_allowed(impl):
    text = "  \n<think>\nLet me think.\n</think>\n\n<answer> 42 </answer>\n"
    assert_rewards(impl.format_reward([text]), [1.0])


def test_multiline_content_is_allowed(impl):
    text = "<think>step 1\nstep 2\n\nstep 3</think><answer>line one\nline two</answer>"
    assert_rewards(impl.format_reward([text]), [1.0])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>  </think><answer>4</answer>", 0.5),  # blank reasoning
        ("<think></think><answer>4</answer>", 0.5),
        ("<think>so</think><answer> \n </answer>", 0.5),  # blank answer
        ("<think>so</think><answer></answer>", 0.5),
    ],
)
def test_blank_content_does_not_count(impl, text, expected):
    assert_rewards(impl.format_reward([text]), [expected], what=repr(text))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Sure! <think>a</think><answer>1</answer>", 0.5),  # text before the think block
        ("<think>a</think><answer>1</answer> Done.", 0.5),  # text after the answer block
        ("<think>a</think> so: <answer>1</answer>", 0.5),  # text between the blocks
        ("<answer>1</answer><think>a</think>", 0.0),  # blocks in the wrong order
        ("<think>a<answer>1</answer></think>", 0.0),  # answer nested in the thinking
        ("<answer><think>a</think>1</answer>", 0.0),  # thinking nested in the answer
    ],
)
def test_position_and_order_of_the_blocks(impl, text, expected):
    assert_rewards(impl.format_reward([text]), [expected], what=repr(text))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a</think><think>b</think><answer>1</answer>", 0.5),
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.5),
        ("<think>a</think></think><answer>1</answer>", 0.5),
        ("<think><think>a</think><answer>1</answer>", 0.5),
        ("<think>a</think><answer>1</answer></answer>", 0.5),
        ("<think>a<think>b</think></think><answer>1</answer>", 0.5),
    ],
)
def test_duplicate_or_nested_tags_spoil_their_part(impl, text, expected):
    assert_rewards(impl.format_reward([text]), [expected], what=repr(text))


@pytest.mark.parametrize(
    "text",
    [
        "<think>a<answer>1</answer>",  # unclosed think
        "</think>a<think><answer>1",
        "<Think>a</Think><Answer>1</Answer>",  # tags are case-sensitive
        "< think>a</ think><answer >1</answer >",
        "<think>a</answer><answer>1</think>",
        "",
    ],
)
def test_malformed_completions_get_zero(impl, text):
    assert_rewards(impl.format_reward([text]), [0.0], what=repr(text))


def test_unclosed_tag_does_not_spoil_the_other_part(impl):
    assert_rewards(impl.format_reward(["<think>a</think><answer>1"]), [0.5])
    assert_rewards(impl.format_reward(["<think>a<answer>1</answer>"]), [0.0])


@pytest.mark.parametrize("bad", [None, 42, 3.5, b"<answer>1</answer>", ["<answer>1</answer>"]])
def test_non_string_completion_gets_zero_without_raising(impl, bad):
    assert_rewards(impl.format_reward([GOOD, bad, GOOD]), [1.0, 0.0, 1.0])


def test_a_bare_string_is_rejected_with_type_error(impl):
    with pytest.raises(TypeError):
        impl.format_reward(GOOD)


# ----- extract_answer -----


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD, "42"),
        ("<answer>  -3 \n</answer>", "-3"),
        ("no thinking here <answer>1,234</answer> trailing text", "1,234"),
        ("<think>x</think><answer>The answer is 5</answer>", "The answer is 5"),
    ],
)
def test_extract_answer_returns_the_stripped_content(impl, text, expected):
    got = impl.extract_answer(text)
    assert got == expected, f"extract_answer({text!r}) should be {expected!r}, got {got!r}"


@pytest.mark.parametrize(
    "text",
    [
        "<think>x</think>42",
        "<answer>1</answer><answer>2</answer>",
        "<answer>1",
        "</answer>1<answer>",
        "<answer> </answer>",
        "<answer><think>1</think></answer>",
        None,
        17,
    ],
)
def test_extract_answer_gives_none_without_one_well_formed_answer(impl, text):
    got = impl.extract_answer(text)
    assert got is None, f"extract_answer({text!r}) should be None, got {got!r}"


# ----- correctness_reward -----


def test_correct_and_wrong_answers(impl):
    completions = [GOOD, "<think>x</think><answer>41</answer>", GOOD]
    assert_rewards(impl.correctness_reward(completions, [42, 42, 7]), [1.0, 0.0, 0.0])


def test_correctness_reward_is_configurable(impl):
    assert_rewards(impl.correctness_reward([GOOD, GOOD], [42, 1], reward=2.5), [2.5, 0.0])


def test_correctness_ignores_the_format_of_the_rest(impl):
    assert_scalar(correct_of(impl, "I think <answer>42</answer> is it.", 42), 1.0)


@pytest.mark.parametrize(
    "answer_text, truth",
    [
        ("1,234", 1234),
        ("1,234,567", "1234567"),
        ("1,234.5", 1234.5),
        ("  42\n", 42),
        ("-3", -3),
        ("+3", 3),
        ("2.50", 2.5),
        ("2.5", "2.50"),
        ("0.1", 0.1),
        ("72.0", 72),
        ("-0", 0),
        ("007", 7),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_numbers_that_match(impl, answer_text, truth):
    got = correct_of(impl, f"<think>t</think><answer>{answer_text}</answer>", truth)
    assert_scalar(got, 1.0, what=f"reward for {answer_text!r} against {truth!r}")


@pytest.mark.parametrize(
    "answer_text, truth",
    [
        ("$42", 42),
        ("42%", 42),
        ("42 apples", 42),
        ("x = 42", 42),
        ("4 2", 42),
        ("- 3", -3),
        ("1e3", 1000),
        ("1_000", 1000),
        ("12,34", 1234),  # a comma that is no thousands separator
        ("1,2345", 12345),
        (",123", 123),
        (".5", 0.5),
        ("5.", 5),
        ("42/1", 42),
        ("inf", float("inf")),
        ("nan", float("nan")),
        ("٤٢", 42),  # digits of another script
        ("123456789012345678901234567891", 123456789012345678901234567890),
        ("0.30000000000000004", 0.3),
    ],
)
def test_anything_else_does_not_match(impl, answer_text, truth):
    got = correct_of(impl, f"<think>t</think><answer>{answer_text}</answer>", truth)
    assert_scalar(got, 0.0, what=f"reward for {answer_text!r} against {truth!r}")


@pytest.mark.parametrize(
    "truth", ["42", "42.0", " 42 ", 42, 42.0, np.int64(42), np.float64(42.0)], ids=repr
)
def test_ground_truth_as_int_float_or_string(impl, truth):
    assert_scalar(correct_of(impl, GOOD, truth), 1.0, what=f"reward against {truth!r}")


@pytest.mark.parametrize("truth", [None, "forty-two", "", True, [42], float("nan")], ids=repr)
def test_ground_truth_that_is_no_number_matches_nothing(impl, truth):
    assert_scalar(correct_of(impl, GOOD, truth), 0.0, what=f"reward against {truth!r}")


def test_bool_ground_truth_is_no_number(impl):
    # True == 1 in Python, but a bool is no answer.
    assert_scalar(correct_of(impl, "<answer>1</answer>", True), 0.0, what="reward against True")


@pytest.mark.parametrize(
    "text",
    [
        "<think>42</think>",
        "<answer>42</answer><answer>42</answer>",
        "<answer>41</answer><answer>42</answer>",
        "<answer>42",
        "42",
    ],
)
def test_no_well_formed_answer_gets_zero(impl, text):
    assert_scalar(correct_of(impl, text, 42), 0.0, what=f"reward for {text!r}")


@pytest.mark.parametrize("bad", [None, 42, b"<answer>42</answer>"])
def test_non_string_completion_scores_zero(impl, bad):
    assert_rewards(impl.correctness_reward([GOOD, bad], [42, 42]), [1.0, 0.0])


@pytest.mark.parametrize("lengths", [(2, 1), (1, 2), (0, 1)], ids=str)
def test_length_mismatch_raises_value_error(impl, lengths):
    with pytest.raises(ValueError):
        impl.correctness_reward([GOOD] * lengths[0], [42] * lengths[1])


def test_correctness_returns_floats_even_for_zero(impl):
    assert_rewards(impl.correctness_reward([GOOD, "no"], [1, 1]), [0.0, 0.0])
